// The labelling editor: boxes and polygons drawn with Annotorious on the image, saved at every change (the
// server refuses a stale write with 409, and the editor then reloads what is current). Saves go one after
// another, each with the version the previous one returned, and a change still waiting for its save when the
// image is left (→, a link, a reload) is sent at once. Keys: 1-9 pick a label
// (and relabel the selected shape), R rectangle, G polygon, Delete removes the selected shape, Ctrl+Z / Ctrl+Y
// undo and redo, → or N next image, ← or P previous, + / - / 0 zoom, Space + drag (or the middle button) pans. Auto labels are drawn in amber with their
// confidence; saving any change to them is their review, and Accept / Reject act as in the review queue.
import { useEffect, useRef, useState } from "preact/hooks";
import { createImageAnnotator, type ImageAnnotation, type ImageAnnotator } from "@annotorious/annotorious";
import "@annotorious/annotorious/annotorious.css";
import { api, ApiError, json, type Annotations, type DataSet, type ImageRecord, type Neighbours, type Shape, type ShapeOut } from "../api";
import { Message, useMessage } from "../widgets";

type Tool = "rectangle" | "polygon";

const tag = (annotation: string, value: string) => ({ id: `${annotation}-label`, annotation, purpose: "tagging", value });

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

function toShape(annotation: ImageAnnotation, width: number, height: number, fallback: string): Shape | null {
  const label = annotation.bodies.find((b) => b.purpose === "tagging")?.value || fallback;
  const selector = annotation.target.selector as unknown as { type: string; geometry: { x: number; y: number; w: number; h: number; points: number[][] } };
  const clampX = (v: number) => Math.min(Math.max(v, 0), width), clampY = (v: number) => Math.min(Math.max(v, 0), height);
  if (selector.type === "RECTANGLE") {
    const g = selector.geometry;
    const box = [clampX(g.x), clampY(g.y), clampX(g.x + g.w), clampY(g.y + g.h)].map((v) => Math.round(v * 10) / 10);
    return box[2] > box[0] && box[3] > box[1] ? { kind: "box", label, points: box } : null;
  }
  const points = selector.geometry.points.map(([x, y]) => [Math.round(clampX(x) * 10) / 10, Math.round(clampY(y) * 10) / 10]);
  return points.length >= 3 ? { kind: "polygon", label, points } : null;
}

export function Editor({ datasetId, imageId, canEdit }: { datasetId: number; imageId: number; canEdit: boolean }) {
  const [set, setSet] = useState<DataSet | null>(null);
  const [image, setImage] = useState<ImageRecord | null>(null);
  const [near, setNear] = useState<Neighbours | null>(null);
  const [current, setCurrent] = useState("");
  const [tool, setTool] = useState<Tool>("rectangle");
  const [zoom, setZoom] = useState(1);
  const [state, setState] = useState("loading");
  const [classLabel, setClassLabel] = useState<string | null>(null);
  const [doc, setDoc] = useState<Annotations | null>(null);
  const [message, say] = useMessage();
  const img = useRef<HTMLImageElement>(null);
  const annotator = useRef<ImageAnnotator | null>(null);
  const version = useRef(0);
  const timer = useRef<number | undefined>(undefined);
  const queue = useRef<Promise<void>>(Promise.resolve());
  const drawnFrom = useRef(0);  // counts loads of the server's shapes: a save drawn before the last load is stale
  const currentRef = useRef("");
  currentRef.current = current;
  const classRef = useRef<string | null>(null);
  classRef.current = classLabel;
  const imageRef = useRef<ImageRecord | null>(null);  // read by the flush the unmount runs, which sees the first render
  imageRef.current = image;

  useEffect(() => {
    Promise.all([
      api<DataSet>(`/api/datasets/${datasetId}`), api<ImageRecord>(`/api/images/${imageId}`),
      api<Neighbours>(`/api/images/${imageId}/neighbours`),
    ]).then(([s, i, n]) => { setSet(s); setImage(i); setNear(n); setCurrent((c) => c || s.labels[0]?.name || "object"); },
      (e) => say(e.message, true));
    const leave = () => flush({ now: true });
    addEventListener("pagehide", leave);
    return () => { removeEventListener("pagehide", leave); flush(); annotator.current?.destroy(); annotator.current = null; };
  }, [imageId]);

  const load = async () => {
    const doc = await api<Annotations>(`/api/images/${imageId}/annotations`);
    version.current = doc.version;
    drawnFrom.current += 1;
    setDoc(doc);
    setClassLabel(doc.class_label);
    annotator.current?.setAnnotations(doc.shapes.map(toAnnotation), true);
    setState("saved");
  };

  // What the annotator shows now, as the server takes it; read at once, sent when the saves before it are done.
  const snapshot = (classLabel: string | null) => {
    const image = imageRef.current;
    if (!image || !annotator.current) return null;
    const shapes = annotator.current.getAnnotations().map((a) => toShape(a, image.width, image.height, currentRef.current)).filter((s): s is Shape => s !== null);
    return { shapes, class_label: classLabel };
  };
  // Saves go one after another, each on the version the last returned. One drawn before the server's shapes were
  // loaded again (a 409 reloads them) is dropped: sent, it would overwrite what the other person saved. `now`
  // (the page is going away) sends at once with keepalive, as nothing queued would start any more.
  type Body = { shapes: Shape[]; class_label: string | null };
  const put = async (body: Body, drawn: number, keepalive: boolean) => {
    if (drawn !== drawnFrom.current) return;
    try {
      const doc = await api<Annotations>(`/api/images/${imageId}/annotations`, { ...json("PUT", { version: version.current, ...body }), keepalive });
      version.current = doc.version;
      setDoc(doc);
      setState("saved");
      api<DataSet>(`/api/datasets/${datasetId}`).then(setSet, () => undefined);
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) {
        say("Someone else changed this image: reloaded their version.", true);
        await load();
      } else { say((e as Error).message, true); setState("not saved"); }
    }
  };
  const send = (body: Body, { now = false } = {}) => {
    setState("saving");
    const drawn = drawnFrom.current;
    if (now) { void put(body, drawn, true); return; }
    queue.current = queue.current.then(() => put(body, drawn, false));
  };
  const save = (extra: Partial<{ class_label: string | null }> = {}) => {
    window.clearTimeout(timer.current);
    timer.current = undefined;
    const body = snapshot(extra.class_label !== undefined ? extra.class_label : classRef.current);
    if (body) send(body);
  };
  const saveSoon = () => { setState("saving"); window.clearTimeout(timer.current); timer.current = window.setTimeout(() => save(), 250); };
  // A change still waiting for its save is sent now: the image is being left (`now`: the page itself).
  const flush = ({ now = false } = {}) => {
    if (timer.current === undefined) return;
    window.clearTimeout(timer.current);
    timer.current = undefined;
    const body = snapshot(classRef.current);
    if (body) send(body, { now });
  };

  const start = () => {
    if (!img.current || annotator.current || !set) return;
    const anno = createImageAnnotator(img.current, { drawingEnabled: canEdit && set.task === "detect", drawingMode: "drag", userSelectAction: canEdit ? "EDIT" : "SELECT",
      style: (a: ImageAnnotation) => a.id.startsWith("auto-")
        ? { fill: "#f59e0b", fillOpacity: 0.12, stroke: "#fbbf24", strokeWidth: 2 }
        : { fill: "#3b82f6", fillOpacity: 0.15, stroke: "#93c5fd", strokeWidth: 2 } } as never);
    anno.setDrawingTool(tool);
    anno.on("createAnnotation", (a: ImageAnnotation) => {
      if (!a.bodies.some((b) => b.purpose === "tagging")) anno.updateAnnotation({ ...a, bodies: [tag(a.id, currentRef.current)] });
      saveSoon();
    });
    anno.on("updateAnnotation", saveSoon);
    anno.on("deleteAnnotation", saveSoon);
    // A selected shape shows its label as the current one (so 1-9 and the list show what it is now).
    anno.on("selectionChanged", (chosen: ImageAnnotation[]) => {
      const label = chosen[0]?.bodies.find((b) => b.purpose === "tagging")?.value;
      if (label) setCurrent(label);
    });
    annotator.current = anno;
    load().catch((e) => say(e.message, true));
  };
  useEffect(() => { annotator.current?.setDrawingTool(tool); }, [tool]);

  const relabel = (name: string) => {
    setCurrent(name);
    const anno = annotator.current;
    const chosen = anno?.getSelected() ?? [];
    for (const a of chosen) anno!.updateAnnotation({ ...a, bodies: [tag(a.id, name)] });
    if (chosen.length) saveSoon();
  };
  const copyPrevious = async () => {
    if (!near?.previous_frame || !annotator.current) return;
    const doc = await api<Annotations>(`/api/images/${near.previous_frame}/annotations`);
    for (const [i, shape] of doc.shapes.entries()) annotator.current.addAnnotation(toAnnotation(shape, i + 1000));
    say(`Copied ${doc.shapes.length} shape(s) from the previous frame.`);
    save();
  };
  const review = async (action: "accept" | "reject") => {
    try {
      await api<Annotations>(`/api/images/${imageId}/review`, json("POST", { action, version: version.current }));
      location.hash = `#/datasets/${datasetId}/review`;
    } catch (e) { say((e as Error).message, true); await load(); }
  };
  // Pan: with Space held or the middle button, a drag scrolls the zoomed image; listened for in the capture
  // phase so that Annotorious, under the pointer, neither draws nor selects.
  const canvas = useRef<HTMLDivElement>(null);
  const spaceHeld = useRef(false);
  useEffect(() => {
    const box = canvas.current;
    if (!box) return;
    const down = (e: PointerEvent) => {
      if (!spaceHeld.current && e.button !== 1) return;
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
    const key = (e: KeyboardEvent) => {
      if (e.key !== " " || (e.target as HTMLElement).tagName === "INPUT") return;
      spaceHeld.current = e.type === "keydown";
      box.classList.toggle("pan-ready", spaceHeld.current);
      e.preventDefault();
    };
    const release = () => { spaceHeld.current = false; box.classList.remove("pan-ready"); };  // Space let go elsewhere
    box.addEventListener("pointerdown", down, true);
    addEventListener("keydown", key); addEventListener("keyup", key); addEventListener("blur", release);
    return () => {
      box.removeEventListener("pointerdown", down, true);
      removeEventListener("keydown", key); removeEventListener("keyup", key); removeEventListener("blur", release);
    };
  }, [set, image]);
  const go = (id: number | null | undefined) => { if (id) location.hash = `#/datasets/${datasetId}/images/${id}`; };

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const target = e.target as HTMLElement;
      if (target.tagName === "INPUT" || target.tagName === "SELECT" || e.ctrlKey || e.metaKey) return;
      if (e.key === "ArrowRight" || e.key === "n") go(near?.next);
      else if (e.key === "ArrowLeft" || e.key === "p") go(near?.previous);
      else if (e.key === "r") setTool("rectangle");
      else if (e.key === "g") setTool("polygon");
      else if (e.key === "+" || e.key === "=") setZoom((z) => Math.min(8, z * 1.25));
      else if (e.key === "-") setZoom((z) => Math.max(0.25, z / 1.25));
      else if (e.key === "0") setZoom(1);
      else if ((e.key === "Delete" || e.key === "Backspace") && canEdit) {
        const anno = annotator.current;
        for (const a of anno?.getSelected() ?? []) anno!.removeAnnotation(a.id);
      } else if (/^[1-9]$/.test(e.key) && set) {
        const label = set.labels[+e.key - 1];
        if (label) { if (set.task === "classify") { setClassLabel(label.name); save({ class_label: label.name }); } else relabel(label.name); }
      } else return;
      e.preventDefault();
    };
    addEventListener("keydown", onKey);
    return () => removeEventListener("keydown", onKey);
  }, [near, set, canEdit, classLabel]);

  if (!set || !image) return <div><Message message={message} /><p class="muted">Loading…</p></div>;
  return (
    <section class="editor">
      <div class="page-head">
        <h1><a href="#/">Data sets</a> › <a href={`#/datasets/${datasetId}`}>{set.name}</a> › {image.original_name}</h1>
        <span class={`save-state ${state.replace(" ", "-")}`} data-testid="save-state">{state}</span>
      </div>
      <Message message={message} />
      <div class="toolbar">
        <button onClick={() => go(near?.previous)} disabled={!near?.previous} title="Previous image (←)">‹</button>
        <button onClick={() => go(near?.next)} disabled={!near?.next} title="Next image (→)">›</button>
        {set.task === "detect" && canEdit && <>
          <button class={tool === "rectangle" ? "on" : ""} onClick={() => setTool("rectangle")} title="Rectangle (R)">▭ Box</button>
          <button class={tool === "polygon" ? "on" : ""} onClick={() => setTool("polygon")} title="Polygon (G)">⬠ Polygon</button>
          <label>Label <input list="labels" value={current} onInput={(e) => setCurrent(e.currentTarget.value)} onChange={(e) => relabel(e.currentTarget.value)} aria-label="Current label" /></label>
          <datalist id="labels">{set.labels.map((l) => <option key={l.id} value={l.name} />)}</datalist>
          {near?.previous_frame && <button onClick={copyPrevious} title="Copy the previous frame's boxes">Copy previous frame</button>}
        </>}
        <span class="zoom"><button onClick={() => setZoom((z) => Math.max(0.25, z / 1.25))}>−</button>{Math.round(zoom * 100)}%<button onClick={() => setZoom((z) => Math.min(8, z * 1.25))}>+</button></span>
      </div>
      <div class="editor-body">
        <div class="canvas" ref={canvas} data-testid="canvas" onWheel={(e) => { if (e.ctrlKey) { e.preventDefault(); setZoom((z) => Math.min(8, Math.max(0.25, z * (e.deltaY < 0 ? 1.1 : 1 / 1.1)))); } }}>
          <div class="zoomed">{/* Annotorious wraps the image in a box of the image's own size: the image carries the zoom */}
            <img ref={img} src={image.file} alt={image.original_name} onLoad={start} style={{ width: `${image.width * zoom}px`, maxWidth: "none" }} draggable={false} />
          </div>
        </div>
        <aside class="side card">
          <h2>{set.task === "classify" ? "Class" : "Labels"}</h2>
          <ol class="keys">
            {set.labels.map((l, i) => (
              <li key={l.id}>
                <button class={(set.task === "classify" ? classLabel : current) === l.name ? "on" : ""}
                  onClick={() => { if (set.task === "classify") { setClassLabel(l.name); save({ class_label: l.name }); } else relabel(l.name); }}>
                  {i < 9 && <kbd>{i + 1}</kbd>} {l.name} <span class="count">{l.count}</span>
                </button>
              </li>
            ))}
          </ol>
          {doc && (doc.status === "auto" || doc.status === "reviewed") && <AutoNote doc={doc} datasetId={datasetId} canEdit={canEdit} onReview={review} />}
          <p class="muted">{image.width}×{image.height} · {image.split}{image.video_time_s !== null ? ` · frame at ${image.video_time_s.toFixed(2)} s` : ""}</p>
          <p class="muted small">Drag to draw. 1–9 label · R box · G polygon · Del delete · Ctrl+Z/Y undo/redo · ←/→ images · +/− zoom · Space+drag pan</p>
        </aside>
      </div>
    </section>
  );
}

function AutoNote({ doc, datasetId, canEdit, onReview }: { doc: Annotations; datasetId: number; canEdit: boolean; onReview: (action: "accept" | "reject") => void }) {
  const auto = doc.shapes.filter((s) => s.source === "auto");
  const lowest = auto.reduce((low, s) => Math.min(low, s.confidence ?? 1), 1);
  return (
    <div class={`auto-note ${doc.status}`} data-testid="auto-note">
      {doc.status === "auto" ? <>
        <strong>Auto-labelled</strong>{doc.class_model_id !== null ? ` by model #${doc.class_model_id}: class ${doc.class_label} at confidence ${doc.class_confidence?.toFixed(2)}.`
          : auto.length ? ` by model #${auto[0].model_id}: ${auto.length} box(es), lowest confidence ${lowest.toFixed(2)}.` : ": the model found nothing."}
        <span> Any change you save counts as your review.</span>
        {canEdit && <span class="row-actions"><button class="primary" onClick={() => onReview("accept")}>Accept</button><button class="danger" onClick={() => onReview("reject")}>Reject</button></span>}
      </> : <><strong>Reviewed</strong> ({doc.class_model_id !== null ? "the model's class kept" : `${auto.length} auto label(s) kept`}).</>}
      <a href={`#/datasets/${datasetId}/review`}>Review queue ›</a>
    </div>
  );
}
