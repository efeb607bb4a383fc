"""/api/datasets: list, create, rename, duplicate and delete data sets."""

from __future__ import annotations

import shutil

from fastapi import APIRouter
from sqlalchemy import select

from forklift.app import schemas
from forklift.app.deps import Db, Editor, Files, RowId, Viewer
from forklift.app.names import flush_unique, numbered, unused_name
from forklift.app.records import active_runs, dataset_out, get_or_404
from forklift.app.tables import Annotation, AutoLabelRun, DataSet, Image, Job, Label, Video
from forklift.serve.responses import HttpError

router = APIRouter(prefix="/api/datasets", tags=["data sets"])


@router.get("")
def list_datasets(session: Db, _: Viewer) -> list[schemas.DataSetOut]:
    return [dataset_out(session, d) for d in session.scalars(select(DataSet).order_by(DataSet.created_at.desc()))]


@router.post("", status_code=201)
def create_dataset(body: schemas.DataSetIn, session: Db, _: Editor) -> schemas.DataSetOut:
    dataset = DataSet(name=body.name, task=body.task)
    session.add(dataset)
    flush_unique(session, _taken(body.name))
    session.commit()
    return dataset_out(session, dataset)


@router.get("/{dataset_id}")
def get_dataset(dataset_id: RowId, session: Db, _: Viewer) -> schemas.DataSetOut:
    return dataset_out(session, get_or_404(session, DataSet, dataset_id))


@router.patch("/{dataset_id}")
def rename_dataset(dataset_id: RowId, body: schemas.DataSetRename, session: Db, _: Editor) -> schemas.DataSetOut:
    dataset = get_or_404(session, DataSet, dataset_id)
    dataset.name = body.name
    flush_unique(session, _taken(body.name))
    session.commit()
    return dataset_out(session, dataset)


@router.delete("/{dataset_id}", status_code=204)
def delete_dataset(dataset_id: RowId, session: Db, files: Files, _: Editor) -> None:
    """The set with its images, labels and records of its jobs and auto-label runs; refused while one of those
    runs (its process would go on working for records no longer there)."""
    dataset = get_or_404(session, DataSet, dataset_id)
    for kind, table, where in (("training job", Job, "Training"), ("auto-label run", AutoLabelRun, "data set's")):
        active = active_runs(session, dataset_id, table)
        if active:
            many = len(active) > 1
            raise HttpError(409, f"data set {dataset.name!r}: {kind}{'s' * many} {', '.join(map(str, active))} "
                                 f"{'are' if many else 'is'} queued or running on it; cancel "
                                 f"{'them' if many else 'it'} on the {where} page first")  # fmt: skip
    session.delete(dataset)
    session.commit()  # the records go first: files without records are only disk, records without files are broken
    files.remove_dataset(dataset_id)


@router.post("/{dataset_id}/duplicate", status_code=201)
def duplicate_dataset(dataset_id: RowId, session: Db, files: Files, _: Editor) -> schemas.DataSetOut:
    """A copy with its own files: its labels, videos and images (with their annotations and splits; a frame with
    its video and time, a variant with its source), and nothing else (jobs and models stay the original's)."""
    source = get_or_404(session, DataSet, dataset_id)
    copy = DataSet(name=unused_name(session, DataSet.name, source.name, numbered(word="copy")), task=source.task)
    session.add(copy)
    flush_unique(session, f"another copy of {source.name!r} was made at the same moment: duplicate it again")
    labels = {}
    for label in session.scalars(select(Label).where(Label.dataset_id == source.id).order_by(Label.id)):
        labels[label.id] = Label(dataset_id=copy.id, name=label.name)
        session.add(labels[label.id])
    session.flush()
    videos: dict[int, int] = {}  # the source's video id -> its copy's
    for video in session.scalars(select(Video).where(Video.dataset_id == source.id).order_by(Video.id)):
        copied = Video(dataset_id=copy.id, file=_copied(files, video.file, copy.id, "videos"),
                       original_name=video.original_name, duration_s=video.duration_s, fps=video.fps,
                       width=video.width, height=video.height)  # fmt: skip
        session.add(copied)
        session.flush()
        videos[video.id] = copied.id
    twins: dict[int, int] = {}  # the source's image id -> its copy's (a variant's source comes before it)
    for image in session.scalars(select(Image).where(Image.dataset_id == source.id).order_by(Image.id)):
        video_id = videos.get(image.video_id) if image.video_id is not None else None
        twin = Image(dataset_id=copy.id, file=_copied(files, image.file, copy.id, "images"),
                     original_name=image.original_name, width=image.width, height=image.height, split=image.split,
                     status=image.status, class_id=labels[image.class_id].id if image.class_id else None,
                     class_model_id=image.class_model_id, class_confidence=image.class_confidence,
                     video_id=video_id, video_ms=image.video_ms if video_id is not None else None,
                     derived_from=twins.get(image.derived_from) if image.derived_from else None)  # fmt: skip
        session.add(twin)
        session.flush()
        twins[image.id] = twin.id
        for shape in session.scalars(select(Annotation).where(Annotation.image_id == image.id)):
            session.add(Annotation(image_id=twin.id, label_id=labels[shape.label_id].id, kind=shape.kind,
                                   points=shape.points, source=shape.source, model_id=shape.model_id,
                                   confidence=shape.confidence))  # fmt: skip
    session.commit()
    return dataset_out(session, copy)


def _copied(files: Files, relative: str, dataset_id: int, kind: str) -> str:
    """A copy of one of the app's files (relative to its data directory) in data set `dataset_id`'s `kind` folder;
    the copy's path, relative too."""
    folder = files.dataset_folder(dataset_id) / kind
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / files.path(relative).name
    shutil.copyfile(files.path(relative), target)
    return str(target.relative_to(files.root))


def _taken(name: str) -> str:
    """Two data sets of one name could not be told apart in the list, in a job or a deployment."""
    return f"a data set named {name!r} exists already: give this one another name"
