// Small pieces every page uses: a message line (errors in red, kept until the next one).
import { useRef, useState } from "preact/hooks";

export interface Said { text: string; error: boolean }

// The page's message, and (third) a way to take an error back once what it said is over (a save that failed went
// through since): a red "not saved" beside a saved image says the opposite of what is so.
export function useMessage(): [Said | null, (text: string, error?: boolean) => void, () => void] {
  const [message, setMessage] = useState<Said | null>(null);
  return [message, (text, error = false) => setMessage({ text, error }), () => setMessage((m) => (m?.error ? null : m))];
}

// An action that must not run twice at once (a double click on Start, Duplicate, Capture): a second call while the
// first is on its way does nothing, and `busy` disables its button (rendered before the next click arrives).
export function useOneAtATime(): [boolean, (work: () => Promise<unknown>) => Promise<void>] {
  const [busy, setBusy] = useState(false);
  const running = useRef(false);
  const run = async (work: () => Promise<unknown>) => {
    if (running.current) return;
    running.current = true;
    setBusy(true);
    try { await work(); } finally { running.current = false; setBusy(false); }
  };
  return [busy, run];
}

export function Message({ message }: { message: Said | null }) {
  if (!message) return null;
  return <p class={message.error ? "message error" : "message"} role={message.error ? "alert" : "status"}>{message.text}</p>;
}

// A span of time in the unit a person reads it in: seconds, minutes or hours.
export function duration(seconds: number): string {
  return seconds < 90 ? `${Math.max(1, Math.round(seconds))} s` : seconds < 5400 ? `${Math.round(seconds / 60)} min` : `${(seconds / 3600).toFixed(1)} h`;
}

// Uploads and saves on their way: while any is, reloading or closing the page has the browser ask first (moving within
// the app does not stop them).
let sending = 0;
addEventListener("beforeunload", (event) => { if (sending > 0) event.preventDefault(); });
export async function sendingWhile<T>(work: () => Promise<T>): Promise<T> {
  sending += 1;
  try { return await work(); } finally { sending -= 1; }
}

// A page that must not be left unasked (the editor while a shape is begun) says so here. Back and Forward cannot be
// refused: the router asks before it shows another page, and while the page holds, goes back to it.
let holding: (() => boolean) | null = null;
export function holdLeaving(check: (() => boolean) | null) { holding = check; }
export function mayLeave(): boolean { return holding === null || !holding(); }
