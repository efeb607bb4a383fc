// The data sets page: each set with its thumbnail and counts; create, rename, duplicate, delete, import, export.
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, json, type DataSet, type Task, type UploadResult } from "../api";
import { Message, useMessage, useOneAtATime } from "../widgets";

export function DataSets({ canEdit }: { canEdit: boolean }) {
  const [sets, setSets] = useState<DataSet[] | null>(null);
  const [name, setName] = useState("");
  const [task, setTask] = useState<Task>("detect");
  const [withAuto, setWithAuto] = useState<Record<number, boolean>>({});  // per data set: exports with unreviewed auto labels
  const [message, say] = useMessage();
  const reload = () => api<DataSet[]>("/api/datasets").then(setSets, (e) => say(e.message, true));
  useEffect(() => { reload(); }, []);

  // Two cards of one name could not be told apart: a name another data set has is said, not sent.
  const takenSaid = (wanted: string) => say(`A data set named “${wanted}” exists already: give this one another name.`, true);
  const taken = (wanted: string, id?: number) => {
    const other = sets?.some((set) => set.id !== id && set.name === wanted) ?? false;
    if (other) takenSaid(wanted);
    return other;
  };
  // The list may not be loaded yet (or another person took the name meanwhile): the server's 409 says the same.
  const refused = (e: unknown, wanted: string) =>
    e instanceof ApiError && e.status === 409 ? takenSaid(wanted) : say((e as Error).message, true);
  const create = async (event: Event) => {
    event.preventDefault();
    if (taken(name.trim())) return;
    try {
      const made = await api<DataSet>("/api/datasets", json("POST", { name: name.trim(), task }));
      setName("");
      location.hash = `#/datasets/${made.id}`;
    } catch (e) { refused(e, name.trim()); }
  };
  const [duplicating, once] = useOneAtATime();  // a double click makes one copy
  const act = async (what: () => Promise<unknown>, done: string) => {
    try { await what(); say(done); reload(); } catch (e) { say((e as Error).message, true); }
  };
  const rename = (set: DataSet) => {
    const next = prompt("New name", set.name)?.trim();
    if (next === undefined || next === set.name || taken(next, set.id)) return;  // cancelled, the same, or taken (said)
    if (!next) { say("The name is empty: type one.", true); return; }
    api(`/api/datasets/${set.id}`, json("PATCH", { name: next })).then(() => { say("Renamed."); reload(); }, (e) => refused(e, next));
  };
  // The server says first whether the export can be made: a download that fails would be a file (or a page) of
  // its error. The zip itself is the browser's download, with its progress.
  const exportAs = async (set: DataSet, format: string) => {
    // forklift's format is the app's own copy of a set: every label goes, used or not (keys 1–9 stay theirs)
    const url = `/api/datasets/${set.id}/export?format=${format}${withAuto[set.id] ? "&auto=true" : ""}${format === "forklift" ? "&empty_labels=true" : ""}`;
    try { await api(`${url}&check=true`); } catch (e) { say((e as Error).message, true); return; }
    const link = document.createElement("a");
    link.href = url;
    link.download = "";
    link.click();
  };
  // Asked about the set as it is now (images added or a job started since the list was loaded); a set a job or an
  // auto-label run works on cannot go, which is said before anything is asked.
  const [deleting, oneDelete] = useOneAtATime();  // a double click asks once
  const remove = (listed: DataSet) => oneDelete(async () => {
    let set: DataSet;
    try { set = await api<DataSet>(`/api/datasets/${listed.id}`); } catch (e) { say((e as Error).message, true); reload(); return; }
    if (set.running) {
      say(`“${set.name}” cannot be deleted while ${set.running} training job(s) or auto-label run(s) work on it: cancel them first (Training page, or the set's page).`, true);
      return;
    }
    const jobs = set.jobs ? `, and the records of its ${set.jobs} training job(s) (the models they made stay in the registry)` : "";
    if (confirm(`Delete “${set.name}”, its ${set.images} images${jobs}? This cannot be undone.`))
      await act(() => api(`/api/datasets/${set.id}`, { method: "DELETE" }), `Deleted ${set.name}.`);
  });
  const importZip = async (set: DataSet, input: HTMLInputElement, format: string) => {
    const file = input.files?.[0];
    if (!file) return;
    const form = new FormData();
    form.append("file", file);
    form.append("format", format);
    say(`Importing ${file.name}…`);
    try {
      const result = await api<UploadResult>(`/api/datasets/${set.id}/import`, { method: "POST", body: form });
      const changed = result.changed ?? [];
      say(`Imported ${result.added.length} images` + (changed.length ? `; ${changed.join("; ")}` : "")
        + (result.refused.length ? `; refused: ${result.refused.join("; ")}` : "."), result.refused.length + changed.length > 0);
      reload();
    } catch (e) { say((e as Error).message, true); }
    input.value = "";
  };

  return (
    <section>
      <div class="page-head">
        <h1>Data sets</h1>
        {canEdit && (
          <form class="inline" onSubmit={create}>
            <input placeholder="New data set name" value={name} onInput={(e) => setName(e.currentTarget.value)} required aria-label="New data set name" />
            <select value={task} onChange={(e) => setTask(e.currentTarget.value as Task)} aria-label="Task">
              <option value="detect">Object detection</option>
              <option value="classify">Classification</option>
            </select>
            <button class="primary" type="submit">Create</button>
          </form>
        )}
      </div>
      <Message message={message} />
      {sets === null ? <p class="muted">Loading…</p> : sets.length === 0 ? (
        <p class="empty">{canEdit ? "No data sets yet. Create one, then upload images or a video." : "No data sets yet: an editor or admin makes them."}</p>
      ) : (
        <ul class="cards">
          {sets.map((set) => (
            <li class="card dataset" key={set.id}>
              <a href={`#/datasets/${set.id}`} class="thumb">
                {set.thumbnail ? <img src={set.thumbnail} alt="" loading="lazy" /> : <span class="muted">no images</span>}
              </a>
              <div class="body">
                <a href={`#/datasets/${set.id}`} class="title">{set.name}</a>
                <span class="tag">{set.task === "detect" ? "detection" : "classification"}</span>
                <p class="counts">{set.images} images · {set.labelled} labelled</p>
                <p class="labels">{set.labels.map((l) => <span class="chip" key={l.id}>{l.name} {l.count}</span>)}</p>
                <div class="actions">
                  {set.task === "detect" && <button type="button" onClick={() => exportAs(set, "coco")}>Export COCO</button>}
                  <select aria-label="Export format" onChange={(e) => { if (e.currentTarget.value) exportAs(set, e.currentTarget.value); e.currentTarget.value = ""; }}>
                    <option value="">Export as…</option>
                    <option value="forklift">forklift</option>
                    {set.task === "detect" && <><option value="voc">Pascal VOC</option><option value="yolo">YOLO</option><option value="powerai">PowerAI Vision</option></>}
                  </select>
                  <label class="small" title="Exports hold a person's labels and the reviewed ones; this adds a model's unreviewed labels, each marked with the model and its confidence">
                    <input type="checkbox" checked={!!withAuto[set.id]} onChange={(e) => setWithAuto({ ...withAuto, [set.id]: e.currentTarget.checked })} aria-label="Include unreviewed auto labels" /> with unreviewed auto labels (marked)
                  </label>
                  {canEdit && <>
                    <label class="button">Import zip<input type="file" accept=".zip" hidden onChange={(e) => importZip(set, e.currentTarget, (e.currentTarget.closest(".actions")!.querySelector("select[name=format]") as HTMLSelectElement).value)} /></label>
                    <select name="format" aria-label="Import format">
                      <option value="images">images</option><option value="forklift">forklift</option>
                      {set.task === "detect" && <><option value="coco">COCO</option><option value="voc">VOC</option>
                        <option value="yolo">YOLO</option><option value="powerai">PowerAI Vision</option></>}
                    </select>
                    <button onClick={() => rename(set)}>Rename</button>
                    <button disabled={duplicating} onClick={() => once(() => act(() => api(`/api/datasets/${set.id}/duplicate`, { method: "POST" }), "Duplicated."))}>Duplicate</button>
                    <button class="danger" disabled={deleting} onClick={() => remove(set)}>Delete</button>
                  </>}
                </div>
              </div>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
