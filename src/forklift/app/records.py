"""Rows of the app's tables as the API shows them, the lookups every router needs (a row or a 404 naming it), and
adding an image to a data set (its file checked and stored, its row made)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO, TypeVar

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from forklift.app import schemas
from forklift.app.columns import check_text, fitted
from forklift.app.registry import model_task
from forklift.app.storage import Storage
from forklift.app.tables import (
    ACTIVE,
    TRAINED_ON,
    Annotation,
    AutoLabelRun,
    Base,
    DataSet,
    Image,
    Job,
    Label,
    LabelMerge,
    Model,
    Video,
)
from forklift.errors import ForkliftError
from forklift.serve.responses import HttpError
from forklift.vocabulary import Task

Row = TypeVar("Row", bound=Base)


RECORD_WORDS = {"datasets": "data set", "autolabel_runs": "auto-label run", "api_tokens": "API token"}


def get_or_404(session: Session, kind: type[Row], row_id: int) -> Row:
    """The record, or a 404 naming it as the pages do ("no data set 9", not the table's "datasets")."""
    row = session.get(kind, row_id)
    if row is None:
        table = kind.__tablename__
        raise HttpError(404, f"no {RECORD_WORDS.get(table, table.rstrip('s'))} {row_id}")
    return row


def file_name(text: str, fallback: str) -> str:
    """A record's name as a download's file name: letters, digits, - and _ kept, each run of anything else one -
    ("Shapes #1": Shapes-1)."""
    return re.sub(r"[^\w-]+", "-", text).strip("-") or fallback


def add_image(
    session: Session, storage: Storage, dataset_id: int, source: BinaryIO, name: str, *, limit: int, **fields: Any
) -> Image:
    """The upload `name` checked and stored in the data set, and its row (with `fields`: split, status...) added
    and flushed; the caller commits. A refused file is a ForkliftError naming it."""
    fields.setdefault("original_name", name)
    check_text(Image, **fields)  # before the file is kept
    stored = storage.save_image(dataset_id, source, name, limit=limit)
    image = Image(dataset_id=dataset_id, file=stored.file, width=stored.width, height=stored.height, **fields)
    session.add(image)
    session.flush()
    return image


def derived_name(original: str, ending: str) -> str:
    """The name of an image made from the file named `original` (a video's frame, an augmented variant): its stem
    and `ending`, the stem cut short where both would not fit the column."""
    return fitted(Image.original_name, original.rsplit(".", 1)[0], ending)


def image_out(image: Image, class_label: str | None, shapes: int = 0) -> schemas.ImageOut:
    return schemas.ImageOut(
        id=image.id,
        dataset_id=image.dataset_id,
        original_name=image.original_name,
        width=image.width,
        height=image.height,
        split=image.split,  # type: ignore[arg-type]
        status=image.status,  # type: ignore[arg-type]
        class_label=class_label,
        version=image.version,
        file=f"/api/images/{image.id}/file",
        thumbnail=f"/api/images/{image.id}/thumbnail",
        video_id=image.video_id,
        video_time_s=None if image.video_ms is None else image.video_ms / 1000,
        derived_from=image.derived_from,
        shapes=shapes,
    )


def images_out(session: Session, images: list[Image]) -> list[schemas.ImageOut]:
    names = label_names(session, {image.dataset_id for image in images})
    counted = select(Annotation.image_id, func.count()).where(Annotation.image_id.in_([i.id for i in images]))
    shapes = dict(session.execute(counted.group_by(Annotation.image_id)).all())
    return [
        image_out(image, names.get(image.class_id) if image.class_id else None, shapes.get(image.id, 0))
        for image in images
    ]


def video_of(session: Session, dataset: DataSet, video_id: int) -> Video:
    """The data set's video of that id: a 404 when there is none, a 422 when it is another set's."""
    video = get_or_404(session, Video, video_id)
    if video.dataset_id != dataset.id:
        raise HttpError(422, f"video {video_id}: not a video of data set {dataset.name!r}")
    return video


def in_classify_set(session: Session, image: Image) -> bool:
    """Whether the image's data set is a classification set, where a class alone labels an image."""
    return session.scalar(select(DataSet.task).where(DataSet.id == image.dataset_id)) == Task.CLASSIFY


def label_names(session: Session, dataset_ids: set[int]) -> dict[int, str]:
    if not dataset_ids:
        return {}
    return dict(session.execute(select(Label.id, Label.name).where(Label.dataset_id.in_(dataset_ids))).all())


def label_counts(session: Session, dataset: DataSet) -> list[schemas.LabelCount]:
    """Each label of the data set with how often it is used (annotations, or images for a classify set): on images
    a person labelled or reviewed, and apart from those, in a model's labels waiting for review."""
    unreviewed = Image.status == "auto"
    if dataset.task == Task.CLASSIFY:
        used = select(Image.class_id, unreviewed, func.count()).where(Image.dataset_id == dataset.id)
        used = used.group_by(Image.class_id, unreviewed)
    else:
        used = (
            select(Annotation.label_id, unreviewed, func.count())
            .join(Image, Image.id == Annotation.image_id)
            .where(Image.dataset_id == dataset.id)
            .group_by(Annotation.label_id, unreviewed)
        )
    counts: dict[tuple[int | None, bool], int] = {
        (label, bool(auto)): n for label, auto, n in session.execute(used).all()
    }
    in_creation_order = select(Label).where(Label.dataset_id == dataset.id).order_by(Label.id)  # so numbers stay
    labels = session.scalars(in_creation_order).all()
    return [schemas.LabelCount(id=label.id, name=label.name, count=counts.get((label.id, False), 0),
                               unreviewed=counts.get((label.id, True), 0)) for label in labels]  # fmt: skip


def active_runs(session: Session, dataset_id: int, table: type[Job] | type[AutoLabelRun]) -> Sequence[int]:
    """The ids of the set's training jobs or auto-label runs queued or running: while one is, the set stays (its
    process would go on working for records no longer there)."""
    return session.scalars(select(table.id).where(table.dataset_id == dataset_id, table.state.in_(ACTIVE))).all()


def dataset_out(session: Session, dataset: DataSet) -> schemas.DataSetOut:
    images = select(func.count()).select_from(Image).where(Image.dataset_id == dataset.id)
    first = session.scalar(select(Image.id).where(Image.dataset_id == dataset.id).order_by(Image.id).limit(1))
    return schemas.DataSetOut(
        id=dataset.id,
        name=dataset.name,
        task=dataset.task,  # type: ignore[arg-type]
        created_at=dataset.created_at,
        images=session.scalar(images) or 0,
        labelled=session.scalar(images.where(Image.status.in_(TRAINED_ON))) or 0,  # what a job would train on
        to_review=session.scalar(images.where(Image.status == "auto")) or 0,
        jobs=session.scalar(select(func.count()).select_from(Job).where(Job.dataset_id == dataset.id)) or 0,
        running=sum(len(active_runs(session, dataset.id, table)) for table in (Job, AutoLabelRun)),
        merges=[
            schemas.LabelMergeOut(label_id=merge.label_id, into_id=merge.into_id)
            for merge in session.scalars(select(LabelMerge).where(LabelMerge.dataset_id == dataset.id))
        ],
        labels=label_counts(session, dataset),
        thumbnail=None if first is None else f"/api/images/{first}/thumbnail",
    )


def video_out(session: Session, video: Video) -> schemas.VideoOut:
    frames = session.scalar(select(func.count()).select_from(Image).where(Image.video_id == video.id)) or 0
    return schemas.VideoOut(
        id=video.id,
        dataset_id=video.dataset_id,
        original_name=video.original_name,
        duration_s=video.duration_s,
        fps=video.fps,
        width=video.width,
        height=video.height,
        file=f"/api/videos/{video.id}/file",
        frames=frames,
    )


def existing_label(session: Session, dataset_id: int, name: str) -> Label | None:
    return session.scalar(select(Label).where(Label.dataset_id == dataset_id, Label.name == name))


def label_named(session: Session, dataset_id: int, name: str, *, create: bool) -> Label:
    """The data set's label of that name; made when `create`, else a 422 naming it. Two requests may make the same
    new label at once (two people saving boxes of a new class): the one that comes second takes the first one's,
    where a plain insert would break the unique (data set, name) and fail the request."""
    check_text(Label, name=name)  # before PostgreSQL is asked about a NUL; the INSERT below has no flush to check
    label = existing_label(session, dataset_id, name)
    if label is not None:
        return label
    if not create:
        raise HttpError(422, f"label {name!r}: not a label of this data set")
    # INSERT ... ON CONFLICT DO NOTHING (the two databases the app runs on): waits for the other request, then is
    # a no-op
    postgres = session.get_bind().dialect.name == "postgresql"
    insert = postgresql.insert(Label) if postgres else sqlite.insert(Label)
    session.execute(insert.values(dataset_id=dataset_id, name=name)
                    .on_conflict_do_nothing(index_elements=["dataset_id", "name"]))  # fmt: skip
    made = existing_label(session, dataset_id, name)
    if made is None:
        raise HttpError(409, f"label {name!r}: removed while it was being added; try again")
    return made


def labels_named(session: Session, dataset_id: int, names: Iterable[str]) -> dict[str, Label]:
    """The data set's labels of these names, made where new, in the order of their names: two requests making
    the same new labels at once then wait for each other in the same order, where opposite orders deadlock."""
    return {name: label_named(session, dataset_id, name, create=True) for name in sorted(set(names))}


def names_given(shapes: Iterable[schemas.Shape], class_label: str | None) -> list[str]:
    """The label names a save gives: its shapes', then its class."""
    return [shape.label for shape in shapes] + ([class_label] if class_label else [])


def check_labels_seen(session: Session, dataset_id: int, names: Iterable[str], seen: dict[str, int]) -> None:
    """A 409 naming the first label a save names as the page saw it (by its id) that was renamed, merged or deleted
    since: saved, the old name would make the label again, undoing the other's change unsaid."""
    ids = {name: seen[name] for name in dict.fromkeys(names) if name in seen}
    if not ids:
        return
    rows = session.execute(select(Label.id, Label.name).where(Label.dataset_id == dataset_id,
                                                              Label.id.in_(list(ids.values())))).all()  # fmt: skip
    now = {label_id: label_name for label_id, label_name in rows}
    for name, label_id in ids.items():
        if now.get(label_id) != name:
            if label_id in now:
                what = f"renamed {now[label_id]!r}"
            else:
                into = session.scalar(select(Label.name).join(LabelMerge, LabelMerge.into_id == Label.id)
                                      .where(LabelMerge.label_id == label_id))  # fmt: skip
                what = "deleted" if into is None else f"merged into {into!r}"
            raise HttpError(409, f"label {name!r} was {what} since this page loaded it: load the labels again")


def next_version(session: Session, image_id: int, version: int, *unchanged: ColumnElement[bool], **values: Any) -> bool:
    """Move the image to its next version (setting `values`) if it is still at `version` and `unchanged` holds:
    the check every change of an image's labels goes through, so that nobody overwrites another's change
    unseen. False when someone changed it first."""
    changed = session.execute(update(Image).where(Image.id == image_id, Image.version == version, *unchanged)
                              .values(version=Image.version + 1, **values))  # fmt: skip
    return bool(changed.rowcount == 1)  # type: ignore[attr-defined]


def take_version(session: Session, image_id: int, version: int, **values: Any) -> None:
    """`next_version` for a person's request: a change based on an older version is a 409 naming the current."""
    if not next_version(session, image_id, version, **values):
        session.rollback()
        current = session.scalar(select(Image.version).where(Image.id == image_id))
        raise HttpError(409, f"image {image_id} changed since version {version} (now {current}): reload it")


def model_for(session: Session, storage: Storage, model_id: int, dataset: DataSet) -> Model:
    """A registered model that answers the data set's task (to auto-label it, or to start a job from), or a 404
    or 422 naming what is wrong."""
    model = get_or_404(session, Model, model_id)
    try:
        task = model_task(storage.path(model.dir))
    except ForkliftError as exc:
        raise HttpError(422, f"model {model.name!r} cannot be loaded: {exc}") from exc
    if task != dataset.task:
        raise HttpError(422, f"model {model.name!r} answers {task}; data set {dataset.name!r} is a {dataset.task} set")
    return model


def check_class_label(class_label: str | None, *, classify: bool) -> None:
    """A class labels an image of a classification set only (a 422 for one sent to a detection set)."""
    if class_label is not None and not classify:
        raise HttpError(422, "class_label: for classification data sets; this is a detection set (give shapes)")


def check_shapes(session: Session, image: Image, shapes: Sequence[schemas.Shape]) -> None:
    """Shapes a save (or a review's undo) may store on `image`: each inside it (a 422 naming the first that is not),
    and at most MAX_NEW_LABELS labels new to its data set."""
    for shape in shapes:
        _check_shape(shape, image)
    names = {shape.label for shape in shapes}
    if len(names) > schemas.MAX_NEW_LABELS:
        known = set(
            session.scalars(select(Label.name).where(Label.dataset_id == image.dataset_id, Label.name.in_(names)))
        )
        if len(names - known) > schemas.MAX_NEW_LABELS:
            raise HttpError(422, f"shapes: {len(names - known)} labels new to the data set in one save; at most "
                                 f"{schemas.MAX_NEW_LABELS} (add labels on the data set's page)")  # fmt: skip


def _check_shape(shape: schemas.Shape, image: Image) -> None:
    """A box is [x1, y1, x2, y2] with x1 < x2, y1 < y2 inside the image; a polygon 3 or more [x, y] inside it."""
    where = f"image {image.id} ({image.width}x{image.height}), {shape.kind} {shape.label!r}"
    if shape.kind == "box":
        if len(shape.points) != 4 or not all(isinstance(v, float | int) for v in shape.points):
            raise HttpError(422, f"{where}: a box is [x1, y1, x2, y2]")
        x1, y1, x2, y2 = shape.points
        inside = 0 <= x1 < x2 <= image.width and 0 <= y1 < y2 <= image.height  # type: ignore[operator]
        if not inside:
            raise HttpError(422, f"{where}: {shape.points} is empty or outside the image")
        return
    points = shape.points
    if len(points) < 3 or not all(isinstance(p, list) and len(p) == 2 for p in points):
        raise HttpError(422, f"{where}: a polygon is three or more [x, y] points")
    if len(points) > schemas.MAX_POINTS:  # a row of megabytes, read back on every load of the image
        raise HttpError(422, f"{where}: {len(points)} points; a polygon has at most {schemas.MAX_POINTS}")
    if not all(0 <= p[0] <= image.width and 0 <= p[1] <= image.height for p in points):  # type: ignore[index]
        raise HttpError(422, f"{where}: a point lies outside the image")
