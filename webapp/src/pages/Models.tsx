// The model registry: every finished training job is a model; compare them side by side, rename, delete,
// export a model as a zip (its directory and its record) and import one.
import { useEffect, useRef, useState } from "preact/hooks";
import { api, json, MAX_EPOCHS, type DataSet, type Deployment, type Model } from "../api";
import { colourOf } from "../labels";
import { Message, useMessage, useOneAtATime } from "../widgets";

// What people call the figures and settings a model record holds (the API's keys are for programs).
const NAMES: Record<string, string> = {
  map50: "mAP@.5", map: "mAP@[.5:.95]", map50_small: "mAP@.5, objects under 32 px", precision: "precision",
  recall: "recall", threshold: "at score", top1: "top-1", top5: "top-5", miou: "mIoU", pixel_accuracy: "pixel accuracy",
  epochs: "epochs", batch: "batch", img: "image size", lr: "learning rate", weight_decay: "weight decay",
  optimizer: "optimiser", val_every: "validated every (epochs)", val_share: "validation share",
  from_model_id: "started from model", model: "architecture", device: "device", images: "val images",
};
const named = (key: string) => NAMES[key] ?? key.replace(/_/g, " ");
// A model's headline figure, named: a detector's mAP@.5, a classifier's top-1, a segmenter's mIoU (one mAP@.5
// column showed "–" for every classifier)
const HEADLINES = ["map50", "top1", "miou"];
const headline = (metrics: Record<string, unknown>) => {
  const key = HEADLINES.find((k) => typeof metrics[k] === "number");
  return key ? `${named(key)} ${(metrics[key] as number).toFixed(3)}` : "not measured";
};

type Answer = { detections?: { label: string; score: number; bbox: { x1: number; y1: number; x2: number; y2: number } }[]; classes?: { label: string; score: number }[]; error?: string };
type Tried = { name: string; url: string; width: number; height: number; found: Answer };

// An image tried on a deployment, with what the model answered drawn on it: each box with its label and score
// (captions kept inside the picture), or the classes.
function TriedImage({ tried }: { tried: Tried }) {
  const boxes = tried.found.detections ?? [];
  const names = [...new Set(boxes.map((d) => d.label))];  // a colour for each class found, as the editor draws them
  const size = Math.max(tried.width, tried.height) / 40;
  return (
    <div class="tried" data-testid="tried" role="status">
      <p>{tried.name}: {tried.found.error ?? (tried.found.classes ? tried.found.classes.slice(0, 3).map((c) => `${c.label} ${c.score.toFixed(2)}`).join(", ") : `${boxes.length} detection(s)`)}</p>
      <figure class="review-figure" style={{ width: `min(100%, ${Math.max(tried.width, 480)}px)`, fontSize: `${size}px` }}>
        <img src={tried.url} alt={tried.name} />
        <svg viewBox={`0 0 ${tried.width} ${tried.height}`} preserveAspectRatio="none" aria-label="What the model found">
          {boxes.map((d, i) => {
            const { x1, y1, x2, y2 } = d.bbox;
            const top = y1 < size * 1.4;  // no room above the box: the caption goes inside it
            return <g key={i} class="auto">
              <rect x={x1} y={y1} width={x2 - x1} height={y2 - y1} style={{ stroke: colourOf(names, d.label), fill: colourOf(names, d.label), fillOpacity: 0.12 }} />
              <text x={Math.min(x1 + 1, tried.width - size * 6)} y={top ? y1 + size : y1} dy={top ? "0" : "-0.25em"}>{d.label} {d.score.toFixed(2)}</text>
            </g>;
          })}
        </svg>
      </figure>
    </div>
  );
}

export function Models({ canEdit }: { canEdit: boolean }) {
  const [models, setModels] = useState<Model[] | null>(null);
  const [chosen, setChosen] = useState<number[]>([]);
  const [deployments, setDeployments] = useState<Deployment[]>([]);
  const [answer, setAnswer] = useState<Tried | null>(null);
  const [conf, setConf] = useState("");  // "": the model's own threshold
  const lastTry = useRef<{ deployment: Deployment; file: File } | null>(null);
  const [message, say, unsay] = useMessage();
  const [setNames, setSetNames] = useState<Record<number, string>>({});
  const reload = () => {
    api<Model[]>("/api/models").then(setModels, (e) => say(e.message, true));
    api<DataSet[]>("/api/datasets").then((sets) => setSetNames(Object.fromEntries(sets.map((s) => [s.id, s.name]))), () => undefined);
    api<Deployment[]>("/api/deployments").then(setDeployments, () => undefined);
  };
  const tryImage = async (deployment: Deployment, input: HTMLInputElement) => {
    const file = input.files?.[0];
    if (!file) return;
    await tryFile(deployment, file, conf);
    input.value = "";
  };
  const tryFile = async (deployment: Deployment, file: File, threshold: string) => {
    lastTry.current = { deployment, file };
    const form = new FormData();
    form.append("file", file);
    if (threshold !== "") form.append("conf", threshold);
    try {
      const result = await api<{ results?: Answer[] }>(`/api/deployments/${deployment.id}/predict`, { method: "POST", body: form });
      const url = URL.createObjectURL(file);
      // the picture's size, as the browser draws it; a format the server reads and the browser does not (TIFF)
      // is said: the page waited for it for ever, the last image's answer still shown as this one's
      const size = await new Promise<[number, number] | null>((done) => {
        const probe = new Image();
        probe.onload = () => done([probe.naturalWidth, probe.naturalHeight]);
        probe.onerror = () => done(null);
        probe.src = url;
      });
      if (answer) URL.revokeObjectURL(answer.url);
      const found = result.results?.[0] ?? {};
      if (size === null) {
        URL.revokeObjectURL(url);
        setAnswer(null);
        const count = found.detections?.length ?? found.classes?.length ?? 0;
        say(`${file.name}: the model answered (${count} found), but this browser cannot show the picture: try a JPEG or PNG to see them drawn.`, true);
        return;
      }
      unsay();  // an error about an earlier try is over
      setAnswer({ name: file.name, url, width: size[0], height: size[1], found });
    } catch (e) {
      say((e as Error).message, true);
      if (answer) URL.revokeObjectURL(answer.url);
      setAnswer(null);  // the last image's answer is not this file's
    }
  };
  const changeConf = (value: string) => {  // the image tried last is asked again at the new threshold
    setConf(value);
    if (lastTry.current) void tryFile(lastTry.current.deployment, lastTry.current.file, value);
  };
  useEffect(() => { reload(); }, []);
  const [deploying, deployOnce] = useOneAtATime();  // a double click starts one deployment
  const act = async (call: Promise<unknown>, done: string) => {
    try { await call; say(done); reload(); } catch (e) { say((e as Error).message, true); }
  };
  const importZip = async (input: HTMLInputElement) => {
    const file = input.files?.[0];
    if (!file) return;
    const form = new FormData();
    form.append("file", file);
    await act(api("/api/models/import", { method: "POST", body: form }), `Imported ${file.name}.`);
    input.value = "";
  };
  const compared = (models ?? []).filter((m) => chosen.includes(m.id));
  const keys = (pick: (m: Model) => Record<string, unknown>) => [...new Set(compared.flatMap((m) => Object.keys(pick(m))))].sort();
  const shown = (v: unknown) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(4)) : v === undefined ? "–" : String(v));
  return (
    <section>
      <div class="page-head">
        <h1>Models</h1>
        {canEdit && <div class="actions"><label class="button">Import model zip<input type="file" accept=".zip" hidden onChange={(e) => importZip(e.currentTarget)} /></label></div>}
      </div>
      <Message message={message} />
      {models === null ? <p class="muted">Loading…</p> : models.length === 0 ? <p class="empty">No models yet: a finished training job becomes one.</p> : (
        <table class="jobs card">
          <thead><tr><th /><th>Model</th><th>Data set</th><th>Measured on val</th><th>Created</th><th /></tr></thead>
          <tbody>{models.map((m) => (
            <tr key={m.id}>
              <td><input type="checkbox" aria-label={`Compare ${m.name}`} checked={chosen.includes(m.id)} onChange={() => setChosen(chosen.includes(m.id) ? chosen.filter((id) => id !== m.id) : [...chosen, m.id])} /></td>
              <td>{m.name}{m.job_id && <> · <a href={`#/jobs/${m.job_id}`}>job #{m.job_id}</a></>}</td>
              <td>{m.dataset_id ? <a href={`#/datasets/${m.dataset_id}`}>{setNames[m.dataset_id] ?? `data set ${m.dataset_id}`}</a> : "–"}</td>
              <td data-testid="headline">{headline(m.metrics)}</td><td>{new Date(m.created_at).toLocaleString()}</td>
              <td><div class="row-actions">{/* a flex box inside the cell: a flex cell leaves the row's lines */}
                <a class="button" href={`/api/models/${m.id}/export`} download>Export</a>
                {canEdit && !deployments.some((d) => d.model_id === m.id) && <button class="primary" disabled={deploying} onClick={() => deployOnce(() => { say(`Deploying ${m.name}…`); return act(api(`/api/models/${m.id}/deploy`, { method: "POST" }), `Deployed ${m.name}.`); })}>Deploy</button>}
                {canEdit && m.dataset_id && <button title="Fine-tune this model on its data set as labelled and reviewed now" onClick={async () => {
                  const epochs = prompt(`Fine-tune ${m.name} on its data set as labelled now: how many epochs?`, String(m.settings.epochs ?? 30))?.trim();
                  if (!epochs) return;  // cancelled
                  if (!/^\d+$/.test(epochs) || +epochs < 1 || +epochs > MAX_EPOCHS) { say(`“${epochs}” epochs: give a whole number from 1 to ${MAX_EPOCHS}; nothing was started.`, true); return; }
                  try { const job = await api<{ id: number }>(`/api/models/${m.id}/retrain`, json("POST", { epochs: Number(epochs) })); location.hash = `#/jobs/${job.id}`; } catch (e) { say((e as Error).message, true); }
                }}>Retrain</button>}
                {canEdit && <>
                  <button onClick={() => { const n = prompt("Rename model", m.name); if (n && n.trim() !== m.name) act(api(`/api/models/${m.id}`, json("PATCH", { name: n.trim() })), "Renamed."); }}>Rename</button>
                  <button class="danger" onClick={() => { const live = deployments.some((d) => d.model_id === m.id); if (confirm(`Delete ${m.name} and its files?${m.job_id ? ` (Job #${m.job_id} keeps the record of how it trained.)` : ""}${live ? " It is deployed: its deployment stops, and whoever calls it gets no answer any more." : ""}`)) act(api(`/api/models/${m.id}`, { method: "DELETE" }), live ? "Deleted, and its deployment stopped." : "Deleted."); }}>Delete</button>
                </>}
              </div></td>
            </tr>))}
          </tbody>
        </table>
      )}
      {deployments.length > 0 && (
        <div class="card deployments">
          <h2>Deployed</h2>
          {deployments.map((d) => (
            <div key={d.id} class="deployment">
              <strong>{(models ?? []).find((m) => m.id === d.model_id)?.name ?? `model ${d.model_id}`}</strong> at <a href={`${d.url}/openapi.json`} target="_blank" title="The server's API, as an OpenAPI description">{d.url}</a>
              <pre>{d.curl.native}{"\n"}{d.curl.powerai}</pre>
              <span class="row-actions">
                <label class="button">Try an image<input type="file" accept="image/*" hidden onChange={(e) => tryImage(d, e.currentTarget)} /></label>
                <label title="Show what the model finds at this confidence and above (empty: the model's own threshold)">confidence ≥ <input type="number" min="0" max="1" step="0.05" placeholder="model's" value={conf} onChange={(e) => changeConf(e.currentTarget.value)} aria-label="Confidence threshold" /></label>
                {canEdit && <button class="danger" onClick={() => act(api(`/api/deployments/${d.id}`, { method: "DELETE" }), "Undeployed.")}>Undeploy</button>}
              </span>
            </div>
          ))}
          {answer && <TriedImage tried={answer} />}
        </div>
      )}
      {compared.length >= 2 && new Set(compared.map((m) => m.dataset_digest)).size > 1 && (
        <p class="message error" data-testid="different-val">These models were measured on different versions of their data (another val set, other labels): their figures do not compare one to one.</p>
      )}
      {compared.length >= 2 && (
        <table class="jobs card compare">
          <thead><tr><th /> {compared.map((m) => <th key={m.id}>{m.name}</th>)}</tr></thead>
          <tbody>
            {keys((m) => m.metrics).map((k) => <tr key={`m-${k}`}><th title={k}>{named(k)}</th>{compared.map((m) => <td key={m.id}>{shown(m.metrics[k])}</td>)}</tr>)}
            {keys((m) => m.settings).filter((k) => k !== "from_model").map((k) => <tr key={`s-${k}`} class="muted"><th title={k}>{named(k)}</th>{compared.map((m) => <td key={m.id}>{shown(m.settings[k])}</td>)}</tr>)}
            <tr class="muted"><th>data set version</th>{compared.map((m) => <td key={m.id}>{m.dataset_digest?.slice(0, 10) ?? "–"}</td>)}</tr>
          </tbody>
        </table>
      )}
    </section>
  );
}
