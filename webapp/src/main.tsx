// forklift app: a single-page front end over the JSON API. Routes live in the URL's hash, so a reload shows the
// same page: #/ (data sets), #/datasets/ID (the grid), #/datasets/ID/images/IMAGE (the labelling editor),
// #/datasets/ID/review (the auto labels' review queue), #/jobs, #/jobs/ID, #/models.
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { loadSession, logout, onSessionEnded, RENEWED, type Session } from "./api";
import { DataSets } from "./pages/DataSets";
import { DataSetPage } from "./pages/DataSetPage";
import { Editor } from "./pages/Editor";
import { JobPage, Jobs } from "./pages/Jobs";
import { Models } from "./pages/Models";
import { Review } from "./pages/Review";
import { Login } from "./pages/Login";
import { mayLeave } from "./widgets";
import "./styles.css";

// Each history entry the app shows carries its place in the history (history.state.at), so that a move the page
// holds (Back or Forward past a shape begun) is undone by going as far the other way, the history left as it was.
type Place = { hash: string; at: number };
const placeOf = (): number | null => {
  const at = (history.state as { at?: unknown } | null)?.at;
  return typeof at === "number" ? at : null;
};
const stamp = (at: number) => history.replaceState({ ...(history.state ?? {}), at }, "");

function useHash(): string {
  const [hash, setHash] = useState(location.hash || "#/");
  const shown = useRef<Place>({ hash, at: placeOf() ?? 0 });
  useEffect(() => {
    if (placeOf() === null) stamp(shown.current.at);
    const changed = () => {
      const next = location.hash || "#/";
      if (next === shown.current.hash) return;
      const at = placeOf();
      if (!mayLeave()) {  // the page holds (a shape begun): back to it
        if (at === null) history.back();  // a new entry (a typed address): the one before it is the page's
        else history.go(shown.current.at - at);
        return;
      }
      if (at === null) stamp(shown.current.at + 1);
      shown.current = { hash: next, at: at ?? shown.current.at + 1 };
      setHash(next);
    };
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return hash;
}

// Why a page lost its session, in a person's words, from the server's 401 (or the tab's own finding).
function why(said: string): string {
  if (/no longer exists/.test(said)) return "Your account was removed";
  if (/in another tab/.test(said)) return `Logged out here: ${said}`;
  return "Logged out here (a logout, in this tab or another)";
}

function App() {
  const hash = useHash();
  const [session, setSession] = useState<Session | null | undefined>(undefined);
  const [ended, setEnded] = useState<string | null>(null);  // why the session ended while a page was open
  const [renewals, setRenewals] = useState(0);  // logins over a page: the pages that could not load, load again
  useEffect(() => { loadSession().then(setSession, () => setSession(null)); }, []);
  useEffect(() => { onSessionEnded(setEnded); return () => onSessionEnded(null); }, []);
  if (session === undefined) return <div class="loading">Loading…</div>;
  if (session === null) return <Login onDone={(fresh) => { setEnded(null); setSession(fresh); }} />;
  const editor = hash.match(/^#\/datasets\/(\d+)\/images\/(\d+)/);
  const review = hash.match(/^#\/datasets\/(\d+)\/review/);
  const dataset = hash.match(/^#\/datasets\/(\d+)/);
  const job = hash.match(/^#\/jobs\/(\d+)/);
  const canEdit = session.role !== "viewer";
  return (
    <div class="shell">
      <header class="topbar" inert={ended !== null}>
        <a class="brand" href="#/">forklift</a>
        <nav><a href="#/">Data sets</a><a href="#/jobs">Training</a><a href="#/models">Models</a><a href="/docs" target="_blank">API</a></nav>
        <span class="who">{session.local ? "local" : <>{session.name} · {session.role} <button class="link" onClick={() => logout().finally(() => { setEnded(null); setSession(null); })}>Log out</button></>}</span>
      </header>
      <main inert={ended !== null}>{/* the editor keeps its own state over a login (it sends what waited); the
        other pages are made again, loading what they could not */}
        {job ? <JobPage jobId={+job[1]} canEdit={canEdit} key={`${job[1]}-${renewals}`} />
          : hash.startsWith("#/jobs") ? <Jobs canEdit={canEdit} key={renewals} />
          : hash.startsWith("#/models") ? <Models canEdit={canEdit} key={renewals} />
          : review ? <Review datasetId={+review[1]} canEdit={canEdit} key={`${review[1]}-${renewals}`} />
          : editor ? <Editor datasetId={+editor[1]} imageId={+editor[2]} canEdit={canEdit} key={editor[2]} />
          : dataset ? <DataSetPage datasetId={+dataset[1]} canEdit={canEdit} key={renewals} />
          : <DataSets canEdit={canEdit} key={renewals} />}
      </main>
      {ended !== null && <div class="overlay">{/* over the page, which stays as it is: what it has not saved waits */}
        <Login note={`${why(ended)}: log in again to go on. ${editor
          ? "What this page has not saved yet stays here and is sent then."
          : "This page loads again then: what it could not send (a decision, a form) was not done, so do it again."}`}
          onDone={(renewed) => { setEnded(null); setSession(renewed); setRenewals((n) => n + 1); dispatchEvent(new Event(RENEWED)); }} />
      </div>}
    </div>
  );
}

render(<App />, document.getElementById("app")!);
