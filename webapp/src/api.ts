// The app's JSON API: every call goes through `api`, which sends the CSRF token of the session (when there is
// one) and turns an error answer into an Error with the server's one-line message.

export type Task = "detect" | "classify";
export type Status = "unlabelled" | "labelled" | "auto" | "reviewed";
export type Split = "train" | "val" | "test";

export interface LabelCount { id: number; name: string; count: number; unreviewed: number }  // count: a person's; unreviewed: a model's, to review
export interface DataSet {
  id: number; name: string; task: Task; created_at: string; images: number; labelled: number; to_review: number; jobs: number; running: number;
  merges: { label_id: number; into_id: number }[];  // where its merged labels went
  labels: LabelCount[]; thumbnail: string | null;
}
export interface ImageRecord {
  id: number; dataset_id: number; original_name: string; width: number; height: number; split: Split;
  status: Status; class_label: string | null; version: number; file: string; thumbnail: string;
  video_id: number | null; video_time_s: number | null; derived_from: number | null;
  shapes: number;  // its boxes and polygons
}
export interface ImagePage { total: number; offset: number; items: ImageRecord[] }
export interface Shape { kind: "box" | "polygon"; label: string; points: number[] | number[][] }
// As the server shows a shape: drawn by a person, or an auto label with its model and confidence.
export interface ShapeOut extends Shape { source: "human" | "auto"; model_id: number | null; confidence: number | null }
export interface Annotations {
  image_id: number; version: number; status: Status; shapes: ShapeOut[]; class_label: string | null;
  class_model_id: number | null; class_confidence: number | null;  // a class a model gave, until a person changes it
}
export interface Video {
  id: number; dataset_id: number; original_name: string; duration_s: number; fps: number; width: number;
  height: number; file: string; frames: number;
}
export interface UploadResult { added: ImageRecord[]; refused: string[]; changed?: string[] }
export interface Session { name: string; role: string; local: boolean; csrf: string | null }
export interface Neighbours { previous: number | null; next: number | null; previous_frame: number | null }

let csrf: string | null = null;
let account: string | null = null;  // who this tab is logged in as: a token renewed for another is not used

export class ApiError extends Error {
  constructor(public status: number, message: string) { super(message); }
}

// A session that ends while a page is open (a logout in another tab, the account removed) is said once, to whoever
// listens (the app shows its login over the page, which keeps what it has not saved); `renewed` is sent when a
// person has logged in again, for a page to send what waited.
let ended: ((message: string) => void) | null = null;
export function onSessionEnded(listener: ((message: string) => void) | null) { ended = listener; }
export const RENEWED = "forklift:session-renewed";

const CSRF_REFUSED = /x-csrf-token/i;  // the server's 403 for a change without this session's token

export async function api<T>(path: string, options: RequestInit = {}, retried = false): Promise<T> {
  const headers = new Headers(options.headers);
  if (csrf) headers.set("X-CSRF-Token", csrf);
  if (options.body && !(options.body instanceof FormData)) headers.set("Content-Type", "application/json");
  let response: Response;
  try {
    response = await fetch(path, { ...options, headers, credentials: "same-origin" });
  } catch (e) {  // the browser's own words ("Failed to fetch", "NetworkError when ...") say nothing to a person
    if ((e as Error).name === "AbortError") throw e;
    throw new Error("The server could not be reached (it is stopped, or the network is down).");
  }
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { message = (await response.json()).error ?? message; } catch { /* not JSON */ }
    // logged in again in another tab: the cookie is the new session's, the token this tab holds the old one's. The
    // request goes again only as the same account; another's login there ends this tab's (nothing went through).
    if (response.status === 403 && CSRF_REFUSED.test(message) && !retried) {
      const was = account;
      const now = await api<Session>("/api/session").catch(() => null);
      if (now !== null && now.name === was) { csrf = now.csrf; return api<T>(path, options, true); }
      ended?.(now === null ? "logged out" : `${now.name} logged in in another tab`);
      throw new ApiError(401, "log in first");
    }
    if (response.status === 401 && !path.startsWith("/api/session") && !path.startsWith("/api/login")) ended?.(message);
    throw new ApiError(response.status, readable(message));
  }
  return (response.status === 204 ? undefined : await response.json()) as T;
}

// The API names a form's field as its validator does ("body.name: String should have at least 1 character"); a
// person reads what is wrong with the name.
function readable(message: string): string {
  const found = /^(?:body|query)\.(?:[\w.]+\.)?(\w+): String should have (?:at least 1 character|at most (\d+) characters)$/.exec(message);
  if (!found) return message;
  const field = found[1].replace(/_/g, " ");
  return found[2] ? `The ${field} is too long: at most ${found[2]} characters.` : `The ${field} is empty: type one.`;
}

export const json = (method: string, body: unknown): RequestInit => ({ method, body: JSON.stringify(body) });
export const MAX_EPOCHS = 10_000;  // the most epochs a job may have, as the server takes them
export const NAME_LIMIT = 200;  // the characters a name may have (a data set's, a label's), as the server takes them

export async function loadSession(): Promise<Session | null> {
  try {
    const session = await api<Session>("/api/session");
    csrf = session.csrf;
    account = session.name;
    return session;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return null;
    throw error;
  }
}

export async function login(name: string, password: string): Promise<Session> {
  const session = await api<Session>("/api/login", json("POST", { name, password }));
  csrf = session.csrf;
  account = session.name;
  return session;
}

export async function logout(): Promise<void> {
  await api<void>("/api/logout", { method: "POST" });
  csrf = null;
}

export interface Job {
  id: number; dataset_id: number; dataset_name: string; model: string; settings: Record<string, unknown>;
  state: "queued" | "running" | "done" | "failed" | "cancelled" | "interrupted"; device: string; epoch: number;
  epochs: number; pid: number | null; created_by: string; created_at: string; started_at: string | null; finished_at: string | null;
  error: string | null;
}

export interface Device { name: string; label: string; slots: number; running: number; queued: number }

export interface Estimate { seconds: number | null; basis: string }  // how long a job would take, and from what

export interface Model {
  id: number; name: string; job_id: number | null; dataset_id: number | null; dataset_digest: string | null;
  settings: Record<string, unknown>; metrics: Record<string, number>; created_at: string;
}

export interface Deployment {
  id: number; model_id: number; name: string; port: number; url: string; curl: { native: string; powerai: string };
  created_by: string;
}

export interface AutoLabelRun {
  id: number; dataset_id: number; model_id: number | null; video_id: number | null; threshold: number;
  state: "queued" | "running" | "done" | "failed" | "cancelled" | "interrupted"; total: number; done: number;
  boxes: number; created_by: string; created_at: string; finished_at: string | null; error: string | null;
}
export interface ReviewItem { image: ImageRecord; lowest_confidence: number | null; boxes: number }
export interface ReviewPage { total: number; offset: number; items: ReviewItem[] }
