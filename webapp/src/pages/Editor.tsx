// The labelling editor: boxes and polygons drawn with Annotorious on the image, saved at every change (the
// server refuses a stale write with 409, and the editor then reloads what is current). Saves go one after
// another, each with the version the previous one returned, and a change still waiting for its save when the
// image is left (→, a link, a reload) is sent at once.
//
// What a person means, as CVAT and Label Studio do it: the label chosen (1-9, a click in the list, or a name typed
// in Label) is the label of the next shape drawn; a drag always draws; a new shape is not left selected.
// Relabelling is explicit: click a shape to select it, then choose its label. Escape or a click on empty canvas
// deselects. A data set without labels asks for the first label's name before anything is drawn. Every shape is
// drawn in its label's colour with its name (and an auto label's confidence). Keys: R rectangle, G polygon (click
// its points, double-click or Enter to close), Delete removes the selected shape, Ctrl+Z / Ctrl+Y undo and redo,
// → or N next image, ← or P previous, + / - zoom, 0 fits the image to the canvas, Space + drag (or the middle
// button) pans. Typing in a text field never fires a key. Auto labels are drawn dashed; saving any change to them
// is their review, and Accept / Reject act as in the review queue.
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { createImageAnnotator, type ImageAnnotation, type ImageAnnotator } from "@annotorious/annotorious";
import { Origin } from "@annotorious/core";
import "@annotorious/annotorious/annotorious.css";
import { api, ApiError, json, NAME_LIMIT, RENEWED, type Annotations, type DataSet, type ImageRecord, type Neighbours, type Shape, type ShapeOut } from "../api";
import { colourOf, labelNow } from "../labels";
import { holdLeaving, Message, sendingWhile, useMessage } from "../widgets";

type Tool = "rectangle" | "polygon";
type Bounds = { minX: number; minY: number; maxX: number; maxY: number };
type Drawn = { id: string; label: string; bounds: Bounds; confidence: number | null };

const tag = (annotation: string, value: string) => ({ id: `${annotation}-label`, annotation, purpose: "tagging", value });
const labelOf = (annotation: ImageAnnotation) => annotation.bodies.find((b) => b.purpose === "tagging")?.value ?? "";
const boundsOf = (annotation: ImageAnnotation) => (annotation.target.selector as unknown as { geometry: { bounds: Bounds } }).geometry.bounds;
const typing = (target: EventTarget | null) => {
  const element = target as HTMLElement | null;
  return !!element && (["INPUT", "SELECT", "TEXTAREA"].includes(element.tagName) || element.isContentEditable);
};

const overlaid = () => document.querySelector(".overlay") !== null;  // the login asked for over the page: keys are its

// Why a typed label or class cannot be used, or null: the server's own limits, said before anything is drawn with it.
const nameProblem = (name: string) =>
  !name ? "The name is empty: type one." : name.length > NAME_LIMIT ? `The name is too long: at most ${NAME_LIMIT} characters.` : null;

// A shape as a key to find its twin by; both sides as the editor saves them (toShape, to a tenth of a pixel): an
// auto label's raw coordinates never matched their rounded copy, and were copied again on each press.
const shapeKey = (shape: Shape) => JSON.stringify([shape.kind, shape.label, shape.points]);
// A save as sent: the body the server takes, and each shape's annotation id beside it (what a merge after a 409
// tells new shapes from those the server held by).
type Body = { shapes: Shape[]; class_label: string | null; labels_seen: Record<string, number> };
type Sent = { body: Body; ids: string[] };

function toAnnotation(shape: Shape | ShapeOut, index: number): ImageAnnotation {
  const id = `${"source" in shape && shape.source === "auto" ? "auto" : "shape"}-${index}-${Math.random().toString(36).slice(2, 8)}`;
  if (shape.kind === "box") {
    const [x1, y1, x2, y2] = shape.points as number[];
    return { id, bodies: [tag(id, shape.label)], target: { annotation: id, selector: {
      type: "RECTANGLE", geometry: { x: x1, y: y1, w: x2 - x1, h: y2 - y1, bounds: { minX: x1, minY: y1, maxX: x2, maxY: y2 } },
    } } } as unknown as ImageAnnotation;
  }
  const points = shape.points as number[][];
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  return { id, bodies: [tag(id, shape.label)], target: { annotation: id, selector: {
    type: "POLYGON", geometry: { points, bounds: { minX: Math.min(...xs), minY: Math.min(...ys), maxX: Math.max(...xs), maxY: Math.max(...ys) } },
  } } } as unknown as ImageAnnotation;
}

function toShape(annotation: ImageAnnotation, width: number, height: number): Shape | null {
  const label = labelOf(annotation);
  const selector = annotation.target.selector as unknown as { type: string; geometry: { x: number; y: number; w: number; h: number; points: number[][] } };
  const clampX = (v: number) => Math.min(Math.max(v, 0), width), clampY = (v: number) => Math.min(Math.max(v, 0), height);
  if (!label) return null;
  if (selector.type === "RECTANGLE") {
    const g = selector.geometry;
    const box = [clampX(g.x), clampY(g.y), clampX(g.x + g.w), clampY(g.y + g.h)].map((v) => Math.round(v * 10) / 10);
    return box[2] > box[0] && box[3] > box[1] ? { kind: "box", label, points: box } : null;
  }
  const once = distinct(selector.geometry.points);  // a shape saved before (or imported) as it came, if only so
  const points = (once.length >= 3 ? once : selector.geometry.points).map(([x, y]) => [Math.round(clampX(x) * 10) / 10, Math.round(clampY(y) * 10) / 10]);
  return points.length >= 3 ? { kind: "polygon", label, points } : null;
}

const TOO_FEW = "A polygon needs 3 points or more around an area to close: click more points, or press Esc to drop it.";
// A polygon's points without a point repeated next to itself (or the last as the first): a failed close, or a
// click on the last point again, repeats it.
const distinct = (points: number[][]) => points.filter((p, i) => {
  const before = points[(i + points.length - 1) % points.length];
  return points.length === 1 || p[0] !== before[0] || p[1] !== before[1];
});
// What the polygon tool itself closes: 3 points or more around an area over 4 px² (a line, or a dot, is no outline).
const drawable = (points: number[][]) => points.length >= 3 && Math.abs(points.reduce((sum, p, i) => {
  const q = points[(i + 1) % points.length];
  return sum + p[0] * q[1] - q[0] * p[1];
}, 0)) / 2 > 4;
// → and ← (N, P) pressed before the image they lead to knows its neighbours are kept and taken when it does: N N
// pressed quickly goes two images on, N P comes back (the old image's neighbours would move one, or two back).
// Each image has an editor of its own (keyed), so the steps are kept here, across the one left and the one opened.
const walk = { heading: 0, pending: 0 };  // the image shown or a step's way to; steps still to take (+ on, - back)
// A save the network, the server or a session's end stopped, said with what happens to the change: it waits here
// and goes with the next one (a refusal, 4xx, is said as it is: sent again, it would be refused again).
const notSaved = (e: Error) => {  // the server's words begin a sentence here ("log in first": "Log in first.")
  const said = e.message.replace(/\.?$/, ".");
  return `${said.charAt(0).toUpperCase()}${said.slice(1)} Your last change is not saved yet: it is sent with your next one.`;
};

// The label chosen for the next shape and the tool, kept here for the next image of the same data set: a run of
// images of horses is labelled horse after horse, where each new editor went back to the set's first label and
// its first box was saved as that, unsaid.
const LEFT_SAID = "forklift:left-image-said";
const carried = { dataset: 0, label: "", tool: "rectangle" as Tool, said: "" };  // said: what the last image's
// editor had to say after it was left (its merge after a refused save), for the next one to show

export function Editor({ datasetId, imageId, canEdit }: { datasetId: number; imageId: number; canEdit: boolean }) {
  const [set, setSet] = useState<DataSet | null>(null);
  const [image, setImage] = useState<ImageRecord | null>(null);
  const [near, setNear] = useState<Neighbours | null>(null);
  const [current, setCurrent] = useState("");  // the label of the next shape drawn ("": none chosen yet)
  const [draft, setDraft] = useState("");  // what the Label field holds while it is typed in
  const [selected, setSelected] = useState<string | null>(null);  // the selected shape's label
  const [tool, setTool] = useState<Tool>(carried.dataset === datasetId ? carried.tool : "rectangle");
  const [zoom, setZoom] = useState(1);
  const [fit, setFit] = useState(1);
  const anchor = useRef<{ x: number; y: number; clientX: number; clientY: number } | null>(null);  // Ctrl+wheel's pixel
  useLayoutEffect(() => {  // laid out at the new zoom, before it is painted: scrolled so the pixel is under the pointer
    const box = canvas.current, shown = img.current, held = anchor.current;
    anchor.current = null;
    if (!box || !shown || !held) return;
    const moved = shown.getBoundingClientRect();
    box.scrollLeft += moved.left + held.x * zoom - held.clientX;
    box.scrollTop += moved.top + held.y * zoom - held.clientY;
  }, [zoom]);
  const [state, setState] = useState("loading");
  const stateRef = useRef(state);  // read by the listeners made once
  stateRef.current = state;
  const unsent = useRef(false);  // a change the server did not take for now (a session ended, the network): only here
  const [classLabel, setClassLabel] = useState<string | null>(null);
  const [doc, setDoc] = useState<Annotations | null>(null);
  const [drawn, setDrawn] = useState<Drawn[]>([]);
  const [message, say, unsay] = useMessage();
  const said = useRef(message);  // the message shown now, for the handlers the page keeps across renders
  // The first label asked for stays asked (then said) until the first shape is drawn: gone as the label was named,
  // it moved the image up under the pointer on its way to the first drag.
  const guide = useRef(false);
  said.current = message;
  const img = useRef<HTMLImageElement>(null);
  const annotator = useRef<ImageAnnotator | null>(null);
  const version = useRef(0);
  const timer = useRef<number | undefined>(undefined);
  const queue = useRef<Promise<void>>(Promise.resolve());
  const drawnFrom = useRef(0);  // counts loads of the server's shapes: a save drawn before the last load is stale
  const confidence = useRef(new Map<string, number | null>());  // auto labels' scores, by annotation id
  const merged = useRef<{ text: string; error: boolean } | null>(null);  // what a merge said, said again once its save is done
  const stored = useRef(new Map<string, string>());  // each shape the server holds, as this page last loaded or saved it: id -> shapeKey
  const currentRef = useRef("");
  currentRef.current = current;
  // What this image's editor has chosen is the next image's to begin with: kept as it renders (a key's change
  // renders before the next key is handled), where an effect ran after the paint, and → pressed right after G
  // left the polygon behind. Not before the set is loaded: a fresh editor's "" and "rectangle" are no choice.
  if (set) {
    carried.dataset = datasetId;
    carried.tool = tool;
    if (current) carried.label = current;
  }
  // The label chosen, renamed or deleted in another tab or by someone else (the set is loaded again when the page
  // comes back into view, and after each save): followed to its new name, or given up for the first label, and
  // said. Drawn with the old name, it was made again unsaid beside the renamed one, or came back after its delete.
  const labelIds = useRef(new Map<string, number>());  // the set's labels as last loaded: each name's id
  // Every label name this page has loaded, with its id (the latest load's where a name came back): what a save says
  // it took each name as. A shape drawn as `car` just before a reload of the labels dropped `car` (renamed `auto`
  // meanwhile) keeps its id here, so the server refuses it rather than making `car` again. A name typed anew is
  // forgotten: it means a new label.
  const seenIds = useRef(new Map<string, number>());
  useEffect(() => {
    if (!set) return;
    const was = currentRef.current, before = labelIds.current.get(was);
    labelIds.current = new Map(set.labels.map((l) => [l.name, l.id]));
    for (const l of set.labels) seenIds.current.set(l.name, l.id);
    if (before === undefined || labelIds.current.has(was)) return;
    const followed = labelNow(set, before);
    const next = followed?.name ?? set.labels[0]?.name ?? "";
    if (followed) say(`The label ${was} was ${followed.id === before ? "renamed" : "merged into"} ${next} elsewhere: the next shape is a ${next}.`);
    else say(`The label ${was} was deleted elsewhere: ${next ? `the next shape is a ${next}` : "choose a label for the next shape"}.`, true);
    setCurrent(next);
  }, [set]);
  const namesRef = useRef<string[]>([]);  // the data set's labels in creation order: their colours
  namesRef.current = set?.labels.map((l) => l.name) ?? [];
  const classRef = useRef<string | null>(null);
  classRef.current = classLabel;
  const imageRef = useRef<ImageRecord | null>(null);  // read by the flush the unmount runs, which sees the first render
  imageRef.current = image;
  const label = useRef<HTMLInputElement>(null);
  const known = useRef<{ image: number; near: Neighbours } | null>(null);  // this image's neighbours, once loaded

  // The data set, the image and its neighbours (again after a login, when the session had ended before them).
  const open = () => Promise.all([
    api<DataSet>(`/api/datasets/${datasetId}`), api<ImageRecord>(`/api/images/${imageId}`),
    api<Neighbours>(`/api/images/${imageId}/neighbours`),
  ]).then(([s, i, n]) => {
    const kept = carried.dataset === datasetId && s.labels.some((l) => l.name === carried.label) ? carried.label : "";
    setSet(s); setImage(i); setNear(n); setCurrent((c) => c || kept || s.labels[0]?.name || "");
    if (carried.said) { say(carried.said, true); carried.said = ""; }
    known.current = { image: imageId, near: n };
    if (walk.heading === imageId && walk.pending !== 0) {
      const by = Math.sign(walk.pending);
      walk.pending -= by;
      if (!go(by > 0 ? n.next : n.previous)) walk.pending = 0;  // the first or last image: no further
    }
  }, (e) => say(e.message, true));
  useEffect(() => {
    if (walk.heading !== imageId) {  // reached by other means (a link, the browser's back): earlier steps are off
      walk.heading = imageId;
      walk.pending = 0;
    }
    void open();
    const leave = () => flush({ now: true });
    // Closing or reloading the tab while a change waits to be sent: the browser asks first (a save sent as the
    // page goes may still be refused, as made on a version that a save in flight replaces); saves on their way
    // ask through `sendingWhile`.
    const unsaved = (event: BeforeUnloadEvent) => {
      if (timer.current !== undefined || begun() || unsent.current) event.preventDefault();  // a change not saved yet
    };
    addEventListener("pagehide", leave);
    addEventListener("beforeunload", unsaved);
    return () => {
      if (walk.heading === imageId) walk.pending = 0;  // the editor left, not stepped from
      removeEventListener("pagehide", leave);
      removeEventListener("beforeunload", unsaved);
      annotator.current?.cancelSelected();  // ends an edit in progress, so that what it changed is in the save
      flush();
      annotator.current?.destroy();
      annotator.current = null;
    };
  }, [imageId]);

  // The annotator's undo history where the server's shapes were last drawn anew: its changes up to there are of
  // shapes no longer shown (a redo brought back a box on top of its twin, or one deleted with its label).
  const loadedAt = useRef({ length: 0, pointer: -1 });
  const beforeLoad = (redo: boolean) => {
    const history = annotator.current?.getHistory();
    if (!history) return false;
    const { length, pointer } = loadedAt.current;
    return redo ? history.changes.length === length && history.pointer < length - 1 : history.pointer <= pointer && pointer > -1;
  };

  // The shapes as drawn now, for their captions; read after every change the annotator reports.
  const refresh = () => {
    const anno = annotator.current;
    if (!anno) return;
    setDrawn(anno.getAnnotations().map((a) => ({ id: a.id, label: labelOf(a), bounds: boundsOf(a), confidence: confidence.current.get(a.id) ?? null })));
    anno.setStyle(style);
  };

  const load = async () => shown(await api<Annotations>(`/api/images/${imageId}/annotations`));
  const shown = (doc: Annotations) => {  // the server's shapes in the page, drawn anew
    version.current = doc.version;
    drawnFrom.current += 1;
    setDoc(doc);
    setClassLabel(doc.class_label);
    const annotations = doc.shapes.map(toAnnotation);
    confidence.current = new Map(annotations.map((a, i) => [a.id, doc.shapes[i].source === "auto" ? doc.shapes[i].confidence : null]));
    const { width, height } = imageRef.current ?? { width: Infinity, height: Infinity };
    stored.current = new Map(annotations.map((a, i) => [a.id, shapeKey(toShape(a, width, height) ?? doc.shapes[i])]));
    annotator.current?.setAnnotations(annotations, true);
    const history = annotator.current?.getHistory();
    if (history) loadedAt.current = { length: history.changes.length, pointer: history.pointer };
    refresh();
    setState("saved");
  };

  // What the annotator shows now, as the server takes it (with the ids of the labels it names as this page loaded
  // them: one renamed or deleted since is refused, not made again), and each shape's annotation id beside it; read
  // at once, sent when the saves before it are done.
  const snapshot = (classLabel: string | null): Sent | null => {
    const image = imageRef.current;
    if (!image || !annotator.current) return null;
    const drawn = annotator.current.getAnnotations().map((a) => [a.id, toShape(a, image.width, image.height)] as const)
      .filter((pair): pair is readonly [string, Shape] => pair[1] !== null);
    const shapes = drawn.map(([, shape]) => shape);
    const named = new Set([...shapes.map((shape) => shape.label), ...(classLabel ? [classLabel] : [])]);
    const labels_seen = Object.fromEntries([...named].flatMap((name) => {
      const id = seenIds.current.get(name);
      return id === undefined ? [] : [[name, id]];
    }));
    return { body: { shapes, class_label: classLabel, labels_seen }, ids: drawn.map(([id]) => id) };
  };
  // Saves go one after another, each on the version the last returned. One drawn before the server's shapes were
  // loaded again (a 409 reloads them) is dropped: sent, it would overwrite what the other person saved. `now`
  // (the page is going away) sends at once with keepalive, as nothing queued would start any more.
  const recount = () => api<DataSet>(`/api/datasets/${datasetId}`).then(setSet, () => undefined);  // the labels' counts
  const put = async ({ body, ids }: Sent, drawn: number, keepalive: boolean) => {
    if (drawn !== drawnFrom.current) return;
    try {
      const doc = await api<Annotations>(`/api/images/${imageId}/annotations`, { ...json("PUT", { version: version.current, ...body }), keepalive });
      version.current = doc.version;
      stored.current = new Map(ids.map((id, i) => [id, shapeKey(body.shapes[i])]));
      setDoc(doc);
      setState("saved");
      unsent.current = false;
      unsay();  // a save that failed, or a shape that had to be finished first: over now
      if (merged.current) say(merged.current.text, merged.current.error);  // what a merge kept and did not: still so
      merged.current = null;
      recount();
    } catch (e) {
      // what may go later: a save the session's end (401), the server (5xx) or the network stopped; not a refusal
      unsent.current = !(e instanceof ApiError) || e.status === 401 || e.status >= 500;
      merged.current = null;  // said now by what stopped this save
      if (e instanceof ApiError && e.status === 409) {
        try { await merge({ body, ids }); } catch (failed) {
          unsent.current = !(failed instanceof ApiError);  // the network went: the shapes drawn go when it is back
          say(unsent.current ? notSaved(failed as Error)
            : "This image was changed elsewhere, and its saved version could not be loaded: reload the page before going on (your last change was not kept).", true);
          setState("not saved");
        }
      } else if (e instanceof ApiError && e.status === 404) {
        say("This image was deleted (in another tab or by someone else): nothing more can be saved to it.", true);
        setState("not saved");
      } else { say(unsent.current ? notSaved(e as Error) : (e as Error).message, true); setState("not saved"); }
    }
  };
  // Changed elsewhere since this page loaded it (someone else, another tab, a label renamed, merged or deleted): its
  // saved version is shown with the shapes drawn here since the last save added to it (those of the refused save
  // and any drawn since), and saved so (their labels follow a rename; one deleted gives way to the label chosen
  // now); what else was changed here is not kept, and the page says all of it in one message.
  const merge = async (refused: Sent) => {
    const seen = new Map(seenIds.current);
    const [theirs, fresh] = await Promise.all([
      api<Annotations>(`/api/images/${imageId}/annotations`), api<DataSet>(`/api/datasets/${datasetId}`)]);
    const { body, ids } = snapshot(refused.body.class_label) ?? refused;  // the editor left: what it sent
    const now = (name: string) => { const id = seen.get(name); return id === undefined ? name : labelNow(fresh, id)?.name; };
    const was = currentRef.current;
    const instead = now(was) ?? fresh.labels[0]?.name;  // for a shape whose label was deleted (none: every label was)
    const kept = new Set(ids);
    const added = body.shapes.filter((_, i) => !stored.current.has(ids[i]));
    const changed = body.shapes.some((shape, i) => stored.current.has(ids[i]) && stored.current.get(ids[i]) !== shapeKey(shape))
      || [...stored.current.keys()].some((id) => !kept.has(id)) || body.class_label !== (doc?.class_label ?? null);
    const gone = [...new Set(added.filter((shape) => now(shape.label) === undefined).map((shape) => shape.label))];
    const readded = added.map((shape) => ({ ...shape, label: now(shape.label) ?? instead ?? shape.label }));
    labelIds.current = new Map(fresh.labels.map((l) => [l.name, l.id]));  // followed here, and said below: the effect leaves it
    for (const l of fresh.labels) seenIds.current.set(l.name, l.id);
    if (instead === undefined) for (const label of gone) seenIds.current.delete(label);  // no other label: made again
    const what = "This image was changed elsewhere (by someone else, in another tab, or by a label renamed, merged or deleted)";
    if (fresh.task === "classify" && body.class_label !== theirs.class_label) {  // the class given here, given again
      const wanted = body.class_label, given = wanted === null ? null : now(wanted);  // a rename followed
      const text = given === undefined ? `The class ${wanted} was deleted elsewhere: this image's class was not given; choose one.`
        : given !== wanted ? `The class ${wanted} was ${fresh.labels.some((l) => l.id === seen.get(wanted ?? "")) ? "renamed" : "merged into"} ${given} elsewhere: this image is a ${given} now.`
        : `${what}: your class was given to its saved version.`;
      const labels_seen = Object.fromEntries(given ? [[given, labelIds.current.get(given)]] : []);
      if (!annotator.current) {  // the editor left meanwhile
        if (given !== undefined) await api<Annotations>(`/api/images/${imageId}/annotations`, json("PUT", { version: theirs.version, shapes: [], class_label: given, labels_seen }));
        return;
      }
      setSet(fresh);
      shown(theirs);
      say(text, given === undefined);
      if (given === undefined) return;
      merged.current = { text, error: false };
      classRef.current = given;
      setClassLabel(given);
      save({ class_label: given });
      return;
    }
    const parts = [readded.length
      ? `${what}: your ${readded.length} new shape(s) were added to its saved version${changed ? "; what else you changed (a shape moved, relabelled or deleted, or its class) was not kept" : ""}.`
      : `${what}: its saved version is shown, and your last change was not kept.`];
    for (const label of gone) {
      parts.push(instead === undefined ? `The label ${label} was deleted elsewhere, and no label is left: your new shape made ${label} again.`
        : `The label ${label} was deleted elsewhere: your new shape is a ${instead} now (relabel it).`);
    }
    const chosen = instead ?? was;
    if (fresh.task === "detect" && chosen !== was && !gone.length) parts.push(`The label ${was} is ${now(was) ? `now ${chosen}` : "gone"}: the next shape is a ${chosen}.`);
    const said = { text: parts.join(" "), error: changed || gone.length > 0 || !readded.length };
    if (!annotator.current) {  // the editor left before the refusal came (→ within the save's wait): saved as merged
      if (readded.length) await api<Annotations>(`/api/images/${imageId}/annotations`, json("PUT", { version: theirs.version,
        shapes: [...theirs.shapes, ...readded], class_label: theirs.class_label, labels_seen: Object.fromEntries(labelIds.current) }));
      carried.said = `The image you left: ${said.text}`;  // said by the next image's editor, open now or later
      dispatchEvent(new Event(LEFT_SAID));
      return;
    }
    setCurrent(chosen);
    setSet(fresh);
    shown(theirs);
    readded.forEach((shape, i) => annotator.current?.addAnnotation(toAnnotation(shape, theirs.shapes.length + i)));
    say(said.text, said.error);
    if (!readded.length) return;
    merged.current = said;
    saveSoon();
  };
  const send = (sent: Sent, { now = false } = {}) => {
    setState("saving");
    const drawn = drawnFrom.current;
    if (now) { void sendingWhile(() => put(sent, drawn, true)); return; }
    const previous = queue.current;
    queue.current = sendingWhile(() => previous.then(() => put(sent, drawn, false))
      .catch((e) => { say(notSaved(e as Error), true); setState("not saved"); unsent.current = true; }));  // the next save still goes
  };
  const save = (extra: Partial<{ class_label: string | null }> = {}) => {
    window.clearTimeout(timer.current);
    timer.current = undefined;
    const sent = snapshot(extra.class_label !== undefined ? extra.class_label : classRef.current);
    if (sent) send(sent);
  };
  const saveSoon = () => {
    refresh();
    setState("saving"); window.clearTimeout(timer.current); timer.current = window.setTimeout(() => save(), 250);
  };
  // A change still waiting for its save is sent now: the image is being left (`now`: the page itself).
  const flush = ({ now = false } = {}) => {
    if (timer.current === undefined) return;
    window.clearTimeout(timer.current);
    timer.current = undefined;
    const sent = snapshot(classRef.current);
    if (sent) send(sent, { now });
  };

  // Each shape in its label's colour; an auto label dashed-looking (lighter fill), the selected one bolder.
  const style = (a: ImageAnnotation, state?: { selected?: boolean }) => {
    const colour = colourOf(namesRef.current, labelOf(a));
    const auto = a.id.startsWith("auto-");
    return { fill: colour, fillOpacity: auto ? 0.06 : 0.16, stroke: colour, strokeOpacity: auto ? 0.5 : 1, strokeWidth: state?.selected ? 3 : 2 };
  };

  const start = () => {
    if (!img.current || annotator.current || !set) return;
    const anno = createImageAnnotator(img.current, { drawingEnabled: false, drawingMode: "drag", userSelectAction: canEdit ? "EDIT" : "SELECT", style } as never);
    anno.setDrawingTool(tool);
    anno.on("createAnnotation", (a: ImageAnnotation) => {
      const polygon = a.target.selector as unknown as { type: string; geometry: { points: number[][] } };
      if (polygon.type === "POLYGON" && !drawable(distinct(polygon.geometry.points))) {  // closed by its first point
        anno.removeAnnotation(a.id);
        say("That polygon has fewer than 3 distinct points or no area, so it was not kept: draw it again.", true);
        return;
      }
      if (!labelOf(a)) anno.updateAnnotation({ ...a, bodies: [tag(a.id, currentRef.current)] });
      window.setTimeout(() => anno.cancelSelected(), 0);  // a new shape is not left selected: the next key or drag is for the next one
      saveSoon();
    });
    anno.on("updateAnnotation", saveSoon);
    anno.on("deleteAnnotation", saveSoon);
    // A box moved or resized while it stays selected is in the annotator's store at once, but its update event
    // comes only when the selection ends: save the person's own changes as they happen, so that leaving the image
    // with the box still selected keeps them (and the badge says "saving" meanwhile).
    anno.state.store.observe(saveSoon, { origin: Origin.LOCAL });
    anno.on("selectionChanged", (chosen: ImageAnnotation[]) => { setSelected(chosen[0] ? labelOf(chosen[0]) : null); refresh(); });
    annotator.current = anno;
    fitToCanvas();
    load().catch((e) => say(e.message, true));
  };
  const drawing = canEdit && set?.task === "detect" && current !== "";
  useEffect(() => {
    const anno = annotator.current;
    if (!anno) return;
    anno.setDrawingTool(tool);
    anno.setDrawingMode(tool === "polygon" ? "click" : "drag");  // polygons: click each point, as CVAT does
    anno.setDrawingEnabled(drawing);
  }, [tool, drawing, annotator.current]);
  useEffect(() => { annotator.current?.setStyle(style); }, [set]);

  // The label chosen: the selected shape's when one is selected (then nothing stays selected), else the next one's.
  const choose = (name: string) => {
    name = name.trim();
    const problem = nameProblem(name);
    if (problem) { say(problem, true); return; }
    if (!labelIds.current.has(name)) seenIds.current.delete(name);  // typed anew: a new label of that name
    const anno = annotator.current;
    const chosen = anno?.getSelected() ?? [];
    if (chosen.length && canEdit) {
      for (const a of chosen) {
        confidence.current.delete(a.id);  // a person's label now: no model's score beside it any more
        anno!.updateAnnotation({ ...a, bodies: [tag(a.id, name)] });
      }
      anno!.cancelSelected();
      saveSoon();
      say(`Relabelled ${chosen.length} shape(s) as ${name}.`);
    } else {
      setCurrent(name);
    }
    setDraft("");
  };
  const copyPrevious = async () => {
    if (!near?.previous_frame || !annotator.current) return;
    const doc = await api<Annotations>(`/api/images/${near.previous_frame}/annotations`);
    // a shape this frame has already (copied before) is not added again: pressed twice, every box was there twice
    const here = new Set((snapshot(classRef.current)?.body.shapes ?? []).map(shapeKey));
    const { width, height } = imageRef.current ?? { width: 0, height: 0 };
    const fresh = doc.shapes.filter((shape) => {
      const saved = toShape(toAnnotation(shape, 0), width, height);
      return saved === null || !here.has(shapeKey(saved));
    });
    for (const [i, shape] of fresh.entries()) annotator.current.addAnnotation(toAnnotation(shape, i + 1000));
    const already = doc.shapes.length - fresh.length;
    say(`Copied ${fresh.length} shape(s) from the previous frame` + (already ? `; ${already} were here already.` : "."));
    if (!fresh.length) return;
    refresh();
    save();
  };
  const review = async (action: "accept" | "reject") => {
    try {
      await api<Annotations>(`/api/images/${imageId}/review`, json("POST", { action, version: version.current }));
      location.hash = `#/datasets/${datasetId}/review`;
    } catch (e) { say((e as Error).message, true); await load(); }
  };

  // The zoom that shows the whole image in the canvas (small images grow to it, large ones shrink), and the canvas
  // ends at the window's bottom edge, measured from where it begins (the toolbar and the first-label ask above it):
  // a fixed allowance let the fitted image run below the window, its bottom edge out of sight.
  const canvas = useRef<HTMLDivElement>(null);
  const [canvasTop, setCanvasTop] = useState(180);
  const measuredTop = (box: HTMLDivElement) => Math.round(box.getBoundingClientRect().top + window.scrollY) + 20;  // and the page's padding below
  useLayoutEffect(() => {  // and again as what stands above it changes (the first-label ask goes): no gap, no overflow
    const top = canvas.current ? measuredTop(canvas.current) : canvasTop;
    if (top !== canvasTop) setCanvasTop(top);
  });
  const fitToCanvas = () => {
    const box = canvas.current, shown = imageRef.current;
    if (!box || !shown) return;
    const top = measuredTop(box);  // the canvas's own bound follows from the next render's measure
    const width = box.clientWidth - 20, height = Math.max(200, window.innerHeight - top) - 20;
    const scale = Math.max(0.1, Math.min(8, width / shown.width, height / shown.height));
    setFit(scale);
    setZoom(scale);
  };

  // Pointers on the canvas, before Annotorious sees them: Space held or the middle button pans; a press off every
  // shape while one is selected deselects it and goes on to draw (Annotorious would spend the drag on deselecting);
  // a polygon's clicks are remembered so that Enter can close it.
  const spaceHeld = useRef(false);
  const lastClick = useRef<{ x: number; y: number } | null>(null);
  // The drawing layer a press on it started a drag on: kept across the handlers' renewal (a save's recount renews
  // the data set, and with it these handlers; a drag begun before and let go past the edge after was lost).
  const dragging = useRef<SVGSVGElement | null>(null);
  useEffect(() => {
    const box = canvas.current;
    if (!box) return;
    // A box dragged past the image's edge (an object at the edge) ends at the edge, as if let go there: Annotorious
    // hears the pointer only over the image, and a release beyond it left no box and the outline following the mouse.
    const down = (e: PointerEvent) => {
      const anno = annotator.current;
      const layer = (e.target as Element).closest?.("svg.a9s-annotationlayer") as SVGSVGElement | null;
      dragging.current = e.button === 0 && !spaceHeld.current && layer?.classList.contains("drawing") ? layer : null;
      if (!spaceHeld.current && e.button !== 1) {
        const onShape = (e.target as Element).closest?.("g.a9s-annotation:not(.a9s-rubberband), .a9s-handle, .a9s-shape-handle");
        if (anno && anno.getSelected().length && !onShape && e.button === 0) {
          e.preventDefault(); e.stopPropagation();
          anno.cancelSelected();
          const again = { clientX: e.clientX, clientY: e.clientY, button: 0, buttons: 1, pointerId: e.pointerId, pointerType: e.pointerType, isPrimary: true, bubbles: true, cancelable: true };
          window.setTimeout(() => document.elementFromPoint(e.clientX, e.clientY)?.dispatchEvent(new PointerEvent("pointerdown", again)), 0);
        }
        return;
      }
      e.preventDefault(); e.stopPropagation();
      const start = { x: e.clientX, y: e.clientY, left: box.scrollLeft, top: box.scrollTop };
      box.classList.add("panning");
      const move = (m: PointerEvent) => { m.stopPropagation(); box.scrollLeft = start.left - (m.clientX - start.x); box.scrollTop = start.top - (m.clientY - start.y); };
      const up = (u: PointerEvent) => {
        u.stopPropagation(); box.classList.remove("panning");
        removeEventListener("pointermove", move, true); removeEventListener("pointerup", up, true);
        removeEventListener("pointercancel", up, true);
      };
      addEventListener("pointermove", move, true); addEventListener("pointerup", up, true);
      addEventListener("pointercancel", up, true);
    };
    const up = (e: PointerEvent) => { if (e.isTrusted) lastClick.current = { x: e.clientX, y: e.clientY }; };
    const released = (e: PointerEvent) => {
      const layer = dragging.current;
      dragging.current = null;
      if (!layer || !e.isTrusted || layer.contains(e.target as Node)) return;
      const edge = layer.getBoundingClientRect();
      const clientX = Math.min(Math.max(e.clientX, edge.left + 0.01), edge.right - 0.01);
      const clientY = Math.min(Math.max(e.clientY, edge.top + 0.01), edge.bottom - 0.01);
      const at = { clientX, clientY, button: 0, pointerId: e.pointerId, pointerType: e.pointerType, isPrimary: true, bubbles: true, cancelable: true };
      layer.dispatchEvent(new PointerEvent("pointermove", { ...at, buttons: 1 }));
      layer.dispatchEvent(new PointerEvent("pointerup", { ...at, buttons: 0 }));
    };
    const key = (e: KeyboardEvent) => {
      if (e.key !== " " || typing(e.target) || overlaid()) return;
      spaceHeld.current = e.type === "keydown";
      box.classList.toggle("pan-ready", spaceHeld.current);
      e.preventDefault();
    };
    const release = () => { spaceHeld.current = false; box.classList.remove("pan-ready"); };  // Space let go elsewhere
    const doubled = () => window.setTimeout(() => { if (begun()) say(TOO_FEW, true); }, 0);  // the tool did not close it
    box.addEventListener("dblclick", doubled);
    box.addEventListener("pointerdown", down, true);
    box.addEventListener("pointerup", up, true);
    addEventListener("pointerup", released, true);
    addEventListener("keydown", key); addEventListener("keyup", key); addEventListener("blur", release);
    return () => {
      box.removeEventListener("dblclick", doubled);
      box.removeEventListener("pointerdown", down, true);
      box.removeEventListener("pointerup", up, true);
      removeEventListener("pointerup", released, true);
      removeEventListener("keydown", key); removeEventListener("keyup", key); removeEventListener("blur", release);
    };
  }, [set, image]);

  // Enter closes a polygon being drawn: the last point clicked once more, then the double-click that closes it.
  // One the tool would not close (fewer than 3 points, no area) is said, and nothing is clicked: each try repeated
  // the last point, which a close by the first point then saved.
  const closePolygon = () => {
    const at = lastClick.current, target = at && document.elementFromPoint(at.x, at.y);
    if (!at || !target || !begun()) return;
    const click = { clientX: at.x, clientY: at.y, button: 0, buttons: 0, isPrimary: true, bubbles: true, cancelable: true, pointerType: "mouse" };
    // The pointer back on the last point first: the click adds the pointer's place, which the double-click takes
    // off again, and the points are judged without wherever the mouse went since.
    target.dispatchEvent(new PointerEvent("pointermove", click));
    window.setTimeout(() => {  // the outline drawn with the pointer there
      if (!drawable(distinct(drawnPoints()))) {
        say(TOO_FEW, true);
        return;
      }
      target.dispatchEvent(new PointerEvent("pointerdown", { ...click, buttons: 1 }));
      target.dispatchEvent(new PointerEvent("pointerup", click));
      target.dispatchEvent(new MouseEvent("dblclick", { clientX: at.x, clientY: at.y, bubbles: true, cancelable: true }));
    }, 0);
  };
  const go = (id: number | null | undefined) => {
    if (!id) return false;
    walk.heading = id;
    location.hash = `#/datasets/${datasetId}/images/${id}`;
    return true;
  };
  // A shape being drawn (a polygon's first points) is not saved until it is closed: leaving would drop it unasked.
  const begun = () => !!canvas.current?.querySelector(".a9s-rubberband > *");  // the drawing tool's outline: a shape begun
  // The points of the polygon being drawn, in the image's pixels, as its outline shows them: the pointer's place
  // is among them, the last point's where it has not moved since (and where Enter's click goes).
  const drawnPoints = () => {
    const outline = canvas.current?.querySelector(".a9s-rubberband polygon.a9s-inner")?.getAttribute("points") ?? "";
    return outline.trim().split(/\s+/).filter(Boolean).map((xy) => xy.split(",").map(Number));
  };
  // Leaving the image: not with a shape begun; with a change the server did not take, only when the person says so.
  const unfinished = () => {
    if (begun()) {
      say("Finish the shape first (a polygon: double-click or Enter closes it), or press Esc to drop it.", true);
      return true;
    }
    if (!unsent.current) return false;
    if (!confirm("This image's last change was not saved (see the message above). Leave it anyway, and lose that change?")) return true;
    unsent.current = false;  // she said leave: the router's own ask, as the address changes, is not asked again
    return false;
  };
  const step = (by: 1 | -1) => {
    if (unfinished()) return;
    const here = known.current;
    if (here?.image !== walk.heading) walk.pending += by;  // where the last step leads does not know its neighbours yet
    else go(by > 0 ? here.near.next : here.near.previous);
  };
  const pick = (name: string) => {
    if (set?.task !== "classify") choose(name);
    else if (canEdit) classify(name);
  };
  const unclass = () => { if (canEdit) classify(null); };  // unlabelled again
  // A class given or taken, undone with Ctrl+Z and redone with Ctrl+Y as a shape is (Del took it for good).
  const classes = useRef<{ undo: (string | null)[]; redo: (string | null)[] }>({ undo: [], redo: [] });
  const classify = (name: string | null, { undoing = false } = {}) => {
    if (!undoing) classes.current = { undo: [...classes.current.undo, classRef.current], redo: [] };
    setClassLabel(name);
    classRef.current = name;
    save({ class_label: name });
  };
  const undoClass = (redo: boolean) => {  // whether the key was the class's (a classification set's)
    if (set?.task !== "classify") return false;
    const { undo, redo: again } = classes.current;
    const from = redo ? again : undo;
    if (!from.length) return true;
    const name = from[from.length - 1];
    classes.current = redo ? { undo: [...undo, classRef.current], redo: again.slice(0, -1) }
      : { undo: undo.slice(0, -1), redo: [...again, classRef.current] };
    classify(name, { undoing: true });
    return true;
  };
  const undoClassRef = useRef(undoClass);
  undoClassRef.current = undoClass;

  // Annotorious undoes and redoes shapes on Ctrl+Z / Ctrl+Y wherever they are pressed: in a text field they are the
  // field's own (its typing), so they go no further than the field; elsewhere they are the shapes' only, not also the
  // browser's (whose undo and redo of the label typed earlier put the name in its field again and took the focus
  // there). A link followed, Back or Forward while a shape is unfinished waits for it.
  useEffect(() => {
    const ownKeys = (e: KeyboardEvent) => {
      if (!(e.ctrlKey || e.metaKey) || !/^[zy]$/i.test(e.key)) return;
      if (typing(e.target)) e.stopPropagation();
      else if (undoClassRef.current(e.key.toLowerCase() === "y")) e.preventDefault();  // a class has no shapes
      else if (begun()) {  // the undo is of finished shapes: pressed for the polygon begun, it deleted the one before
        e.stopPropagation();
        e.preventDefault();
        say("Undo and redo are for finished shapes: finish this one first (double-click or Enter), or press Esc to drop it.", true);
      } else if (beforeLoad(e.key.toLowerCase() === "y")) {  // its history is of shapes no longer shown
        e.stopPropagation();
        e.preventDefault();
        say("Undo and redo go back no further than the image's saved version, loaded again since: nothing to undo or redo.");
      } else {
        e.preventDefault();
        // a word on what the undone change did ("Relabelled 1 shape(s) as dog.") is no longer true: said over, where
        // the annotator has something to undo or redo (it acts after this handler)
        const redo = e.key === "y", anno = annotator.current;
        const acts = !e.shiftKey && (e.key === "z" || redo) && (redo ? anno?.canRedo() : anno?.canUndo());
        if (acts && said.current && !said.current.error && canEdit) say(redo ? "Redone." : "Undone (Ctrl+Y redoes it).");
      }
    };
    const link = (e: MouseEvent) => {
      if ((e.target as Element).closest?.("a[href^='#']") && unfinished()) e.preventDefault();
    };
    // Back in view: the labels as they are now, and the image's shapes where they changed meanwhile (a label renamed
    // in another tab renames them) and nothing here waits to be saved: drawn on the old version, a box was refused.
    const back = () => {
      if (document.visibilityState !== "visible") return;
      recount();
      const still = () => timer.current === undefined && !unsent.current && stateRef.current === "saved" && !begun();
      if (still()) api<Annotations>(`/api/images/${imageId}/annotations`)
        .then((doc) => { if (doc.version !== version.current && still()) shown(doc); }, () => undefined);
    };
    addEventListener("keydown", ownKeys, true);
    addEventListener("click", link, true);
    addEventListener("focus", back);
    document.addEventListener("visibilitychange", back);
    holdLeaving(unfinished);  // Back and Forward too (the router asks)
    const again = () => {  // logged in again: what waited goes now, or what could not load, loads
      if (unsent.current) save();
      else if (!imageRef.current) void open();
    };
    addEventListener(RENEWED, again);
    addEventListener("online", again);  // the network back: a change that could not go, goes
    const leftSaid = () => { if (carried.said) { say(carried.said, true); carried.said = ""; } };
    addEventListener(LEFT_SAID, leftSaid);
    return () => {
      removeEventListener("keydown", ownKeys, true); removeEventListener("click", link, true);
      removeEventListener("focus", back); document.removeEventListener("visibilitychange", back);
      holdLeaving(null);
      removeEventListener(RENEWED, again);
      removeEventListener("online", again);
      removeEventListener(LEFT_SAID, leftSaid);
    };
  }, []);

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (typing(e.target) || e.ctrlKey || e.metaKey || e.altKey || overlaid()) return;
      const anno = annotator.current;
      if (e.key === "ArrowRight" || e.key === "n") step(1);
      else if (e.key === "ArrowLeft" || e.key === "p") step(-1);
      else if (!canEdit && /^([1-9rg]|Delete|Backspace)$/.test(e.key)) {  // a key that changes: said, not ignored
        say("View only: this account looks at the data set; an editor or admin changes it.");
      } else if (e.key === "r") setTool("rectangle");
      else if (e.key === "g") setTool("polygon");
      else if (e.key === "Escape") { anno?.cancelDrawing(); anno?.cancelSelected(); }
      else if (e.key === "Enter" && tool === "polygon") closePolygon();
      else if (e.key === "+" || e.key === "=") setZoom((z) => Math.min(8, z * 1.25));
      else if (e.key === "-") setZoom((z) => Math.max(0.1, z / 1.25));
      else if (e.key === "0") setZoom(fit);
      else if ((e.key === "Delete" || e.key === "Backspace") && canEdit && set?.task === "classify") {
        if (classLabel !== null) unclass();
      } else if ((e.key === "Delete" || e.key === "Backspace") && canEdit) {
        for (const a of anno?.getSelected() ?? []) anno!.removeAnnotation(a.id);
      } else if (/^[1-9]$/.test(e.key) && set) {
        const chosen = set.labels[+e.key - 1];
        const what = set.task === "classify" ? "class" : "label";
        if (chosen) pick(chosen.name);
        else say(`No ${what} ${e.key}: this data set has ${set.labels.length ? `${set.labels.length} (keys 1–${Math.min(set.labels.length, 9)})` : "none yet"}; type a new ${what}'s name in the field to make one.`, true);
      } else return;
      e.preventDefault();
    };
    addEventListener("keydown", onKey);
    return () => removeEventListener("keydown", onKey);
  }, [near, set, canEdit, classLabel, tool, fit]);

  // Ctrl+wheel zooms about the pointer: the pixel under it stays there (it zoomed about the image's corner, and
  // what she pointed at went off the canvas).
  const zoomAtPointer = (e: WheelEvent) => {
    const shown = img.current;
    if (!e.ctrlKey || !shown) return;
    e.preventDefault();
    const at = shown.getBoundingClientRect();
    anchor.current = { x: (e.clientX - at.left) / zoom, y: (e.clientY - at.top) / zoom, clientX: e.clientX, clientY: e.clientY };
    setZoom(Math.min(8, Math.max(0.1, zoom * (e.deltaY < 0 ? 1.1 : 1 / 1.1))));
  };

  if (!set || !image) return <div><Message message={message} />{!message?.error && <p class="muted">Loading…</p>}</div>;
  const names = set.labels.map((l) => l.name);
  const needsLabel = set.task === "detect" && canEdit && current === "";
  guide.current = needsLabel || (guide.current && drawn.length === 0);
  const highlighted = set.task === "classify" ? classLabel : (selected ?? current);
  return (
    <section class="editor">
      <div class="page-head">
        <h1><a href="#/">Data sets</a> › <a href={`#/datasets/${datasetId}`}>{set.name}</a> › {image.original_name}</h1>
        {canEdit ? <span class={`save-state is-${state.replace(" ", "-")}`} data-testid="save-state">{state}</span>
          : <span class="save-state" title="A viewer looks; an editor or admin changes">view only</span>}
      </div>
      <div class="message-slot"><Message message={message} /></div>{/* a message coming or going moves no image under the pointer */}
      <div class="toolbar">
        <button onClick={() => step(-1)} disabled={!near?.previous} title="Previous image (←)">‹</button>
        <button onClick={() => step(1)} disabled={!near?.next} title="Next image (→)">›</button>
        {set.task === "detect" && canEdit && <>
          <button class={tool === "rectangle" ? "on" : ""} onClick={() => setTool("rectangle")} title="Rectangle (R)">▭ Box</button>
          <button class={tool === "polygon" ? "on" : ""} onClick={() => setTool("polygon")} title="Polygon (G): click its points, double-click or Enter to close">⬠ Polygon</button>
          <form class="label-field" onSubmit={(e) => { e.preventDefault(); choose(draft); label.current?.blur(); }}>
            <label>{selected !== null ? "Relabel as" : "Next label"}{" "}
              <input ref={label} list="labels" value={draft} placeholder={selected ?? (current || "name the first label")}
                onInput={(e) => setDraft(e.currentTarget.value)} aria-label="Current label" />
            </label>
            <button type="submit">Use</button>
          </form>
          <datalist id="labels">{set.labels.map((l) => <option key={l.id} value={l.name} />)}</datalist>
          {near?.previous_frame && <button onClick={copyPrevious} title="Copy the previous frame's boxes">Copy previous frame</button>}
        </>}
        <span class="zoom">
          <button onClick={() => setZoom((z) => Math.max(0.1, z / 1.25))} title="Zoom out (-)">−</button>
          <span data-testid="zoom">{Math.round(zoom * 100)}%</span>
          <button onClick={() => setZoom((z) => Math.min(8, z * 1.25))} title="Zoom in (+)">+</button>
          <button onClick={() => setZoom(fit)} title="Fit the image to the canvas (0)">Fit</button>
        </span>
      </div>
      {needsLabel ? <p class="message" data-testid="needs-label">This data set has no labels yet: type the first label's name in <em>Next label</em> and press Enter, then drag around an object.</p>
        : guide.current && <p class="message" data-testid="needs-label">The next shape is a {current}: {tool === "polygon"
          ? "click around an object, and double-click or press Enter to close it (R for a box)." : "drag around an object (G for a polygon)."}</p>}
      <div class="editor-body">
        <div class="canvas" ref={canvas} data-testid="canvas" onWheel={zoomAtPointer} style={{ maxHeight: `max(200px, calc(100vh - ${canvasTop}px))` }}>
          <div class="zoomed">{/* Annotorious wraps the image in a box of the image's own size: the image carries the zoom */}
            <div class="image-holder">
              <img ref={img} src={image.file} alt={image.original_name} onLoad={start} style={{ width: `${image.width * zoom}px`, maxWidth: "none" }} draggable={false} />
            </div>
            <div class="captions" aria-hidden="true">
              {drawn.map((d) => {
                const top = d.bounds.minY * zoom, left = d.bounds.minX * zoom;
                const inside = top < 18;  // no room above: the caption goes inside the shape's top edge
                return (
                  <span key={d.id} class="caption" data-testid="caption" style={{ left: `${Math.min(left, image.width * zoom - 60)}px`, top: `${inside ? top : top - 18}px`, background: colourOf(names, d.label) }}>
                    {d.label}{d.confidence !== null ? ` ${d.confidence.toFixed(2)}` : ""}
                  </span>
                );
              })}
            </div>
          </div>
        </div>
        <aside class="side card">
          <h2>{set.task === "classify" ? "Class" : "Labels"}</h2>
          <ol class="keys">
            {set.labels.map((l, i) => (
              <li key={l.id}>
                <button class={highlighted === l.name ? "on" : ""} onClick={() => pick(l.name)}>
                  <span class="swatch" style={{ background: colourOf(names, l.name) }} />
                  {i < 9 && <kbd>{i + 1}</kbd>} {l.name} <span class="count">{l.count}</span>
                </button>
              </li>
            ))}
          </ol>
          {set.task === "classify" && canEdit && classLabel !== null && <button onClick={unclass} title="Take this image's class away: it is unlabelled again (Del)">No class</button>}
          {set.task === "classify" && canEdit && <form class="inline" onSubmit={(e) => {
            e.preventDefault();
            const name = draft.trim(), problem = nameProblem(name);
            if (problem) { say(problem, true); return; }
            pick(name); setDraft("");
            e.currentTarget.querySelector("input")?.blur();  // out of the field: the keys act on images again
          }}>
            <input value={draft} placeholder={set.labels.length ? "another class" : "name this image's class"}
              onInput={(e) => setDraft(e.currentTarget.value)} aria-label="New class" />
            <button type="submit">Set</button>
          </form>}
          {doc && (doc.status === "auto" || doc.status === "reviewed") && <AutoNote doc={doc} datasetId={datasetId} canEdit={canEdit} onReview={review} />}
          <p class="muted">{image.width}×{image.height} · {image.split}{image.video_time_s !== null ? ` · frame at ${image.video_time_s.toFixed(2)} s` : ""}</p>
          <p class="muted small">{!canEdit ? "View only: your account is a viewer's (an editor or admin labels) · ←/→ images · +/− zoom, 0 fit" : set.task === "classify"
            ? "1–9 or a click on a class sets this image's class, Del takes it away · ←/→ images · +/− zoom, 0 fit"
            : "Choose the label (1–9, a click, or type it in Next label), then drag around an object; it keeps that label. To relabel, click a shape, then choose. Esc deselects · R box · G polygon (click points, double-click or Enter closes) · Del delete · Ctrl+Z/Y undo/redo · ←/→ images · +/− zoom, 0 fit · Space+drag pan"}</p>
        </aside>
      </div>
    </section>
  );
}

const byModel = (id: number | null) => (id === null ? "a model not in this app (deleted, or another app's)" : `model #${id}`);

function AutoNote({ doc, datasetId, canEdit, onReview }: { doc: Annotations; datasetId: number; canEdit: boolean; onReview: (action: "accept" | "reject") => void }) {
  const auto = doc.shapes.filter((s) => s.source === "auto");
  const lowest = auto.reduce((low, s) => Math.min(low, s.confidence ?? 1), 1);
  return (
    <div class={`auto-note ${doc.status}`} data-testid="auto-note">
      {doc.status === "auto" ? <>
        <strong>Auto-labelled</strong>{doc.class_label !== null ? ` by ${byModel(doc.class_model_id)}: class ${doc.class_label} at confidence ${doc.class_confidence?.toFixed(2)}.`
          : auto.length ? ` by ${byModel(auto[0].model_id)}: ${auto.length} box(es), lowest confidence ${lowest.toFixed(2)}.` : ": the model found nothing."}
        <span> Any change you save counts as your review.</span>
        {canEdit && <span class="row-actions"><button class="primary" onClick={() => onReview("accept")}>Accept</button><button class="danger" onClick={() => onReview("reject")}>Reject</button></span>}
      </> : <><strong>Reviewed</strong> ({doc.class_model_id !== null ? "the model's class kept"
        : auto.length ? `${auto.length} auto label(s) kept as the model gave them`
        : doc.shapes.length || doc.class_label ? "corrected: every label on it is a person's now" : "nothing here: trained on as an image with no object"}).</>}
      {" "}<a href={`#/datasets/${datasetId}/review`}>Review queue ›</a>
    </div>
  );
}
