"""`forklift stream`: a camera or a video file streamed to a served image-to-image model over `/stream/{model}`.

One thread sends frames at the source's pace (a camera's own, a file's frame rate), as a camera would, while the
main thread receives the answers; the server keeps only the newest waiting frame, so a model slower than the
source answers fewer frames, never older ones. The report gives what was sent and answered, frames/s and the
latency of each answered frame from the moment it was sent.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from forklift.errors import ForkliftError

DRAIN_S = 10.0  # how long to wait for the last answers after the source ends
CAMERA_FPS = 30.0  # a camera's rate where it says none
VIDEO_CODECS = {".mp4": "mp4v", ".avi": "MJPG", ".mkv": "MJPG"}  # what --out writes, by its suffix


@dataclass
class StreamReport:
    sent: int = 0
    skipped: int = 0  # camera frames not sent because every worker was busy (flow control)
    answered: int = 0
    dropped: int = 0
    stale: int = 0
    errors: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    answered_at: list[float] = field(default_factory=list)  # when each answer came (perf_counter seconds)
    seconds: float = 0.0

    @property
    def fps(self) -> float:
        """Answers a second, over the intervals between them: N answers of a 5 frames/s source span 4 intervals
        of 0.2 s (N over the span from the first frame sent read 6.0 for 5 frames)."""
        span = self.answered_at[-1] - self.answered_at[0] if self.answered_at else 0.0
        if len(self.answered_at) > 1 and span > 0:
            return (len(self.answered_at) - 1) / span
        return self.answered / self.seconds if self.seconds else 0.0

    def percentile(self, share: float) -> float:
        return float(np.percentile(self.latencies_ms, share * 100)) if self.latencies_ms else float("nan")

    def to_json(self) -> dict:
        return {
            "sent": self.sent,
            "skipped": self.skipped,
            "answered": self.answered,
            "dropped": self.dropped,
            "stale": self.stale,
            "frames_per_s": round(self.fps, 2),
            "latency_ms": {f"p{p}": round(self.percentile(p / 100), 1) for p in (50, 90, 99)},
            "errors": self.errors[:5],
        }


def stream_url(server: str, model: str) -> str:
    """ws:// (or wss://) URL of the model's stream on a server given as http(s)://host:port."""
    base = server.rstrip("/")
    if base.startswith("http://") or base.startswith("https://"):
        base = "ws" + base.removeprefix("http")
    elif not base.startswith(("ws://", "wss://")):
        raise ForkliftError(f"--url {server}: give the server as http://HOST:PORT")
    return f"{base}/stream/{model}"


@dataclass(frozen=True)
class VideoSource:
    """A source's BGR frames, and the rate they come at (what a video of the answers is written at)."""

    frames: Iterator[np.ndarray]
    fps: float


def video_frames(source: int | Path, *, fps: float | None = None, limit: int | None = None) -> VideoSource:
    """BGR frames of a camera (by index) or a video file, paced at `fps` (a file's own rate by default; a camera
    paces itself). The first frame is read here: a source that cannot be opened or gives no frame (not a video, an
    empty or broken file) is one line now, before a stream is opened, not an error in the thread that sends."""
    name = f"camera {source}" if isinstance(source, int) else str(source)
    capture = cv2.VideoCapture(source if isinstance(source, int) else str(source))
    if not capture.isOpened():
        raise ForkliftError(f"{name}: cannot open it as video")
    ok, first = capture.read()
    if not ok:
        capture.release()
        raise ForkliftError(f"{name}: no frame could be read from it (not a video, or an empty or broken one)")
    own = capture.get(cv2.CAP_PROP_FPS) or CAMERA_FPS
    pace = fps or (None if isinstance(source, int) else own)
    return VideoSource(_paced(capture, first, pace, limit), pace or own)


def _paced(capture: cv2.VideoCapture, first: np.ndarray, pace: float | None, limit: int | None) -> Iterator[np.ndarray]:
    start, count, frame = time.perf_counter(), 0, first
    try:
        while limit is None or count < limit:
            if count:
                ok, frame = capture.read()
                if not ok:
                    return
            if pace:
                time.sleep(max(0.0, start + count / pace - time.perf_counter()))
            count += 1
            yield frame
    finally:
        capture.release()


def run_stream(
    url: str,
    frames: Iterable[np.ndarray],
    *,
    quality: int = 80,
    settings: dict[str, float | bool] | None = None,
    on_answer: Callable[[np.ndarray], None] | None = None,
    flow: bool = True,
) -> StreamReport:
    """Send the frames (BGR) as JPEG, receive the answers until the last frame's has come (or DRAIN_S passed, or
    Ctrl-C). `settings`: the stream's control message (`strength`, `keep_colour`), sent first.

    With `flow` a frame is sent only while fewer frames are unanswered than the server has workers (it says how
    many when the stream opens); the others are skipped, so no frame waits at the server and none is encoded and
    sent only to be dropped there. Without it every frame goes, and the server keeps the newest."""
    try:
        connection = connect(url, max_size=2**25, open_timeout=10)
    except (OSError, TimeoutError, ConnectionClosed) as exc:
        raise ForkliftError(f"{url}: cannot open the stream: {exc}") from exc
    except Exception as exc:  # websockets' InvalidStatus / InvalidHandshake: the server refused the stream
        raise ForkliftError(f"{url}: the server refused the stream: {exc}") from exc

    with connection:  # closed however the stream ends
        return _stream(connection, url, frames, quality=quality, settings=settings, on_answer=on_answer, flow=flow)


def _stream(
    connection: ClientConnection,
    url: str,
    frames: Iterable[np.ndarray],
    *,
    quality: int,
    settings: dict[str, float | bool] | None,
    on_answer: Callable[[np.ndarray], None] | None,
    flow: bool,
) -> StreamReport:
    """The stream on an open connection: its greeting, then the sender thread and the answers."""
    report = StreamReport()
    sent_at: dict[int, float] = {}
    finished, stop = threading.Event(), threading.Event()
    try:
        workers = int(json.loads(connection.recv(timeout=10))["workers"])
    except ConnectionClosed as exc:
        reason = exc.rcvd.reason if exc.rcvd is not None else exc
        raise ForkliftError(f"{url}: the server closed the stream: {reason}") from exc
    except (TimeoutError, ValueError, KeyError, TypeError) as exc:
        raise ForkliftError(f"{url}: not a forklift stream (no greeting naming its workers)") from exc
    progress = {"last": -1}  # the newest frame answered or refused, as the receiver saw it

    def send() -> None:
        try:
            for frame in frames:
                if stop.is_set():
                    break
                if flow and report.sent - 1 - progress["last"] >= workers:
                    report.skipped += 1
                    continue
                ok, encoded = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, quality])
                if not ok:
                    continue
                sent_at[report.sent] = time.perf_counter()
                report.sent += 1
                connection.send(encoded.tobytes())
        except ConnectionClosed:
            pass
        finally:
            finished.set()

    if settings:
        connection.send(json.dumps(settings))  # the server's style adjustment for every frame after it
    start = time.perf_counter()
    sender = threading.Thread(target=send, name="stream-sender", daemon=True)
    sender.start()
    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends a camera's stream: the report still follows
            _receive(connection, url, report, sent_at, finished, on_answer, progress)
    finally:
        stop.set()
        sender.join(timeout=5)  # the source is released in the sender's thread, before the process may end
        report.seconds = time.perf_counter() - start
    return report


def _receive(
    connection: ClientConnection,
    url: str,
    report: StreamReport,
    sent_at: dict[int, float],
    finished: threading.Event,
    on_answer: Callable[[np.ndarray], None] | None,
    progress: dict[str, int],
) -> None:
    """Answers until the last frame sent has its own (it always gets one: nothing newer replaces it)."""
    last_frame, deadline = -1, None  # the newest frame answered (or refused)
    while True:
        if finished.is_set():
            deadline = deadline or time.perf_counter() + DRAIN_S
            if last_frame >= report.sent - 1 or time.perf_counter() > deadline:
                break
        try:
            message = connection.recv(timeout=0.2)
        except TimeoutError:
            continue
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code != 1000:
                reason = exc.rcvd.reason or exc.rcvd.code
                raise ForkliftError(f"{url}: the server closed the stream: {reason}") from exc
            break
        facts = json.loads(message)
        last_frame = max(last_frame, facts.get("frame", -1))
        progress["last"] = last_frame
        if "error" in facts:
            report.errors.append(f"frame {facts.get('frame')}: {facts['error']}")
            continue
        image = connection.recv(timeout=DRAIN_S)
        assert isinstance(image, bytes)
        report.answered_at.append(time.perf_counter())
        report.latencies_ms.append((report.answered_at[-1] - sent_at[facts["frame"]]) * 1000)
        for number in [n for n in sent_at if n <= facts["frame"]]:  # answered, dropped or stale by now
            del sent_at[number]
        report.answered, report.dropped, report.stale = facts["answered"], facts["dropped"], facts["stale"]
        decoded = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR) if on_answer else None
        if on_answer is not None and decoded is not None:
            on_answer(decoded)


@contextlib.contextmanager
def write_video(path: Path | None, *, fps: float) -> Iterator[Callable[[np.ndarray], None] | None]:
    """A function that appends answer frames to the video `path` at `fps` (opened at the first frame's size), or
    None. A suffix no video is written under, or a folder that is not there, is one line here, before a stream."""
    if path is None:
        yield None
        return
    codec = VIDEO_CODECS.get(path.suffix.lower())
    if codec is None:
        raise ForkliftError(f"--out {path}: not a video file's name (it may end in {', '.join(VIDEO_CODECS)})")
    if not path.parent.is_dir():
        raise ForkliftError(f"--out {path}: its folder {path.parent} does not exist")
    writer: cv2.VideoWriter | None = None

    def append(frame: np.ndarray) -> None:
        nonlocal writer
        if writer is None:
            fourcc = cv2.VideoWriter.fourcc(*codec)
            writer = cv2.VideoWriter(str(path), fourcc, fps, (frame.shape[1], frame.shape[0]))
            if not writer.isOpened():
                raise ForkliftError(f"--out {path}: cannot write a video there")
        writer.write(frame)

    try:
        yield append
    finally:
        if writer is not None:
            writer.release()
