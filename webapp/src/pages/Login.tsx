import { useState } from "preact/hooks";
import { login, type Session } from "../api";

export function Login({ onDone, note }: { onDone: (session: Session) => void; note?: string }) {
  const [name, setName] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState("");
  const submit = async (event: Event) => {
    event.preventDefault();
    try { onDone(await login(name, password)); } catch (e) { setError((e as Error).message); }
  };
  return (
    <form class="login card" onSubmit={submit}>
      <h1>forklift</h1>
      {note && <p class="message error" role="alert">{note}</p>}
      <label>Name <input value={name} onInput={(e) => setName(e.currentTarget.value)} autoFocus /></label>
      <label>Password <input type="password" value={password} onInput={(e) => setPassword(e.currentTarget.value)} /></label>
      {error && <p class="error" role="alert">{error}</p>}
      <button class="primary" type="submit">Log in</button>
    </form>
  );
}
