"""Videos decoded with PyAV (FFmpeg): what a video is (duration, frame rate, size), and its frames at chosen times
as JPEG. A file FFmpeg cannot read, or one without a video stream, is refused with one line naming it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
from av.error import FFmpegError

from forklift.app.storage import DECODE_BUDGET, DECODING, MAX_PIXELS
from forklift.errors import ForkliftError

JPEG_QUALITY = 92


@dataclass(frozen=True)
class VideoFacts:
    duration_s: float
    fps: float
    width: int
    height: int
    suffix: str  # the file suffix of its container as FFmpeg read it (the app stores it under that)


# FFmpeg's container (demuxer) names, the first of each comma-separated list, and the suffix a video is kept under
CONTAINER_SUFFIXES = {"mov": ".mp4", "matroska": ".webm", "avi": ".avi", "gif": ".gif", "mpeg": ".mpg",
                      "mpegts": ".ts", "ogg": ".ogv"}  # fmt: skip
OTHER_CONTAINER = ".video"  # served as application/octet-stream


def video_facts(path: Path, name: str) -> VideoFacts:
    """The video's duration, frame rate and size, or one line saying why it cannot be read."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise ForkliftError(f"{name}: has no video stream")
            stream = container.streams.video[0]
            duration = _duration(container, stream, name=name)
            with DECODING.held(_pixels(stream, name)):
                frame = next(container.decode(stream), None)  # proves that frames decode, not only the header
            if frame is None:
                raise ForkliftError(f"{name}: no frame decodes")
            _pixels(frame, name)  # as decoded: a header may say less
            suffix = CONTAINER_SUFFIXES.get(container.format.name.split(",")[0], OTHER_CONTAINER)
            return VideoFacts(duration, _fps(stream), frame.width, frame.height, suffix)
    except (FFmpegError, OSError, ValueError, StopIteration) as exc:
        raise ForkliftError(f"{name}: not a video FFmpeg can read ({_why(exc)})") from exc


def _why(exc: Exception) -> str:
    """FFmpeg's or the system's words without the file's path (the server's own folders are not the client's)."""
    return getattr(exc, "strerror", None) or str(exc)


def _duration(container: av.container.InputContainer, stream: av.video.stream.VideoStream, *, name: str) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / av.time_base
    raise ForkliftError(f"{name}: does not say how long it is")


def frames_at(path: Path, times: list[float], *, name: str) -> Iterator[tuple[float, bytes]]:
    """(time asked, JPEG of the frame shown at that time: the last one at or before it, as a player shows it paused
    there) for each time, in one pass through the video; a time before the first frame gives the first frame, one
    past the last frame the last. A frame is given once, for the first of the times that show it (times closer
    than the frames are apart would repeat it).

    A video that stops part-way (a file damaged or cut short after the first frames the upload's check decoded) is
    one line naming it (`name`) and where it stopped; the frames given before that stand. FFmpeg says so itself
    when it decodes frame by frame, but not always: its frame threads may drop the frames after a damaged packet,
    and a demuxer that loses its way in a damaged file may just end. So the frames must reach the last video packet,
    and the packets of all streams (a video may end before its sound) the video's duration, within two frames."""
    wanted = sorted(set(times))
    if not wanted:
        return
    moment = packets_end = video_end = 0.0  # the last frame decoded; the end of any stream's packets; the last
    # video packet
    try:
        with av.open(str(path)) as container, DECODING.held(_pixels(container.streams.video[0], name)):
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            last = given = None  # the frame before this one (on screen until this one's time); the last given
            for packet in container.demux():
                if packet.pts is not None and packet.time_base is not None:  # where each packet ends: a last
                    ends = packet.pts + (packet.duration or 0)  # frame may last long (variable frame rate)
                    packets_end = max(packets_end, float(ends * packet.time_base))
                    if packet.stream.index == stream.index:
                        video_end = max(video_end, float(packet.pts * packet.time_base))
                if packet.stream.index != stream.index:
                    continue
                for frame in stream.decode(packet):
                    moment = float(frame.time or 0.0)
                    while wanted and moment > wanted[0] + 1e-6:  # this frame comes after the time asked
                        shown = frame if last is None else last
                        asked = wanted.pop(0)
                        if shown is not given:
                            given = shown
                            yield asked, _jpeg(shown)
                    if not wanted:
                        return
                    last = frame
            duration, step = _duration(container, stream, name=name), 2 / _fps(stream)
            if last is None or moment + step < video_end or packets_end + step < duration:
                raise ForkliftError(f"{name}: its frames stop at {moment:.3f} s of {duration:.3f} s (the file is "
                                    f"damaged or cut short)")  # fmt: skip
            if wanted and last is not given:
                yield wanted[0], _jpeg(last)
    except (FFmpegError, OSError) as exc:
        raise ForkliftError(f"{name}: FFmpeg could not decode past {moment:.3f} s ({_why(exc)})") from exc


def _pixels(source: av.video.stream.VideoStream | av.VideoFrame, name: str) -> int:
    """A frame's pixels, from the stream's header or a frame decoded; more than an image upload may have is one line
    (a 190 KB GIF of 16000 x 16000 frames took 4 GB to capture from, past every image limit); 0 (a header that
    does not say) is taken as the whole decoding budget, to wait for every other decode."""
    context = source.codec_context if isinstance(source, av.video.stream.VideoStream) else source
    width, height = context.width or 0, context.height or 0
    if width * height > MAX_PIXELS:
        raise ForkliftError(f"{name}: its frames are {width}x{height} pixels, more than {MAX_PIXELS:,} (the most an "
                            f"image may have)")  # fmt: skip
    return width * height or DECODE_BUDGET


def _fps(stream: av.video.stream.VideoStream) -> float:
    return float(stream.average_rate or stream.guessed_rate or 0) or 25.0


def _jpeg(frame: av.VideoFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_image().save(buffer, "JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()
