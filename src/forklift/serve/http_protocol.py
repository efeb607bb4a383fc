"""HTTP/1.1 as forklift's servers (`forklift serve`, the app) speak it under uvicorn: h11, with the bounds a server
reachable beyond loopback needs.

- A request's head (its request line and headers) is at most MAX_HEAD_BYTES: past that, h11 stops reading it (its
  own limit; uvicorn's httptools parser has none), and a head that came whole in one read is measured before the app
  sees it; either is answered 400, in JSON as every error, and closed.
- The head must arrive within `head_timeout_s` of the connection opening (or of the previous answer): a client that
  opens connections and sends nothing, or drips its headers a byte at a time, is cut off instead of holding them.
- A body that is arriving may go at most `body_idle_s` without a byte (while the server is reading it).
- Between requests, uvicorn's keep-alive timeout closes an idle connection.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_S = 20.0
BODY_IDLE_S = 60.0


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines above (one timer per connection)."""

    head_timeout_s = HEAD_TIMEOUT_S
    body_idle_s = BODY_IDLE_S
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch(arrived=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def send_400_response(self, msg: str) -> None:
        """A head h11 cannot read (too long, malformed) answered as the apps answer errors, not in plain text."""
        headers, body = _error("the request's head is malformed, or longer than 64 KiB")  # uvicorn's msg says less
        for event in (h11.Response(status_code=400, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def _watch(self, *, arrived: bool = False) -> None:
        """Set the timer for what the connection waits for now: a head (a deadline from when it began to wait),
        a body's next bytes (restarted by each), or nothing (the app is answering, or WebSockets took over)."""
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            self._stop_timer()
        elif self.conn.their_state is h11.IDLE:
            if self._deadline is None:
                self._deadline = self.loop.call_later(self.head_timeout_s, self._too_slow)
        elif self.conn.their_state is h11.SEND_BODY:
            if arrived or self._deadline is None:
                self._stop_timer()
                self._deadline = self.loop.call_later(self.body_idle_s, self._too_slow)
        else:
            self._stop_timer()

    def _stop_timer(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.SEND_BODY and self.flow.read_paused:
            self._watch()  # the server, not the client, is behind: the body waits to be read
            return
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.transport.close()


def _error(message: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """A 400's headers and JSON body, as the apps answer errors, the connection closed after it."""
    body = json.dumps({"status": "error", "error": message}).encode()
    return [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")], body  # fmt: skip


def _head_bytes(scope: Scope) -> int:
    """The size of the head a request came with: its request line and header lines, as sent."""
    query = scope.get("query_string", b"")
    line = len(scope.get("method", "GET")) + len(scope["raw_path"] or b"") + (len(query) + 1 if query else 0) + 11
    return line + sum(len(name) + len(value) + 4 for name, value in scope["headers"]) + 2


def _bounded_heads(app: ASGIApp) -> ASGIApp:
    async def bounded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and _head_bytes(scope) > MAX_HEAD_BYTES:
            if scope["type"] == "websocket":  # closed before it is accepted: uvicorn answers 403
                await send({"type": "websocket.close", "code": 1009, "reason": ""})
                return
            headers, body = _error("the request's head is longer than 64 KiB")
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return bounded


def http_config(
    app: Any, *, host: str, port: int, head_timeout_s: float = HEAD_TIMEOUT_S, **options: Any
) -> uvicorn.Config:
    """uvicorn's configuration of a forklift server: GuardedH11Protocol with its limits; `options`: uvicorn's
    other settings."""
    protocol = type("ForkliftH11", (GuardedH11Protocol,), {"head_timeout_s": head_timeout_s})
    return uvicorn.Config(_bounded_heads(app), host=host, port=port, http=protocol,
                          h11_max_incomplete_event_size=MAX_HEAD_BYTES, **options)  # fmt: skip
