"""Videos of a data set: upload (MP4, AVI, MOV, WebM...; anything FFmpeg decodes), play, and capture frames into
the data set, automatically every N seconds or by hand at the player's time. Each frame remembers its video and
time, and a time already captured is not captured again."""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, File, Request, UploadFile
from fastapi.responses import FileResponse
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from forklift.app import schemas
from forklift.app.columns import check_text
from forklift.app.deps import Db, Editor, Files, RowId, Viewer
from forklift.app.headers import user_file
from forklift.app.records import derived_name, get_or_404, images_out, video_out
from forklift.app.storage import Storage
from forklift.app.tables import DataSet, Image, Video
from forklift.app.video_frames import frames_at, video_facts
from forklift.errors import ForkliftError
from forklift.serve.responses import HttpError

router = APIRouter(tags=["videos"])
MAX_FRAMES = 5000  # per capture request


@router.post("/api/datasets/{dataset_id}/videos", status_code=201)
def upload_video(
    dataset_id: RowId, request: Request, file: Annotated[UploadFile, File()], session: Db, storage: Files, _: Editor
) -> schemas.VideoOut:
    get_or_404(session, DataSet, dataset_id)
    name = file.filename or "video"
    check_text(Video, original_name=name)  # before the file is kept (a TextRefused is the app's 422)
    try:
        path = storage.receive_file(dataset_id, file.file, name, limit=request.app.state.config.max_video_bytes,
                                    kind="videos")  # fmt: skip
    except ForkliftError as exc:
        raise HttpError(413, str(exc)) from exc
    try:
        facts = video_facts(path, name)
    except ForkliftError as exc:
        path.unlink(missing_ok=True)
        raise HttpError(422, str(exc)) from exc
    path = storage.keep(path, facts.suffix)
    video = Video(dataset_id=dataset_id, file=str(path.relative_to(storage.root)), original_name=name,
                  duration_s=facts.duration_s, fps=facts.fps, width=facts.width, height=facts.height)  # fmt: skip
    session.add(video)
    session.commit()
    return video_out(session, video)


@router.get("/api/datasets/{dataset_id}/videos")
def list_videos(dataset_id: RowId, session: Db, _: Viewer) -> list[schemas.VideoOut]:
    get_or_404(session, DataSet, dataset_id)
    videos = session.scalars(select(Video).where(Video.dataset_id == dataset_id).order_by(Video.id))
    return [video_out(session, video) for video in videos]


@router.get("/api/videos/{video_id}/file", response_class=FileResponse)
def video_file(video_id: RowId, session: Db, storage: Files, _: Viewer) -> FileResponse:
    return user_file(storage.path(get_or_404(session, Video, video_id).file))


@router.post("/api/videos/{video_id}/capture", status_code=201)
def capture(video_id: RowId, body: schemas.CaptureIn, session: Db, storage: Files, _: Editor) -> schemas.CaptureOut:
    """Frames into the data set: one every `every_s` seconds from `from_s` (the start) to `to_s` (with it: from 2.2
    to 2.8 every 0.3 is 2.2, 2.5 and 2.8; a `to_s` at or past the end is the end, whose frame is the last one;
    default: to before the end), or at the times `at_s` (up to its end: there, its last frame). A frame is known
    by its millisecond: times that round to one already captured (before, by this request or by another at the
    same moment) are skipped, and so are times that show the frame an earlier time of this request gave. A video
    FFmpeg cannot decode to the end is a 422 naming it; the frames captured before the damage are kept."""
    video = get_or_404(session, Video, video_id)
    if (body.every_s is None) == (body.at_s is None):
        raise HttpError(422, "give every_s (a frame every so many seconds) or at_s (a list of times), not both")
    if body.at_s is not None and (body.from_s or body.to_s is not None):
        raise HttpError(422, "from_s and to_s go with every_s; at_s gives its own times")
    if body.every_s is not None:
        to = min(body.to_s, video.duration_s) if body.to_s is not None else None  # None: to before the end
        if not (body.from_s <= to if to is not None else body.from_s < video.duration_s):
            until = f"after to_s {to:g}" if to is not None else "not before the video's end"
            raise HttpError(422, f"from_s {body.from_s:g}: {until} (the video lasts "
                                 f"{video.duration_s:.3f} s)")  # fmt: skip
        # how many steps fit: up to and with `to` (a step's sum a hair past it still counts), up to before the end
        steps = (to - body.from_s) / body.every_s + 1e-9 if to is not None else \
            (video.duration_s - body.from_s) / body.every_s - 1e-9  # fmt: skip
        if steps > MAX_FRAMES:  # (inf for a denormal every_s)
            raise HttpError(422, f"every_s {body.every_s}: over {MAX_FRAMES} frames; at most {MAX_FRAMES} per capture")
        count = math.floor(steps) + 1 if to is not None else max(1, math.ceil(steps))
        times = [min(body.from_s + k * body.every_s, to if to is not None else math.inf) for k in range(count)]
    else:
        times = list(body.at_s or [])
    bad = [t for t in times if not 0 <= t <= video.duration_s + 1e-3]
    if bad:
        raise HttpError(422, f"at_s {bad[0]}: outside the video (0 to {video.duration_s:.3f} s)")
    if len(times) > MAX_FRAMES:
        raise HttpError(422, f"{len(times)} frames asked for; at most {MAX_FRAMES} per capture")
    taken = set(session.scalars(select(Image.video_ms).where(Image.video_id == video_id)))
    fresh: dict[int, float] = {}  # millisecond -> the first time asked that rounds to it
    for moment in times:
        if round(moment * 1000) not in taken:
            fresh.setdefault(round(moment * 1000), moment)
    added: list[Image] = []
    try:
        for moment, jpeg in frames_at(storage.path(video.file), list(fresh.values()), name=video.original_name):
            image = _add_frame(session, storage, video, moment, jpeg)
            if image is not None:  # None: another request captured that millisecond first
                added.append(image)
    except ForkliftError as exc:
        raise HttpError(422, f"{exc}; the {len(added)} frames captured before it are kept") from exc
    return schemas.CaptureOut(added=images_out(session, added), skipped=len(times) - len(added))


def _add_frame(session: Session, storage: Storage, video: Video, moment: float, jpeg: bytes) -> Image | None:
    """The frame at `moment` as an image of the video's data set, committed; None when another request captured
    that millisecond first (the database's unique (video, millisecond) refused this one, whose file is removed)."""
    file = storage.save_bytes(video.dataset_id, jpeg, ".jpg")
    name = derived_name(video.original_name, f"@{moment:.3f}s.jpg")
    image = Image(dataset_id=video.dataset_id, file=file, original_name=name,
                  width=video.width, height=video.height, video_id=video.id,
                  video_ms=round(moment * 1000))  # fmt: skip
    session.add(image)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        storage.path(file).unlink(missing_ok=True)
        captured = select(Image.id).where(Image.video_id == video.id, Image.video_ms == round(moment * 1000))
        if session.scalar(captured) is None:  # another constraint than the capture's: not ours to hide
            raise
        return None
    return image
