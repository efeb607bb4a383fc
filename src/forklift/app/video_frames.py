"""Videos decoded with PyAV (FFmpeg): what a video is (duration, frame rate, size), and its frames at chosen times
as JPEG. A file FFmpeg cannot read, or one without a video stream, is refused with one line naming it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
from av.error import FFmpegError

from forklift.errors import ForkliftError

JPEG_QUALITY = 92


@dataclass(frozen=True)
class VideoFacts:
    duration_s: float
    fps: float
    width: int
    height: int


def video_facts(path: Path, name: str) -> VideoFacts:
    """The video's duration, frame rate and size, or one line saying why it cannot be read."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise ForkliftError(f"{name}: has no video stream")
            stream = container.streams.video[0]
            duration = _duration(container, stream)
            frame = next(container.decode(stream), None)  # proves that frames decode, not only the header
            if frame is None:
                raise ForkliftError(f"{name}: no frame decodes")
            fps = float(stream.average_rate or stream.guessed_rate or 0) or 25.0
            return VideoFacts(duration, fps, frame.width, frame.height)
    except (FFmpegError, OSError, ValueError, StopIteration) as exc:
        raise ForkliftError(f"{name}: not a video FFmpeg can read ({exc})") from exc


def _duration(container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / av.time_base
    raise ForkliftError(f"{container.name}: does not say how long it is")


def frames_at(path: Path, times: list[float]) -> Iterator[tuple[float, bytes]]:
    """(time asked, JPEG of the first frame at or after it) for each time, in one pass through the video; times past
    the last frame give the last frame."""
    wanted = sorted(set(times))
    if not wanted:
        return
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        last = None
        for frame in container.decode(stream):
            moment = float(frame.time or 0.0)
            last = frame
            while wanted and moment + 1e-6 >= wanted[0]:
                yield wanted.pop(0), _jpeg(frame)
            if not wanted:
                return
        if last is not None:
            for moment in wanted:
                yield moment, _jpeg(last)


def _jpeg(frame: av.VideoFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_image().save(buffer, "JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()
