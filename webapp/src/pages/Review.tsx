// The review queue: a data set's auto-labelled images, by their lowest-scoring box, the least sure first, and the
// images where the model found nothing after them (or first, as the person chooses). Keys: A accept, E correct in the editor, R reject, U undo the last decision,
// → skip. Where the model found nothing, Correct is the suggested action and Accept (which would keep a "nothing
// here" example for training) asks to be pressed a second time.
import { useEffect, useRef, useState } from "preact/hooks";
import { api, ApiError, json, type Annotations, type DataSet, type ReviewPage } from "../api";
import { labelNow } from "../labels";

type ReviewItem = ReviewPage["items"][number];
import { Message, useMessage } from "../widgets";

export function Review({ datasetId, canEdit }: { datasetId: number; canEdit: boolean }) {
  const [set, setSet] = useState<DataSet | null>(null);
  const [queue, setQueue] = useState<ReviewPage | null>(null);
  const [at, setAt] = useState(0);
  const [doc, setDoc] = useState<Annotations | null>(null);
  const [reviewed, setReviewed] = useState(0);
  const [confirming, setConfirming] = useState(false);  // Accept pressed once on an image where nothing was found
  // the last decision, with the labels' ids as the page knew them then (an undo follows a rename made since)
  const [last, setLast] = useState<{ item: ReviewItem; doc: Annotations; action: "accept" | "reject"; seen: Map<string, number> } | null>(null);
  const [message, say] = useMessage();
  // Which images come first, kept for the tab's visits to this queue (Correct goes to the editor and back).
  const firstKey = `forklift:review-first:${datasetId}`;
  const [first, setFirst] = useState<"found" | "nothing">(() => sessionStorage.getItem(firstKey) === "nothing" ? "nothing" : "found");
  const chooseFirst = (value: "found" | "nothing") => { sessionStorage.setItem(firstKey, value); setFirst(value); };
  const busy = useRef(false);  // a decision or an undo on its way: a key pressed meanwhile would act on the same image

  const reload = () => {
    api<DataSet>(`/api/datasets/${datasetId}`).then(setSet, (e) => say(e.message, true));
    api<ReviewPage>(`/api/datasets/${datasetId}/review?limit=200&first=${first}`).then((q) => { setQueue(q); setAt(0); }, (e) => say(e.message, true));
  };
  useEffect(reload, [datasetId, first]);
  const item = queue?.items[at];
  useEffect(() => {
    setDoc(null);
    setConfirming(false);
    if (item) api<Annotations>(`/api/images/${item.image.id}/annotations`).then(setDoc, (e) => say(e.message, true));
  }, [item?.image.id]);
  const nothingFound = !!doc && doc.shapes.length === 0 && !doc.class_label;

  const next = () => {
    if (queue && at + 1 < queue.items.length) setAt(at + 1);
    else reload();
  };
  const viewOnly = () => say("View only: this account looks at the review queue; an editor or admin decides.");
  const review = async (action: "accept" | "reject") => {
    if (!canEdit) { viewOnly(); return; }
    if (!item || !doc || busy.current) return;
    if (action === "accept" && nothingFound && !confirming) {
      setConfirming(true);
      say(`The model found nothing in ${item.image.original_name}. Accept keeps it as an example of "nothing here" for training: press Accept (A) again if nothing is there, or Correct (E) to label what is.`, true);
      return;
    }
    busy.current = true;
    try {
      await api<Annotations>(`/api/images/${item.image.id}/review`, json("POST", { action, version: doc.version }));
      say(action === "accept" ? `Accepted ${item.image.original_name}. (U undoes it.)` : `Rejected ${item.image.original_name}: it is unlabelled again. (U undoes it.)`);
      setLast({ item, doc, action, seen: new Map((set?.labels ?? []).map((l) => [l.name, l.id])) });
      setReviewed((n) => n + 1);
      setQueue({ ...queue!, total: queue!.total - 1, items: queue!.items.filter((_, i) => i !== at) });
      if (at + 1 >= queue!.items.length) reload();
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) {  // its labels changed elsewhere (a label renamed): shown as now
        api<DataSet>(`/api/datasets/${datasetId}`).then(setSet, () => undefined);
        try {
          setDoc(await api<Annotations>(`/api/images/${item.image.id}/annotations`));
          say(`${item.image.original_name} was changed elsewhere (a label renamed, merged or deleted, or someone reviewed or edited it): it is shown as it is now; decide again.`, true);
        } catch { reload(); say(`${item.image.original_name} was changed elsewhere: the queue is loaded again.`, true); }
      } else say((e as Error).message, true);
    } finally {
      busy.current = false;
    }
  };
  const correct = () => { if (item) location.hash = `#/datasets/${datasetId}/images/${item.image.id}?from=review`; };
  // Undo the last accept or reject: the image waits for review again, with the labels it was shown with.
  const undo = async () => {
    if (!canEdit) { viewOnly(); return; }
    if (busy.current) return;
    if (!last) { say("Nothing to undo: U undoes the last accept or reject, once."); return; }
    const { item: undone, doc: was, action, seen } = last;
    busy.current = true;
    try {
      const [current, fresh] = await Promise.all([
        api<Annotations>(`/api/images/${undone.image.id}/annotations`), api<DataSet>(`/api/datasets/${datasetId}`)]);
      setSet(fresh);
      // the model's labels as the decision saw them, by their labels as they are now: a rename or a merge followed,
      // a label deleted since left out, never made again (its id is sent: the server refuses its old name)
      const now = (name: string) => { const id = seen.get(name); return id === undefined ? name : labelNow(fresh, id)?.name; };
      const shapes = was.shapes.flatMap((shape) => { const label = now(shape.label); return label ? [{ ...shape, label }] : []; });
      const classLabel = was.class_label === null ? null : now(was.class_label) ?? null;
      const gone = was.shapes.length - shapes.length + (was.class_label !== null && classLabel === null ? 1 : 0);
      const labels_seen = Object.fromEntries(fresh.labels.map((l) => [l.name, l.id]));
      const body = action === "reject"
        ? { action: "reopen", version: current.version, shapes, class_label: classLabel, class_model_id: was.class_model_id, class_confidence: was.class_confidence, labels_seen }
        : { action: "reopen", version: current.version };
      await api<Annotations>(`/api/images/${undone.image.id}/review`, json("POST", body));
      setLast(null);
      setReviewed((n) => n - 1);
      setQueue((q) => q ? { ...q, total: q.total + 1, items: [...q.items.slice(0, at), undone, ...q.items.slice(at)] } : q);
      say(`Undone: ${undone.image.original_name} waits for review again.` + (action === "reject" && gone
        ? ` ${gone} of the model's labels are not brought back: their label was deleted elsewhere.` : ""));
    } catch (e) { say((e as Error).message, true); } finally { busy.current = false; }
  };

  // The keys act through this render's handlers, set as it renders: an effect would replace them only after the
  // page is painted, and a key pressed before that (A A in quick succession on a slow machine) would find the last
  // render's, to which the first A had not happened.
  const keys = useRef({ review, correct, undo, next });
  keys.current = { review, correct, undo, next };
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if ((e.target as HTMLElement).tagName === "INPUT" || e.ctrlKey || e.metaKey) return;
      const act = keys.current;
      if (e.key === "a") act.review("accept");
      else if (e.key === "r") act.review("reject");
      else if (e.key === "e") act.correct();
      else if (e.key === "u") act.undo();
      else if (e.key === "ArrowRight") act.next();
      else return;
      e.preventDefault();
    };
    addEventListener("keydown", onKey);
    return () => removeEventListener("keydown", onKey);
  }, []);

  return (
    <section class="review" data-ready={item && doc?.image_id === item.image.id ? item.image.id : undefined}>
      <div class="page-head">
        <h1><a href="#/">Data sets</a> › <a href={`#/datasets/${datasetId}`}>{set?.name ?? "…"}</a> › Review</h1>
        <label>first: <select value={first} onChange={(e) => chooseFirst(e.currentTarget.value as "found" | "nothing")} aria-label="Review first">
          <option value="found">what the model found (least sure first)</option>
          <option value="nothing">images where it found nothing</option>
        </select></label>
        <span class="counts" data-testid="review-left">{queue ? `${queue.total} to review` : ""}{reviewed ? ` · ${reviewed} reviewed here` : ""}</span>
        {!canEdit && <span class="save-state" title="A viewer looks; an editor or admin decides">view only</span>}
      </div>
      <Message message={message} />
      {queue && !item ? <p class="empty">Nothing to review: every auto label has been accepted, corrected or rejected. <a href={`#/datasets/${datasetId}`}>Back to the data set</a>.</p> : null}
      {item && <div class="editor-body">
        <div class="canvas">
          <figure class="review-figure" style={{ width: `min(100%, ${Math.max(item.image.width, 640)}px)`, fontSize: `${Math.max(item.image.width, item.image.height) / 40}px` }}>
            <img src={item.image.file} alt={item.image.original_name} />
            {doc?.class_label && <figcaption class="auto-class">{doc.class_label}{doc.class_confidence !== null ? ` ${doc.class_confidence.toFixed(2)}` : ""}</figcaption>}
            {doc && <svg viewBox={`0 0 ${item.image.width} ${item.image.height}`} preserveAspectRatio="none" aria-label="Auto labels">
              {doc.shapes.map((shape, i) => {
                const [x1, y1, x2, y2] = shape.kind === "box" ? shape.points as number[] : bounds(shape.points as number[][]);
                return <g key={i} class={shape.source === "auto" ? "auto" : "human"}>
                  <rect x={x1} y={y1} width={x2 - x1} height={y2 - y1} />
                  <text x={x1 + 1} y={y1} dy="-0.25em">{shape.label}{shape.confidence !== null ? ` ${shape.confidence.toFixed(2)}` : ""}</text>
                </g>;
              })}
            </svg>}
          </figure>
        </div>
        <aside class="side card">
          <h2>{item.image.original_name}</h2>
          <p class="muted">{at + 1} of {queue!.items.length} shown · lowest confidence {item.lowest_confidence === null ? "– (nothing found)" : item.lowest_confidence.toFixed(3)}</p>
          <ul class="label-list">
            {doc?.shapes.map((shape, i) => <li key={i}><span class="name">{shape.label}</span><span class="count">{shape.confidence?.toFixed(3) ?? "person"}</span></li>)}
            {doc?.class_label && <li data-testid="auto-class"><span class="name">class: {doc.class_label}</span><span class="count">{doc.class_confidence?.toFixed(3) ?? "person"}</span></li>}
          </ul>
          {doc && doc.shapes.length === 0 && !doc.class_label && <p class="muted">The model found nothing here{set?.task === "classify" ? " it was sure of" : ""}.</p>}
          {canEdit && <div class="actions review-actions">
            <button class={nothingFound ? (confirming ? "primary" : "") : "primary"} onClick={() => review("accept")} disabled={set?.task === "classify" && !doc?.class_label}
              title={set?.task === "classify" && !doc?.class_label ? "No class to accept: correct (pick one) or reject" : nothingFound ? "Keep it as a 'nothing here' example: press twice (A A)" : "Keep these labels (A)"}><kbd>A</kbd> {confirming ? "Accept: nothing here" : "Accept"}</button>
            <button class={nothingFound && !confirming ? "primary" : ""} onClick={correct} title="Fix them in the editor; saving there counts as reviewed (E)"><kbd>E</kbd> Correct</button>
            <button class="danger" onClick={() => review("reject")} title="Drop them: the image is unlabelled again (R)"><kbd>R</kbd> Reject</button>
            <button onClick={next} title="Skip for now (→)">Skip ›</button>
            {last && <button onClick={undo} title="Undo the last accept or reject (U)" data-testid="undo"><kbd>U</kbd> Undo</button>}
          </div>}
          <p class="muted small">Accepted and corrected labels train like hand-drawn ones; unreviewed auto labels never do.</p>
        </aside>
      </div>}
    </section>
  );
}

function bounds(points: number[][]): number[] {
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  return [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];
}
