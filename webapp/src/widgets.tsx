// Small pieces every page uses: a message line (errors in red, kept until the next one).
import { useState } from "preact/hooks";

export interface Said { text: string; error: boolean }

export function useMessage(): [Said | null, (text: string, error?: boolean) => void] {
  const [message, setMessage] = useState<Said | null>(null);
  return [message, (text, error = false) => setMessage({ text, error })];
}

export function Message({ message }: { message: Said | null }) {
  if (!message) return null;
  return <p class={message.error ? "message error" : "message"} role={message.error ? "alert" : "status"}>{message.text}</p>;
}
