// Training jobs: the list (state, progress, who started it) and one job's live charts of loss and validation
// metrics per epoch, fed by server-sent events (not by polling a log); once done, the model's evaluation on val
// (per-class AP, precision and recall, PR curves and the confusion matrix as forklift eval draws them).
import { useEffect, useRef, useState } from "preact/hooks";
import { CategoryScale, Chart, Legend, LinearScale, LineController, LineElement, PointElement, Tooltip } from "chart.js";
import { api, type Job } from "../api";
import { duration, Message, useMessage } from "../widgets";

Chart.register(LineController, LineElement, PointElement, LinearScale, CategoryScale, Legend, Tooltip);

// What the chart's legend calls metrics.csv's columns: the words the rest of the page uses.
const METRIC_NAMES: Record<string, string> = { loss: "loss", map50: "mAP@.5", map: "mAP@[.5:.95]", top1: "top-1 accuracy", miou: "mIoU" };

// The time left: at `pace` seconds an epoch where the job's page knows it, else from the pace of the epochs done
// since the job (last) started (its start-up counted in, which the first epochs' estimate overstates).
function eta(job: Job, pace: number | null): string {
  if (job.state !== "running" || !job.started_at || job.epoch === 0) return "";
  const left = (pace ?? (Date.now() - Date.parse(job.started_at)) / job.epoch / 1000) * (job.epochs - job.epoch);
  return `${duration(left)} left`;
}

// Seconds an epoch takes, from metrics.csv: the mean step of `elapsed` over the last epochs of one run (validation
// included), or the one epoch's training time.
function paceOf(rows: Record<string, string>[]): number | null {
  const recent = rows.slice(-5).map((r) => Number(r.elapsed));
  const steps = recent.slice(1).map((t, i) => t - recent[i]).filter((d) => d > 0);  // a resumed run starts again at 0
  if (steps.length) return steps.reduce((a, b) => a + b, 0) / steps.length;
  const seconds = Number(rows[rows.length - 1]?.seconds);
  return seconds > 0 ? seconds : null;
}

function Progress({ job, pace = null }: { job: Job; pace?: number | null }) {
  const left = eta(job, pace);
  return <span class="progress" title={left}><span style={{ width: `${(100 * job.epoch) / job.epochs}%` }} /><em>{job.epoch}/{job.epochs}{left && ` · ${left}`}</em></span>;
}

interface Evaluation {  // eval.json: a detector's mAP, per-class AP and operating point, or a classifier's top-k
  classes: string[]; images: number; map?: number | null; map50?: number | null; ap50?: Record<string, number | null>;
  threshold?: number; precision?: number | null; recall?: number | null; top1?: number; top5?: number; pictures: Record<string, string>;
  epoch?: number | null;  // the epoch whose weights the model holds: the best on val
}

function EvaluationPanel({ jobId, epochs }: { jobId: number; epochs: number }) {
  const [found, setFound] = useState<Evaluation | null>(null);
  const [missing, setMissing] = useState<string | null>(null);  // why a finished job's model has no evaluation
  useEffect(() => {
    api<Evaluation>(`/api/jobs/${jobId}/evaluation`).then(setFound, (e) => { setFound(null); setMissing((e as Error).message); });
  }, [jobId]);
  if (!found) return missing ? <p class="message error" data-testid="no-evaluation">{missing}</p> : null;
  const figure = (v: number | null | undefined) => (v === null || v === undefined ? "–" : v.toFixed(3));
  const ap50 = found.ap50;
  return (
    <div class="card evaluation" data-testid="evaluation">
      <h2>Evaluation on val ({found.images} images)</h2>
      {found.epoch && <p class="muted" data-testid="evaluated-epoch">The model holds the weights of epoch {found.epoch} of {epochs}, the best on val.</p>}
      {ap50 ? <>
        <p>mAP@.5 <strong>{figure(found.map50)}</strong> · mAP@[.5:.95] {figure(found.map)} · at confidence {figure(found.threshold)}: precision {figure(found.precision)}, recall {figure(found.recall)}</p>
        <table class="jobs"><thead><tr><th>Class</th><th>AP@.5</th></tr></thead>
          <tbody>{found.classes.map((c) => <tr key={c}><td>{c}</td><td>{figure(ap50[c])}</td></tr>)}</tbody></table>
      </> : <p>top-1 <strong>{figure(found.top1)}</strong> · top-5 {figure(found.top5)}</p>}
      <div class="eval-pictures">{Object.entries(found.pictures).map(([name, url]) => <img key={name} src={url} alt={name} loading="lazy" />)}</div>
    </div>
  );
}

function Actions({ job, canEdit, onChange, say }: { job: Job; canEdit: boolean; onChange: (j: Job) => void; say: (t: string, e?: boolean) => void }) {
  if (!canEdit) return null;
  const run = (what: string) => api<Job>(`/api/jobs/${job.id}/${what}`, { method: "POST" }).then(onChange, (e) => say(e.message, true));
  return <span class="row-actions">
    {(job.state === "queued" || job.state === "running") && <button class="danger" onClick={() => run("cancel")}>Cancel</button>}
    {["interrupted", "cancelled", "failed"].includes(job.state) && <button onClick={() => run("resume")}>Resume</button>}
  </span>;
}

export function Jobs({ canEdit }: { canEdit: boolean }) {
  const [jobs, setJobs] = useState<Job[] | null>(null);
  const [message, say] = useMessage();
  // a poll's answer is taken only if no action was taken since it was sent: one sent before a Cancel, answered
  // after it, put the old "running" back for a few seconds
  const acted = useRef(0);
  useEffect(() => {
    const load = () => {
      const since = acted.current;
      api<Job[]>("/api/jobs").then((found) => { if (since === acted.current) setJobs(found); }, (e) => say(e.message, true));
    };
    load();
    const timer = setInterval(load, 3000);
    return () => clearInterval(timer);
  }, []);
  return (
    <section>
      <div class="page-head"><h1>Training</h1></div>
      <Message message={message} />
      {jobs === null ? <p class="muted">Loading…</p> : jobs.length === 0 ? <p class="empty">{canEdit ? "No training jobs yet: open a labelled data set and press Train." : "No training jobs yet."}</p> : (
        <table class="jobs card">
          <thead><tr><th>Job</th><th>Data set</th><th>Model</th><th>Device</th><th>State</th><th>Progress · ETA</th><th>Started by</th><th /></tr></thead>
          <tbody>{jobs.map((job) => (
            <tr key={job.id}>
              <td><a href={`#/jobs/${job.id}`}>#{job.id}</a></td>
              <td><a href={`#/datasets/${job.dataset_id}`}>{job.dataset_name}</a></td>
              <td>{job.model}</td><td>{job.device}</td><td><span class={`state ${job.state}`}>{job.state}</span></td>
              <td><Progress job={job} /></td><td>{job.created_by}</td>
              <td><Actions job={job} canEdit={canEdit} say={say}
                onChange={(changed) => { acted.current += 1; setJobs((all) => all && all.map((j) => (j.id === changed.id ? changed : j))); }} /></td>
            </tr>))}
          </tbody>
        </table>
      )}
    </section>
  );
}

export function JobPage({ jobId, canEdit }: { jobId: number; canEdit: boolean }) {
  const [job, setJob] = useState<Job | null>(null);
  const [rows, setRows] = useState<Record<string, string>[]>([]);
  const [message, say] = useMessage();
  const canvas = useRef<HTMLCanvasElement>(null);
  const chart = useRef<Chart | null>(null);
  const [stream, setStream] = useState(0);
  const [start, setStart] = useState<string[]>([]);  // what the run said it starts from, once it has begun

  useEffect(() => {
    setRows([]);
    const events = new EventSource(`/api/jobs/${jobId}/events`);
    events.addEventListener("epoch", (e) => setRows((r) => [...r, JSON.parse((e as MessageEvent).data)]));
    events.addEventListener("state", (e) => setJob(JSON.parse((e as MessageEvent).data)));
    events.onerror = () => {  // the stream ends with the job; or there is no such job, which the page says
      events.close();
      api<Job>(`/api/jobs/${jobId}`).then(setJob, (e) => say(e.message, true));
    };
    return () => events.close();
  }, [jobId, stream]);

  const begun = rows.length > 0;
  useEffect(() => { api<string[]>(`/api/jobs/${jobId}/start`).then(setStart, () => setStart([])); }, [jobId, begun, job?.state]);

  useEffect(() => {
    if (!canvas.current) return;
    const keys = rows.length ? Object.keys(rows[0]).filter((k) => k === "loss" || k.startsWith("map") || k === "top1" || k === "miou") : [];
    const colours = ["#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2"];
    const data = { labels: rows.map((r) => r.epoch), datasets: keys.map((k, i) => ({
      label: METRIC_NAMES[k] ?? k, data: rows.map((r) => (r[k] === "" ? null : Number(r[k]))), borderColor: colours[i % colours.length],
      yAxisID: k === "loss" ? "loss" : "metric", tension: 0.2, spanGaps: true,
    })) };
    if (!chart.current) {
      chart.current = new Chart(canvas.current, { type: "line", data, options: { animation: false, maintainAspectRatio: false,
        scales: { loss: { type: "linear", position: "left", title: { display: true, text: "loss" } },
                  metric: { type: "linear", position: "right", min: 0, max: 1, grid: { drawOnChartArea: false }, title: { display: true, text: "val" } } } } });
    } else { chart.current.data = data; chart.current.update(); }
  }, [rows]);
  useEffect(() => () => { chart.current?.destroy(); chart.current = null; }, []);

  const last = rows[rows.length - 1];
  return (
    <section class="job-page">
      <div class="page-head">
        <h1><a href="#/jobs">Training</a> › job #{jobId}</h1>
        {job && <><span class={`state ${job.state}`} data-testid="job-state">{job.state}</span><Progress job={last ? { ...job, epoch: Math.max(job.epoch, Number(last.epoch)) } : job} pace={paceOf(rows)} />{/* the badge counts the chart's epochs */}
          <Actions job={job} canEdit={canEdit} onChange={(j) => { setJob(j); setStream((s) => s + 1); }} say={say} /></>}
      </div>
      <Message message={message} />
      {job?.error && <p class="message error">{job.error}</p>}
      <div class="columns">
        <div class="card chart-card">
          <div class="chart" style={{ height: "360px" }}><canvas ref={canvas} /></div>
          {start.map((line) => <p key={line} class="muted small" data-testid="start-notes">Fine-tuning: {line}</p>)}
          <p class="muted chart-caption" data-testid="epochs-seen">{last ? `epoch ${last.epoch}${job ? ` of ${job.epochs}` : ""}: loss ${Number(last.loss).toFixed(3)}` : job?.state === "queued" || job?.state === "running" ? "waiting for the first epoch…" : job ? "no epochs recorded" : ""}</p>
        </div>
        <aside class="card side-facts">
          {job && <dl>
            <dt>Model</dt><dd>{job.model}</dd><dt>Device</dt><dd>{job.device}</dd>
            <dt>Data set</dt><dd><a href={`#/datasets/${job.dataset_id}`}>{job.dataset_name}</a></dd>
            {Object.entries(job.settings).filter(([k]) => k !== "from_model").map(([k, v]) => <><dt key={k}>{k === "from_model_id" ? "Fine-tunes model" : k}</dt><dd>{k === "from_model_id" ? <a href="#/models">#{String(v)}</a> : String(v)}</dd></>)}
            <dt>Started by</dt><dd>{job.created_by}</dd>
            {last && <><dt>Learning rate</dt><dd>{Number(last.lr).toExponential(2)}</dd><dt>Images/s</dt><dd>{Number(last.images_per_s).toFixed(1)}</dd></>}
          </dl>}
        </aside>
      </div>
      {job?.state === "done" && <EvaluationPanel jobId={jobId} epochs={job.epochs} />}
    </section>
  );
}
