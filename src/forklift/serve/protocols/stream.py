"""Live video: `/stream/{model}`, a WebSocket that answers JPEG frames with the model's answer frames.

The client sends each frame as one binary message as soon as it has it; the server answers the newest one
whenever a worker is free (latest frame wins). A frame that arrives while an older one still waits replaces it
(counted as dropped), so a client faster than the model gets the freshest answer instead of a growing queue,
and the stream never holds more than one waiting frame plus one per worker in flight. Up to that many frames run
at once, one per worker, which is what makes a stream faster than one request at a time; an answer overtaken by
a newer frame's answer is not sent (counted as stale). The stream opens with `{"model": NAME, "workers": K}`:
a client that keeps at most K frames unanswered (as `forklift stream` and `/live` do) has none waiting and
none dropped. Each answer is a text message with the frame's timing, then a binary message with the JPEG:

    {"frame": 17, "server_ms": 48.2, "inference_ms": 41.0, "received": 20, "answered": 15, "dropped": 3,
     "stale": 1}

`frame` counts the client's frames from 0. A text message `{"quality": 80, "strength": 0.7, "keep_colour":
true}` (any of them) sets the JPEG quality and the style adjustment of later answers. The page `/live` is a
browser client for it (webcam, style picker, strength, colour, frames/s and latency).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from forklift.errors import ForkliftError
from forklift.runtime.base import RequestOptions
from forklift.serve.pool import ModelPool
from forklift.serve.protocols.native import DEFAULT_QUALITY
from forklift.serve.responses import HttpError
from forklift.serve.state import ServeState
from forklift.serve.worker import Encoding, ImagesJob
from forklift.vision.images import declared_pixels
from forklift.vision.style_adjust import StyleAdjust
from forklift.vocabulary import Task

POLICY_VIOLATION = 1008  # WebSocket close codes (RFC 6455)
TRY_AGAIN_LATER = 1013


@dataclass
class Frame:
    number: int
    data: bytes
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class StreamCounts:
    received: int = 0
    answered: int = 0
    dropped: int = 0  # replaced by a newer frame before a worker took it
    stale: int = 0  # answered after a newer frame's answer had gone out
    last_sent: int = -1


class Stream:
    """One client's stream: the waiting frame (at most one), the answer loops and what they counted."""

    def __init__(self, websocket: WebSocket, state: ServeState, pool: ModelPool) -> None:
        self.websocket, self.state, self.pool = websocket, state, pool
        self.waiting: Frame | None = None
        self.wake = asyncio.Condition()
        self.closed = False
        self.counts = StreamCounts()
        self.quality = DEFAULT_QUALITY
        self.style = StyleAdjust()
        self.send_lock = asyncio.Lock()

    async def run(self) -> None:
        workers = max(1, len(self.pool.workers))
        await self.websocket.send_text(json.dumps({"model": self.pool.name, "workers": workers}))
        answerers = [asyncio.create_task(self._answer()) for _ in range(workers)]
        try:
            await self._receive()
        finally:
            async with self.wake:
                self.closed = True
                self.wake.notify_all()
            for task in answerers:
                task.cancel()
            await asyncio.gather(*answerers, return_exceptions=True)

    async def _receive(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                async with self.wake:
                    if self.waiting is not None:
                        self._count("dropped")
                    self.waiting = Frame(self.counts.received, message["bytes"])
                    self._count("received")
                    self.wake.notify()
            elif message.get("text") is not None:
                await self._control(message["text"])

    async def _control(self, text: str) -> None:
        """`{"quality": 80, "strength": 0.5, "keep_colour": true}`, any of them: for the answers that follow."""
        try:
            message = json.loads(text)
            quality = message.get("quality", self.quality)
            if not isinstance(quality, int) or not 1 <= quality <= 100:
                raise ValueError(f"quality {quality!r} is not a whole number from 1 to 100")
            strength = message.get("strength", self.style.strength)
            keep_colour = message.get("keep_colour", self.style.keep_colour)
            if not isinstance(strength, int | float) or not isinstance(keep_colour, bool):
                raise ValueError("strength is a number from 0 to 1 and keep_colour true or false")
            style = StyleAdjust(float(strength), keep_colour)
        except (ValueError, AttributeError, ForkliftError) as exc:
            await self._send_json({"error": f"control message {text[:80]!r}: {exc}"})
            return
        self.quality, self.style = quality, style

    async def _answer(self) -> None:
        while True:
            async with self.wake:
                await self.wake.wait_for(lambda: self.waiting is not None or self.closed)
                if self.closed:
                    return
                frame, self.waiting = self.waiting, None
            assert frame is not None
            request = RequestOptions(style=self.style)
            job = ImagesJob([(f"frame-{frame.number}", frame.data)], request, Encoding("jpeg", self.quality),
                            declared_pixels(frame.data))  # fmt: skip
            try:
                prediction = await self.state.run(self.pool, job)
            except HttpError as exc:  # a full queue or a crashed worker: say so, keep streaming
                await self._send_json({"frame": frame.number, "error": exc.message})
                continue
            (result,) = prediction.results
            if result.error is not None or result.encoded is None:
                await self._send_json({"frame": frame.number, "error": result.error or "no image"})
                continue
            async with self.send_lock:
                if frame.number < self.counts.last_sent:
                    self._count("stale")
                    continue
                self.counts.last_sent = frame.number
                self._count("answered")
                facts = {
                    "frame": frame.number,
                    "server_ms": round((time.perf_counter() - frame.arrived) * 1000, 1),
                    "inference_ms": round(prediction.timing.inference * 1000, 1),
                    **{k: v for k, v in vars(self.counts).items() if k != "last_sent"},
                }
                with contextlib.suppress(WebSocketDisconnect, RuntimeError):  # the client left meanwhile
                    await self.websocket.send_text(json.dumps(facts))
                    await self.websocket.send_bytes(result.encoded)

    def _count(self, outcome: str) -> None:
        """One more frame with this outcome: in the stream's own counts (sent with each answer) and in /metrics."""
        setattr(self.counts, outcome, getattr(self.counts, outcome) + 1)
        self.state.metrics.stream_frames.labels(self.pool.name, outcome).inc()

    async def _send_json(self, body: dict) -> None:
        async with self.send_lock:
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await self.websocket.send_text(json.dumps(body))


async def stream(websocket: WebSocket) -> None:
    state: ServeState = websocket.app.state.serve
    await websocket.accept()  # then a refusal can say why: a close reason reaches the client, a 403 does not
    try:
        pool = state.pool(websocket.path_params["model"])
    except HttpError as exc:
        await websocket.close(TRY_AGAIN_LATER if exc.status == 503 else POLICY_VIOLATION, exc.message[:120])
        return
    if pool.served.task != Task.STYLE:
        await websocket.close(POLICY_VIOLATION, f"model {pool.name!r} answers labels; streams are for image models")
        return
    await Stream(websocket, state, pool).run()


async def live_page(request: Request) -> Response:
    page = resources.files("forklift.serve").joinpath("static/live.html").read_text(encoding="utf-8")
    return HTMLResponse(page)


ROUTES = [
    WebSocketRoute("/stream/{model}", stream),
    Route("/live", live_page, methods=["GET"]),
]
