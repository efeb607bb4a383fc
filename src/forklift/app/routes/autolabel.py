"""The auto-label loop's API: start a run of a model over a data set's unlabelled images (or a video's frames),
follow and cancel it, the review queue (lowest confidence first), accept or reject an image's auto labels."""

from __future__ import annotations

from typing import Annotated, get_args

from fastapi import APIRouter, Query, Request
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from forklift.app import schemas
from forklift.app.deps import Db, Editor, RowId, Viewer
from forklift.app.records import (
    check_class_label,
    check_labels_seen,
    check_shapes,
    get_or_404,
    images_out,
    in_classify_set,
    label_named,
    model_for,
    names_given,
    take_version,
    video_of,
)
from forklift.app.routes.images import PAGE_MAX, annotations_out
from forklift.app.tables import ACTIVE, Annotation, AutoLabelRun, DataSet, Image, JobState, Model
from forklift.serve.responses import HttpError

LABELLED_TASKS = get_args(schemas.LabelledTask)
router = APIRouter(tags=["auto-label"])


def run_out(run: AutoLabelRun) -> schemas.AutoLabelRunOut:
    return schemas.AutoLabelRunOut.model_validate(run, from_attributes=True)


@router.post("/api/datasets/{dataset_id}/autolabel", status_code=201)
def start_run(
    dataset_id: RowId, body: schemas.AutoLabelIn, request: Request, session: Db, who: Editor
) -> schemas.AutoLabelRunOut:
    """Queue a run: the model labels every image still unlabelled when the run reaches it."""
    dataset = get_or_404(session, DataSet, dataset_id)
    if dataset.task not in LABELLED_TASKS:
        raise HttpError(422, f"data set {dataset.name!r}: auto-labelling labels {' and '.join(LABELLED_TASKS)} sets")
    model = model_for(session, request.app.state.storage, body.model_id, dataset)  # one that answers its task
    todo = select(func.count()).select_from(Image).where(Image.dataset_id == dataset_id, Image.status == "unlabelled")
    if body.video_id is not None:
        video_of(session, dataset, body.video_id)
        todo = todo.where(Image.video_id == body.video_id)
    if not session.scalar(todo):
        raise HttpError(422, f"data set {dataset.name!r}: no unlabelled images to label")
    run = AutoLabelRun(dataset_id=dataset_id, model_id=model.id, video_id=body.video_id,
                       threshold=body.threshold, created_by=who.name)  # fmt: skip
    session.add(run)
    session.commit()
    request.app.state.autolabel.notify()
    return run_out(run)


@router.get("/api/datasets/{dataset_id}/autolabel")
def list_runs(dataset_id: RowId, session: Db, _: Viewer) -> list[schemas.AutoLabelRunOut]:
    get_or_404(session, DataSet, dataset_id)
    query = select(AutoLabelRun).where(AutoLabelRun.dataset_id == dataset_id).order_by(AutoLabelRun.id.desc())
    return [run_out(run) for run in session.scalars(query)]


@router.get("/api/autolabel/{run_id}")
def get_run(run_id: RowId, session: Db, _: Viewer) -> schemas.AutoLabelRunOut:
    return run_out(get_or_404(session, AutoLabelRun, run_id))


@router.post("/api/autolabel/{run_id}/cancel")
def cancel_run(run_id: RowId, session: Db, _: Editor) -> schemas.AutoLabelRunOut:
    """Stop after the images in flight; what it labelled stays in the review queue."""
    run = get_or_404(session, AutoLabelRun, run_id)
    if run.state not in ACTIVE:
        raise HttpError(409, f"auto-label run {run_id} is {run.state}: nothing to cancel")
    run.state = JobState.CANCELLED
    session.commit()
    return run_out(run)


@router.post("/api/autolabel/{run_id}/resume")
def resume_run(run_id: RowId, request: Request, session: Db, _: Editor) -> schemas.AutoLabelRunOut:
    """Queue a stopped run again: it labels the images still unlabelled."""
    run = get_or_404(session, AutoLabelRun, run_id)
    if run.state in (JobState.QUEUED, JobState.RUNNING, JobState.DONE):
        raise HttpError(409, f"auto-label run {run_id} is {run.state}: nothing to resume")
    run.state, run.error, run.finished_at = JobState.QUEUED, None, None
    session.commit()
    request.app.state.autolabel.notify()
    return run_out(run)


@router.get("/api/datasets/{dataset_id}/review")
def review_queue(
    dataset_id: RowId,
    session: Db,
    _: Viewer,
    offset: Annotated[int, Query(ge=0, le=schemas.MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 50,
    first: Annotated[schemas.ReviewFirst, Query()] = "found",
) -> schemas.ReviewPage:
    """The data set's auto-labelled images waiting for review, by their lowest-scoring box (or class), the least
    sure first; the images where the model found nothing after them, or before them with `first=nothing`."""
    get_or_404(session, DataSet, dataset_id)
    lowest = func.coalesce(func.min(Annotation.confidence), Image.class_confidence)
    query = (
        select(Image, lowest, func.count(Annotation.id))
        .outerjoin(Annotation, Annotation.image_id == Image.id)
        .where(Image.dataset_id == dataset_id, Image.status == "auto")
        .group_by(Image.id)
    )
    total = session.scalar(select(func.count()).where(Image.dataset_id == dataset_id, Image.status == "auto")) or 0
    nothing_last = lowest.is_(None) if first == "found" else lowest.is_not(None)
    rows = session.execute(query.order_by(nothing_last, lowest, Image.id).offset(offset).limit(limit)).all()
    shown = images_out(session, [image for image, _, _ in rows])
    items = [schemas.ReviewItem(image=out, lowest_confidence=low, boxes=count)
             for out, (_, low, count) in zip(shown, rows, strict=True)]  # fmt: skip
    return schemas.ReviewPage(total=total, offset=offset, items=items)


@router.post("/api/images/{image_id}/review")
def review(image_id: RowId, body: schemas.ReviewIn, session: Db, _: Editor) -> schemas.AnnotationsOut:
    """Accept an image's auto labels as they are (they train as a person's would) or reject them (the image is
    unlabelled again); reopen undoes either (the page sends back what it was shown). To correct them, edit the
    image in the editor: a saved edit counts as reviewed."""
    image = get_or_404(session, Image, image_id)
    if body.action == "reopen":
        return _reopened(session, image, body)
    if image.status != "auto":  # decided meanwhile: by another reviewer, or in another tab
        done = {"reviewed": "accepted or corrected", "unlabelled": "rejected"}.get(image.status, image.status)
        raise HttpError(409, f"{image.original_name}: {done} already (by someone else, or in another tab); it no "
                             f"longer waits for review")  # fmt: skip
    if body.action == "accept" and image.class_id is None and in_classify_set(session, image):
        raise HttpError(409, f"image {image_id}: the model gave it no class; pick one (correct) or reject it")
    status = "reviewed" if body.action == "accept" else "unlabelled"
    take_version(session, image_id, body.version, status=status)
    if body.action == "reject":  # an auto image's labels are all the model's: boxes, or a classification's class
        session.execute(delete(Annotation).where(Annotation.image_id == image_id, Annotation.source == "auto"))
        image.class_id = image.class_model_id = image.class_confidence = None
    session.commit()
    session.refresh(image)
    return annotations_out(session, image)


def _reopened(session: Session, image: Image, body: schemas.ReviewIn) -> schemas.AnnotationsOut:
    """An accepted image (its labels still all the model's) or a rejected one (no labels, its auto labels sent
    back) waits for review again."""
    labels = session.scalars(select(Annotation).where(Annotation.image_id == image.id)).all()
    accepted = image.status == "reviewed" and all(a.source == "auto" for a in labels)
    rejected = image.status == "unlabelled" and not labels and image.class_id is None
    if image.status == "auto":
        raise HttpError(409, f"image {image.id} is waiting for review: nothing to undo")
    if not (accepted or rejected):
        raise HttpError(409, f"image {image.id} is {image.status} and was changed since its review: nothing to undo")
    if rejected:  # what the review saw, sent back: checked as any save of shapes is
        classify = in_classify_set(session, image)
        if body.shapes and classify:
            raise HttpError(422, "shapes: for detection data sets; this is a classification set (give class_label)")
        check_class_label(body.class_label, classify=classify)
        check_shapes(session, image, body.shapes or [])
        names = names_given(body.shapes or [], body.class_label)
        check_labels_seen(session, image.dataset_id, names, body.labels_seen)  # renamed or deleted: not made again
    take_version(session, image.id, body.version, status="auto")
    if rejected:
        # a model deleted since the review (or an id of none) links to no model: its label stays the model's
        named = {shape.model_id for shape in body.shapes or []} | {body.class_model_id}
        models = set(session.scalars(select(Model.id).where(Model.id.in_(named - {None}))))
        for shape in body.shapes or []:
            label = label_named(session, image.dataset_id, shape.label, create=True)
            model_id = shape.model_id if shape.model_id in models else None
            session.add(Annotation(image_id=image.id, label_id=label.id, kind=shape.kind, points=shape.points,
                                   source="auto", model_id=model_id, confidence=shape.confidence))  # fmt: skip
        if body.class_label is not None:
            image.class_id = label_named(session, image.dataset_id, body.class_label, create=True).id
            image.class_model_id = body.class_model_id if body.class_model_id in models else None
            image.class_confidence = body.class_confidence
    session.commit()
    session.refresh(image)
    return annotations_out(session, image)
