// One data set: the image grid (pages of 100, filters, multi-select for bulk changes), its labels with counts
// and a chart, uploads of images and videos, and frame capture from a video's player.
import { useEffect, useRef, useState } from "preact/hooks";
import {
  api, ApiError, json, MAX_EPOCHS, type AutoLabelRun, type DataSet, type Deployment, type Device, type Estimate, type ImagePage, type Model, type Split, type Status,
  type LabelCount, type UploadResult, type Video,
} from "../api";
import { LabelChart } from "../chart";
import { duration, Message, sendingWhile, useMessage, useOneAtATime } from "../widgets";

const PAGE = 100;
const UPLOAD_FILES = 200;
const UPLOAD_BYTES = 1024 ** 3;
const UNCLASS = " ";  // the "no class" choice of Assign class: no label's name is blank

export function DataSetPage({ datasetId, canEdit }: { datasetId: number; canEdit: boolean }) {
  const [set, setSet] = useState<DataSet | null>(null);
  const [page, setPage] = useState<ImagePage | null>(null);
  const [offset, setOffset] = useState(0);
  const [status, setStatus] = useState<Status | "reviewed-empty" | "">("");  // reviewed-empty: reviewed, nothing in it
  const [label, setLabel] = useState("");
  const [split, setSplit] = useState<Split | "">("");
  const [chosen, setChosen] = useState<Set<number>>(new Set());
  const [videos, setVideos] = useState<Video[]>([]);
  const [message, say] = useMessage();

  const filtered = status !== "" || label !== "" || split !== "";  // an empty grid is then the filters', not the set's
  const query = () => {
    const q = new URLSearchParams({ offset: String(offset), limit: String(PAGE) });
    if (status === "reviewed-empty") { q.set("status", "reviewed"); q.set("empty", "true"); }
    else if (status) q.set("status", status);
    if (label) q.set("label", label);
    if (split) q.set("split", split);
    return q;
  };
  const reload = () => Promise.all([  // done once the page shows the set as it is now
    api<DataSet>(`/api/datasets/${datasetId}`).then(setSet, (e) => say(e.message, true)),
    api<ImagePage>(`/api/datasets/${datasetId}/images?${query()}`).then((found) => {
      // a page past the end (its images deleted, or moved out of the filter): the last page there is, not an
      // empty grid that says the set has no images and "Page 2 of 1"
      if (!found.items.length && offset > 0 && offset >= found.total) setOffset(Math.max(0, Math.floor((found.total - 1) / PAGE) * PAGE));
      else setPage(found);
    }, (e) => say(e.message, true)),
    api<Video[]>(`/api/datasets/${datasetId}/videos`).then(setVideos, () => undefined),
  ]);
  useEffect(() => { void reload(); }, [datasetId, offset, status, label, split]);

  // Images go up in requests of at most UPLOAD_FILES files and UPLOAD_BYTES bytes (the server takes 1,000 files
  // and 4 GiB a request), so a folder of thousands shows its progress and a refused file costs only itself.
  const upload = (files: FileList | null) => sendingWhile(() => uploadImages(files));
  const uploadImages = async (files: FileList | null) => {
    if (!files?.length) return;
    const isImage = (file: File) => file.type.startsWith("image/") || /\.(jpe?g|png|bmp|tiff?|webp|gif)$/i.test(file.name);
    // in the order of their names (frame_2 before frame_10), as a file manager shows them: the set keeps the order
    // they are added in, and the browser hands a folder's files over in its own
    const path = (file: File) => file.webkitRelativePath || file.name;
    const images = Array.from(files).filter(isImage).sort((a, b) => path(a).localeCompare(path(b), undefined, { numeric: true }));
    const skipped = Array.from(files).filter((file) => !isImage(file)).map((file) => file.name);
    const notSent = skipped.length ? ` Not images, not sent: ${skipped.slice(0, 10).join(", ")}${skipped.length > 10 ? ` and ${skipped.length - 10} more` : ""}.` : "";
    if (!images.length) { say(`No images among the chosen files.${notSent}`, true); return; }
    let added = 0;
    const refused: string[] = [];
    try {
      for (let start = 0; start < images.length;) {
        say(`Uploading ${images.length} image(s)… ${start} sent`);
        const form = new FormData();
        let files = 0, bytes = 0;
        while (start < images.length && files < UPLOAD_FILES && (files === 0 || bytes + images[start].size <= UPLOAD_BYTES)) {
          const file = images[start++];
          form.append("files", file, path(file));
          files += 1; bytes += file.size;
        }
        const result = await api<UploadResult>(`/api/datasets/${datasetId}/images`, { method: "POST", body: form });
        added += result.added.length;
        refused.push(...result.refused);
      }
      say(`Added ${added} image(s).` + (refused.length ? ` Refused: ${refused.join("; ")}` : "") + notSent, refused.length + skipped.length > 0);
    } catch (e) { say(`Added ${added} image(s), then: ${(e as Error).message}`, true); }
    reload();
  };
  const uploadVideo = async (input: HTMLInputElement) => {
    const file = input.files?.[0];
    if (!file) return;
    const form = new FormData();
    form.append("file", file);
    say(`Uploading ${file.name}…`);
    try {
      const video = await sendingWhile(() => api<Video>(`/api/datasets/${datasetId}/videos`, { method: "POST", body: form }));
      say(`Added ${video.original_name}: ${video.duration_s.toFixed(1)} s, ${video.width}×${video.height}.`);
      reload();
    } catch (e) { say((e as Error).message, true); }
    input.value = "";
  };
  const bulk = async (body: Record<string, unknown>, done: string) => {
    try {
      const result = await api<{ changed: number }>(`/api/datasets/${datasetId}/images/bulk`, json("POST", { image_ids: [...chosen], ...body }));
      say(`${done}: ${result.changed} image(s).`);
      setChosen(new Set());
      reload();
    } catch (e) { say((e as Error).message, true); void reload(); }  // a label renamed meanwhile: shown as it is now
  };
  const augment = async () => {
    const count = Number(prompt("Variants per image (flip, rotate, blur, sharpen, colour, crop, noise at random)", "3"));
    if (!count) return;
    say(`Making ${count * chosen.size} variant(s)…`);
    try {
      const result = await api<UploadResult>(`/api/datasets/${datasetId}/augment`, json("POST", { image_ids: [...chosen], variants: count }));
      say(`Added ${result.added.length} augmented image(s).`);
      setChosen(new Set());
      reload();
    } catch (e) { say((e as Error).message, true); }
  };
  // A click toggles one image; Shift+click sets every image between it and the last one clicked the same way.
  const lastPicked = useRef<number | null>(null);
  const toggle = (id: number, range: boolean) => {
    const next = new Set(chosen);
    const on = !next.has(id);
    const ids = page?.items.map((image) => image.id) ?? [];
    const from = range && lastPicked.current !== null ? ids.indexOf(lastPicked.current) : -1;
    const to = ids.indexOf(id);
    const span = from >= 0 ? ids.slice(Math.min(from, to), Math.max(from, to) + 1) : [id];
    for (const one of span) on ? next.add(one) : next.delete(one);
    lastPicked.current = id;
    setChosen(next);
  };
  // Another filter shows other images: a selection made under the last one is dropped, so that no action reaches
  // images no longer in view (pages of one filter keep it: a selection may span them).
  const refilter = () => { setOffset(0); setChosen(new Set()); };
  const pickPage = () => setChosen(new Set([...chosen, ...(page?.items.map((image) => image.id) ?? [])]));

  if (!set) return <div><Message message={message} />{!message?.error && <p class="muted">Loading…</p>}</div>;
  const pages = page ? Math.max(1, Math.ceil(page.total / PAGE)) : 1;
  return (
    <section class="dataset-page">
      <div class="page-head">
        <h1><a href="#/">Data sets</a> › {set.name}</h1>
        <span class="counts">{set.images} images · {set.labelled} labelled</span>
        {set.to_review > 0 && <a class="button review-link" href={`#/datasets/${datasetId}/review`}>Review {set.to_review} auto-labelled</a>}
        {!canEdit && <span class="muted" data-testid="view-only" title="An editor or admin uploads, labels and trains">View only</span>}
        {canEdit && <div class="actions">
          <Train datasetId={datasetId} task={set.task} labelled={set.labelled} labels={set.labels} say={say} />
          <AutoLabel datasetId={datasetId} task={set.task} videos={videos} onProgress={reload} say={say} />
          <label class="button primary">Upload images<input type="file" accept="image/*" multiple hidden onChange={(e) => upload(e.currentTarget.files)} /></label>
          <label class="button" title="Every image in a folder (and its subfolders)">Upload folder<input type="file" multiple hidden ref={(el) => el?.setAttribute("webkitdirectory", "")} onChange={(e) => upload(e.currentTarget.files)} /></label>
          <label class="button">Upload video<input type="file" accept="video/*,.mp4,.avi,.mov,.webm,.mkv" hidden onChange={(e) => uploadVideo(e.currentTarget)} /></label>
        </div>}
      </div>
      <Message message={message} />
      <div class="columns">
        <div class="grid-column"
          onDragOver={(e) => e.preventDefault()}
          onDrop={(e) => {
            e.preventDefault();
            if (canEdit) upload(e.dataTransfer?.files ?? null);
            else say("View only: this account looks at the data set; an editor or admin adds images to it.", true);
          }}>
          <div class="filters">
            <select value={status} onChange={(e) => { refilter(); setStatus(e.currentTarget.value as Status | "reviewed-empty" | ""); }} aria-label="Status filter">
              <option value="">All images</option><option value="unlabelled">Unlabelled</option><option value="labelled">Labelled</option>
              <option value="auto">Auto-labelled</option><option value="reviewed">Reviewed</option>
              <option value="reviewed-empty">Reviewed as showing nothing</option>
            </select>
            <select value={label} onChange={(e) => { refilter(); setLabel(e.currentTarget.value); }} aria-label="Label filter">
              <option value="">Any label</option>{set.labels.map((l) => <option key={l.id} value={l.name}>{l.name}</option>)}
            </select>
            <select value={split} onChange={(e) => { refilter(); setSplit(e.currentTarget.value as Split | ""); }} aria-label="Split filter">
              <option value="">Any split</option><option value="train">train</option><option value="val">val</option><option value="test">test</option>
            </select>
            <span class="muted" data-testid="shown">{page ? `${page.items.length ? `${offset + 1}–${offset + page.items.length}` : 0} of ${page.total}` : ""}</span>
            {canEdit && page && page.items.length > 0 && <button onClick={pickPage} title="Select every image on this page (Shift+click selects a range)">Select page</button>}
            {canEdit && chosen.size > 0 && <span class="bulk">
              <strong>{chosen.size} selected</strong>
              <select aria-label="Move to split" onChange={(e) => { if (e.currentTarget.value) bulk({ action: "split", split: e.currentTarget.value }, "Moved"); e.currentTarget.value = ""; }}>
                <option value="">Move to split…</option><option value="train">train</option><option value="val">val</option><option value="test">test</option>
              </select>
              {set.task === "classify" && <select aria-label="Assign class" onChange={(e) => {
                const chosenClass = e.currentTarget.value;
                e.currentTarget.value = "";
                // a class taken off, or one given over another, is asked first: it changes labels a person made
                const other = (page?.items ?? []).filter((i) => chosen.has(i.id) && i.class_label && i.class_label !== chosenClass).length;
                if (chosenClass === UNCLASS) {
                  if (confirm(`Take the class off the ${chosen.size} image(s) chosen? They become unlabelled.`)) bulk({ action: "unclass" }, "Unlabelled");
                } else if (chosenClass && (!other || confirm(`${other} of the ${chosen.size} image(s) chosen have another class: give them all “${chosenClass}”?`))) {
                  const id = set.labels.find((l) => l.name === chosenClass)?.id;  // as loaded: renamed since, refused
                  bulk({ action: "class", class_label: chosenClass, ...(id ? { labels_seen: { [chosenClass]: id } } : {}) }, "Classified");
                }
              }}>
                <option value="">Assign class…</option>{set.labels.map((l) => <option key={l.id} value={l.name}>{l.name}</option>)}
                <option value={UNCLASS}>no class (unlabelled)</option>
              </select>}
              <button title="New images: flipped, rotated, blurred, sharpened, recoloured, cropped, noisy; boxes follow" onClick={() => augment()}>Augment…</button>
              <button class="danger" onClick={() => { if (confirm(`Delete ${chosen.size} image(s)?`)) bulk({ action: "delete" }, "Deleted"); }}>Delete</button>
              <button onClick={() => setChosen(new Set())}>Clear</button>
            </span>}
          </div>
          {page && page.items.length === 0 ? <p class="empty">{filtered
            ? "No images match these filters: clear one to see more."
            : canEdit ? "No images here yet. Upload images or a video (or drop files here)." : "No images here yet."}</p> : (
            <ul class="grid">
              {page?.items.map((image) => (
                <li key={image.id} class={chosen.has(image.id) ? "tile chosen" : "tile"}>
                  <a href={`#/datasets/${datasetId}/images/${image.id}`} title={image.original_name}>
                    <img src={image.thumbnail} alt={image.original_name} loading="lazy" width={160} height={120} />
                  </a>
                  <span class={`status ${image.status}`}>{image.class_label ?? image.status}</span>
                  {set.task === "detect" && image.status !== "unlabelled" && <span class="shape-count" data-testid="shape-count" title={`${image.shapes} box(es) or polygon(s)`}>{image.shapes}</span>}
                  {canEdit && <input type="checkbox" class="pick" checked={chosen.has(image.id)} onClick={(e) => toggle(image.id, e.shiftKey)} aria-label={`Select ${image.original_name}`} />}
                </li>
              ))}
            </ul>
          )}
          <div class="pager">
            <button disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PAGE))}>‹ Previous</button>
            <span>Page {Math.floor(offset / PAGE) + 1} of {pages}</span>
            <button disabled={!page || offset + PAGE >= page.total} onClick={() => setOffset(offset + PAGE)}>Next ›</button>
          </div>
        </div>
        <aside class="side">
          <Labels set={set} canEdit={canEdit} onChange={reload} say={say} />
          {videos.map((video) => <VideoPanel key={video.id} video={video} canEdit={canEdit} onCaptured={reload} say={say} />)}
        </aside>
      </div>
    </section>
  );
}

function Labels({ set, canEdit, onChange, say }: { set: DataSet; canEdit: boolean; onChange: () => Promise<unknown>; say: (t: string, e?: boolean) => void }) {
  const [name, setName] = useState("");
  const run = async (call: Promise<unknown>, done: string) => {
    // said once the page shows the change: the next name typed is checked against the labels as they are now
    try { await call; await onChange(); say(done); } catch (e) {
      const gone = e instanceof ApiError && e.status === 404;  // "no label 183": deleted or merged meanwhile
      say(gone ? "That label is no longer there (deleted or merged elsewhere): the labels are shown as they are now." : (e as Error).message, true);
      void onChange();
    }
  };
  // The label as it is now, before a rename, merge or delete is asked about: the panel shows it as it was loaded,
  // and a delete confirmed "its 1 use(s)" of a label grown to 5 elsewhere, or deleted the label another renamed.
  const asNow = async (label: LabelCount): Promise<LabelCount | null> => {
    const now = (await api<LabelCount[]>(`/api/datasets/${set.id}/labels`)).find((l) => l.id === label.id);
    if (now && now.name === label.name) return now;
    say(now ? `The label ${label.name} was renamed ${now.name} elsewhere: the labels are shown as they are now; choose again.`
      : `The label ${label.name} was deleted or merged elsewhere: the labels are shown as they are now.`, true);
    void onChange();
    return null;
  };
  return (
    <div class="card labels-panel">
      <h2>Labels</h2>
      <LabelChart labels={set.labels} task={set.task} canEdit={canEdit} />
      <ul class="label-list">
        {set.labels.map((label) => (
          <li key={label.id}>
            <span class="name">{label.name}</span><span class="count" title={label.unreviewed ? `${label.count} labelled or reviewed, ${label.unreviewed} more from a model waiting for review` : undefined}>{label.count}{label.unreviewed ? ` (+${label.unreviewed} to review)` : ""}</span>
            {canEdit && <span class="row-actions">
              <button title="Rename" onClick={async () => {
                if (!await asNow(label)) return;
                const n = prompt("Rename label", label.name)?.trim();
                if (n === undefined || n === label.name) return;  // cancelled, or the same name
                if (set.labels.some((l) => l.name === n)) { say(`Label “${n}” exists already: to make ${label.name} ${n}, merge it with ⇢.`, true); return; }
                run(api(`/api/labels/${label.id}`, json("PATCH", { name: n })), "Renamed.");
              }}>✎</button>
              <select title="Merge into" aria-label={`Merge ${label.name} into`} onChange={async (e) => {
                const into = +e.currentTarget.value, target = e.currentTarget.selectedOptions[0].text;
                e.currentTarget.value = "";
                if (into && await asNow(label) && confirm(`Merge ${label.name} into ${target}?`)) run(api(`/api/labels/${label.id}`, json("PATCH", { merge_into: into })), "Merged.");
              }}>
                <option value="">⇢</option>{set.labels.filter((l) => l.id !== label.id).map((l) => <option key={l.id} value={l.id}>{l.name}</option>)}
              </select>
              <button title="Delete" class="danger" onClick={async () => {
                const now = await asNow(label);
                if (now && confirm(`Delete ${now.name} and its ${now.count + now.unreviewed} use(s)?`)) run(api(`/api/labels/${label.id}`, { method: "DELETE" }), "Deleted.");
              }}>✕</button>
            </span>}
          </li>
        ))}
      </ul>
      {canEdit && <form class="inline" onSubmit={(e) => {
        e.preventDefault();
        const wanted = name.trim();
        if (set.labels.some((l) => l.name === wanted)) { say(`Label “${wanted}” exists already.`, true); return; }
        run(api(`/api/datasets/${set.id}/labels`, json("POST", { name: wanted })), `Added ${wanted}.`); setName("");
      }}>
        <input placeholder="New label" value={name} onInput={(e) => setName(e.currentTarget.value)} required aria-label="New label" />
        <button type="submit">Add</button>
      </form>}
    </div>
  );
}

function VideoPanel({ video, canEdit, onCaptured, say }: { video: Video; canEdit: boolean; onCaptured: () => void; say: (t: string, e?: boolean) => void }) {
  const player = useRef<HTMLVideoElement>(null);
  const [every, setEvery] = useState("1");  // as typed: a number field's text ("0.") is not a number while typed
  const [span, setSpan] = useState({ from: "", to: "" });  // seconds as typed; empty: the start, the end
  const [playable, setPlayable] = useState(true);  // browsers play MP4 and WebM, not AVI: then a time is typed
  const [at, setAt] = useState("0");
  const everyField = useRef<HTMLInputElement>(null);
  const spanFields = useRef<HTMLSpanElement>(null);
  const atField = useRef<HTMLInputElement>(null);
  // a field out of its range is shown as such and nothing is sent (the buttons are not a form's, which would check)
  const [capturing, once] = useOneAtATime();  // a double click captures once, and says what that did
  const capture = (body: Record<string, unknown>, ...fields: (HTMLInputElement | null | undefined)[]) => {
    if (!fields.every((field) => !field || field.reportValidity())) return;
    return once(async () => {
      say("Capturing…");
      try {
        const result = await api<{ added: unknown[]; skipped: number }>(`/api/videos/${video.id}/capture`, json("POST", body));
        say(`Captured ${result.added.length} frame(s)` + (result.skipped ? `; ${result.skipped} already captured.` : "."));
        onCaptured();
      } catch (e) { say((e as Error).message, true); }
    });
  };
  return (
    <div class="card video-panel">
      <h2>{video.original_name}</h2>
      <p class="muted">{video.duration_s.toFixed(1)} s · {video.fps.toFixed(0)} fps · {video.width}×{video.height} · {video.frames} frames captured</p>
      {playable ? <video ref={player} src={video.file} controls preload="metadata" onError={() => setPlayable(false)} />
        : <p class="muted">This browser cannot play {video.original_name}; its frames are read on the server: give a time.</p>}
      {canEdit && <div class="actions">
        {playable ? <button disabled={capturing} onClick={() => capture({ at_s: [Math.round((player.current?.currentTime ?? 0) * 1000) / 1000] })}>Capture this frame</button>
          : <label>at <input ref={atField} type="number" required min="0" max={video.duration_s} step="any" value={at} onInput={(e) => setAt(e.currentTarget.value)} aria-label="Time to capture" /> s <button disabled={capturing} onClick={() => capture({ at_s: [+at] }, atField.current)}>Capture this time</button></label>}
        <label>every <input ref={everyField} type="number" required min="0.1" step="any" value={every} onInput={(e) => setEvery(e.currentTarget.value)} aria-label="Seconds between frames" /> s</label>
        <span ref={spanFields}>
          <label>from <input type="number" min="0" max={video.duration_s} step="any" placeholder="0" value={span.from} onInput={(e) => setSpan({ ...span, from: e.currentTarget.value })} aria-label="Capture from (s)" /> s</label>{" "}
          <label>to <input type="number" min={span.from || "0"} max={video.duration_s} step="any" placeholder={String(Math.floor(video.duration_s * 1000) / 1000)} value={span.to} onInput={(e) => setSpan({ ...span, to: e.currentTarget.value })} aria-label="Capture to (s)" /> s</label>
        </span>
        <button disabled={capturing} onClick={() => capture({ every_s: +every, ...(span.from ? { from_s: +span.from } : {}), ...(span.to ? { to_s: +span.to } : {}) },
          everyField.current, ...(spanFields.current?.querySelectorAll("input") ?? []))}>Capture</button>
      </div>}
    </div>
  );
}

type Pretrained = { model: string; name: string; cached: boolean; mib: number | null };  // a model a job can start from COCO's weights
const TEXT_FIELDS = ["model", "device", "start"];  // the Train form's fields that are not numbers
const FEW = 10;  // examples of a class under which a model barely learns it: said before training starts

function Train({ datasetId, task, labelled, labels, say }: { datasetId: number; task: DataSet["task"]; labelled: number; labels: DataSet["labels"]; say: (t: string, e?: boolean) => void }) {
  const [open, setOpen] = useState(false);
  const [devices, setDevices] = useState<Device[]>([]);
  const [models, setModels] = useState<Model[]>([]);
  const [starts, setStarts] = useState<Pretrained[]>([]);
  // every field as typed (a number field's "0." reads as "" until its next digit: made a number at once, it was
  // written back as 0 and "0.0005" became 5); numbers are made when the job is sent
  const [form, setForm] = useState<Record<string, string>>(task === "detect"
    ? { model: "yolov3-tiny", start: "", epochs: "30", batch: "16", img: "320", lr: "0.001", weight_decay: "0.0005", val_share: "0.2", device: "" }
    : { model: "small-classifier", start: "", epochs: "30", batch: "32", img: "128", lr: "0.001", weight_decay: "0.0005", val_share: "0.2", device: "" });
  const [estimate, setEstimate] = useState<Estimate | null>(null);
  useEffect(() => {
    if (!open) return;
    api<Device[]>("/api/devices").then(setDevices, (e) => say(e.message, true));
    api<Model[]>(`/api/models?task=${task}`).then(setModels, () => undefined);
    api<Pretrained[]>("/api/pretrained").then(setStarts, () => undefined);
  }, [open]);
  useEffect(() => {  // how long these settings would take, from the pace of the jobs that ran here
    if (!open) return;
    const query = new URLSearchParams({ model: form.model, epochs: form.epochs, img: form.img, val_share: form.val_share });
    if (form.device) query.set("device", form.device);
    const timer = window.setTimeout(() => api<Estimate>(`/api/datasets/${datasetId}/jobs/estimate?${query}`).then(setEstimate, () => setEstimate(null)), 300);
    return () => window.clearTimeout(timer);
  }, [open, form.model, form.epochs, form.img, form.val_share, form.device]);
  const pretrained = starts.find((s) => s.model === form.model);  // COCO's weights for this model, if any
  const set = (key: string, value: string) => setForm({
    ...form, [key]: value,
    ...(key === "model" && form.start === "coco" && !starts.some((s) => s.model === value) ? { start: "" } : {}),
  });
  const [starting, once] = useOneAtATime();  // a second click while the first is on its way starts nothing
  const start = (event: Event) => {
    event.preventDefault();
    return once(async () => {
      try {
        const { start: from, ...settings } = form;
        const body: Record<string, string | number> = Object.fromEntries(Object.entries(settings)
          .filter(([k, v]) => k !== "device" || v)  // no device: the app picks
          .map(([k, v]) => [k, TEXT_FIELDS.includes(k) ? v : Number(v)]));
        if (from === "coco") body.pretrained = "coco";
        else if (from) body.from_model_id = Number(from);
        const job = await api<{ id: number }>(`/api/datasets/${datasetId}/jobs`, json("POST", body));
        location.hash = `#/jobs/${job.id}`;
      } catch (e) { say((e as Error).message, true); }
    });
  };
  if (!open) return <button onClick={() => setOpen(true)} disabled={labelled === 0} title={labelled ? "Train a model on the labelled images" : "Label some images first"}>Train…</button>;
  const number = (key: string, label: string, attrs: Record<string, string>) =>
    <label>{label} <input type="number" required {...attrs} value={form[key]} onInput={(e) => set(key, e.currentTarget.value)} /></label>;
  return (
    <form class="inline train-form card" onSubmit={start}>
      <select value={form.model} onChange={(e) => set("model", e.currentTarget.value)} aria-label="Model">
        {task === "detect" ? <>
          <option value="yolov3-tiny">Optimized for speed (YOLOv3-tiny)</option>
          <option value="yolov3-tiny-slim">Optimized for speed on CPUs (slim YOLOv3-tiny)</option>
          <option value="faster-rcnn">Optimized for accuracy (Faster R-CNN)</option>
        </> : <option value="small-classifier">Classifier (small, for CPUs)</option>}
      </select>
      <select value={form.start} onChange={(e) => set("start", e.currentTarget.value)} aria-label="Start from" title="Start from fresh weights, from COCO-trained weights (downloaded once, then kept), or from a registered model's weights; classes are matched to this data set's by name, and the others start fresh">
        <option value="">from fresh weights</option>
        {pretrained && <option value="coco">{pretrained.cached ? "from COCO-pretrained weights (downloaded already)"
          : `from COCO-pretrained weights (downloads ${pretrained.mib === null ? "once" : `${pretrained.mib} MiB once`})`}</option>}
        {models.map((m) => <option key={m.id} value={String(m.id)}>from model {m.name}</option>)}
      </select>
      {labels.some((l) => l.count < FEW) && <p class="message error small" data-testid="few-examples">
        Few examples: {labels.filter((l) => l.count < FEW).map((l) => `${l.name} (${l.count})`).join(", ")}. A model needs a few dozen of each class to learn it; label more first, or expect it to miss them.
      </p>}
      {number("epochs", "epochs", { min: "1", max: String(MAX_EPOCHS) })}
      {number("batch", "batch", { min: "1", max: "1024" })}
      {number("img", "size", { min: "32", max: "4096", step: "32" })}
      {number("lr", "lr", { min: "0", step: "any" })}
      {number("weight_decay", "weight decay", { min: "0", step: "any" })}
      {number("val_share", "validation share", { min: "0.05", max: "0.5", step: "0.05", title: "The share of the labelled images held out to validate on, when the data set has no val split of its own (a set with one keeps it)" })}
      <select value={form.device} onChange={(e) => set("device", e.currentTarget.value)} aria-label="Device" title="Jobs queue for their device: one at a time on each unless the app was started with --jobs-per-device">
        <option value="">Any free device</option>
        {devices.map((d) => <option value={d.name} key={d.name}>{d.label}{d.running + d.queued ? ` (${d.running} running, ${d.queued} queued)` : ""}</option>)}
      </select>
      <button class="primary" type="submit" disabled={starting}>Start</button><button type="button" onClick={() => setOpen(false)}>Close</button>
      {estimate && <p class="muted small" data-testid="estimate">{estimate.seconds === null ? `Time: not known yet (${estimate.basis}).` : `About ${duration(estimate.seconds)} (${estimate.basis}).`}</p>}
    </form>
  );
}

const FINISHED = ["done", "failed", "cancelled", "interrupted"];

function AutoLabel({ datasetId, task, videos, onProgress, say }: { datasetId: number; task: DataSet["task"]; videos: Video[]; onProgress: () => void; say: (t: string, e?: boolean) => void }) {
  const [open, setOpen] = useState(false);
  const [models, setModels] = useState<Model[]>([]);
  const [deployed, setDeployed] = useState<number[]>([]);
  const [form, setForm] = useState({ model_id: 0, threshold: "0.5", video_id: 0 });  // the threshold as typed
  const [run, setRun] = useState<AutoLabelRun | null>(null);
  useEffect(() => {
    if (!open) return;
    api<Model[]>(`/api/models?task=${task}`).then((found) => { setModels(found); setForm((f) => ({ ...f, model_id: f.model_id || found[0]?.id || 0 })); }, (e) => say(e.message, true));
    api<Deployment[]>("/api/deployments").then((d) => setDeployed(d.map((x) => x.model_id)), () => undefined);
  }, [open]);
  useEffect(() => {  // follow the run until it ends
    if (!run || FINISHED.includes(run.state)) return;
    const timer = window.setTimeout(() => api<AutoLabelRun>(`/api/autolabel/${run.id}`).then((r) => {
      setRun(r);
      onProgress();
      if (r.state === "done") say(`Auto-labelled ${r.done} image(s): ${r.boxes} ${task === "classify" ? "class(es)" : "box(es)"} at confidence ≥ ${r.threshold}. Review them next.`);
      else if (FINISHED.includes(r.state)) say(`Auto-label run ${r.state}${r.error ? `: ${r.error}` : ""}.`, r.state === "failed");
    }, (e) => say(e.message, true)), 1000);
    return () => window.clearTimeout(timer);
  }, [run]);
  const [starting, once] = useOneAtATime();  // a double click queues one run
  const start = (event: Event) => {
    event.preventDefault();
    return once(async () => {
      try {
        const body = { model_id: form.model_id, threshold: +form.threshold, ...(form.video_id ? { video_id: form.video_id } : {}) };
        setRun(await api<AutoLabelRun>(`/api/datasets/${datasetId}/autolabel`, json("POST", body)));
        say("Auto-labelling: the model is being served for the run…");
      } catch (e) { say((e as Error).message, true); }
    });
  };
  if (!open) return <button onClick={() => setOpen(true)} title="Let a trained model label the unlabelled images">Auto-label…</button>;
  const going = run !== null && !FINISHED.includes(run.state);
  return (
    <form class="inline train-form card" onSubmit={start}>
      <select value={form.model_id} onChange={(e) => setForm({ ...form, model_id: +e.currentTarget.value })} aria-label="Auto-label model">
        {models.length === 0 && <option value={0}>No models yet: train one first</option>}
        {models.map((m) => <option key={m.id} value={m.id}>{m.name}{deployed.includes(m.id) ? " (deployed)" : ""}</option>)}
      </select>
      <label>confidence ≥ <input type="number" required min="0" max="1" step="0.01" value={form.threshold} onInput={(e) => setForm({ ...form, threshold: e.currentTarget.value })} aria-label="Confidence threshold" /></label>
      <select value={form.video_id} onChange={(e) => setForm({ ...form, video_id: +e.currentTarget.value })} aria-label="Which images">
        <option value={0}>Every unlabelled image</option>
        {videos.map((v) => <option key={v.id} value={v.id}>Frames of {v.original_name}</option>)}
      </select>
      {going ? <>
        <progress max={run!.total || 1} value={run!.done} aria-label="Auto-label progress" />
        <span class="muted">{run!.done}/{run!.total}</span>
        <button type="button" onClick={() => api<AutoLabelRun>(`/api/autolabel/${run!.id}/cancel`, { method: "POST" }).then(setRun, (e) => say(e.message, true))}>Cancel</button>
      </> : <button class="primary" type="submit" disabled={!form.model_id || starting}>Start</button>}
      <button type="button" onClick={() => setOpen(false)}>Close</button>
    </form>
  );
}
