"""HTTP/1.1 as forklift's servers (`forklift serve`, the app) speak it under uvicorn: h11, with the bounds a server
reachable beyond loopback needs.

- A request's head (its request line and headers) is at most MAX_HEAD_BYTES: past that, h11 stops reading it and
  uvicorn answers 400 and closes (h11's own limit; uvicorn's httptools parser has none).
- The head must arrive within `head_timeout_s` of the connection opening (or of the previous answer): a client that
  opens connections and sends nothing, or drips its headers a byte at a time, is cut off instead of holding them.
- A body that is arriving may go at most `body_idle_s` without a byte (while the server is reading it).
- Between requests, uvicorn's keep-alive timeout closes an idle connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
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


def http_config(
    app: Any, *, host: str, port: int, head_timeout_s: float = HEAD_TIMEOUT_S, **options: Any
) -> uvicorn.Config:
    """uvicorn's configuration of a forklift server: GuardedH11Protocol with its limits; `options`: uvicorn's
    other settings."""
    protocol = type("ForkliftH11", (GuardedH11Protocol,), {"head_timeout_s": head_timeout_s})
    return uvicorn.Config(app, host=host, port=port, http=protocol, h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                          **options)  # fmt: skip
