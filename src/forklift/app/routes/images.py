"""Images of a data set: upload, the grid's pages with filters, one image's file, thumbnail and annotations, and
changes to many at once."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Query, Request, UploadFile
from fastapi.responses import FileResponse
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from forklift.app import schemas
from forklift.app.deps import Db, Editor, Files, RowId, Viewer
from forklift.app.headers import user_file
from forklift.app.records import (
    add_image,
    check_class_label,
    check_labels_seen,
    check_shapes,
    get_or_404,
    images_out,
    in_classify_set,
    label_named,
    labels_named,
    names_given,
    take_version,
    video_of,
)
from forklift.app.tables import Annotation, DataSet, Image, Label
from forklift.errors import ForkliftError
from forklift.serve.responses import HttpError
from forklift.vocabulary import Task

router = APIRouter(tags=["images"])
PAGE_MAX = 500


@router.post("/api/datasets/{dataset_id}/images", status_code=201)
def upload_images(
    dataset_id: RowId, request: Request, files: Annotated[list[UploadFile], File()], session: Db, storage: Files,
    _: Editor,
) -> schemas.UploadResult:  # fmt: skip
    """Each file is checked and kept on its own: a bad one is refused by name, the rest are added. A request carries
    at most 1,000 files (forklift.app.limits.MAX_FILES) and max_batch_bytes in all: past either, a 413."""
    get_or_404(session, DataSet, dataset_id)
    limit = request.app.state.config.max_image_bytes
    added, refused = [], []
    for upload in files:
        try:
            added.append(add_image(session, storage, dataset_id, upload.file, upload.filename or "upload", limit=limit))
        except ForkliftError as exc:
            refused.append(str(exc))
            continue
        session.commit()  # each image is confirmed on its own: a crash later keeps it
    return schemas.UploadResult(added=images_out(session, added), refused=refused)


@router.get("/api/datasets/{dataset_id}/images")
def list_images(
    dataset_id: RowId,
    session: Db,
    _: Viewer,
    offset: Annotated[int, Query(ge=0, le=schemas.MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100,
    status: schemas.Status | None = None,
    label: str | None = None,
    split: schemas.Split | None = None,
    video_id: Annotated[int | None, Query(ge=1, le=schemas.MAX_ID)] = None,
    empty: bool | None = None,
) -> schemas.ImagePage:
    """One page of the grid, oldest first; filtered by status, label (an annotation's or the class), split, and
    `empty` (true: images with no box, polygon or class, such as a review's "nothing here"; false: the others)."""
    dataset = get_or_404(session, DataSet, dataset_id)
    query = select(Image).where(Image.dataset_id == dataset_id)
    if status is not None:
        query = query.where(Image.status == status)
    if split is not None:
        query = query.where(Image.split == split)
    if video_id is not None:  # as a label that is not the set's: said, not an empty page
        query = query.where(Image.video_id == video_of(session, dataset, video_id).id)
    if empty is not None:
        shaped = Image.id.in_(select(Annotation.image_id))
        query = (
            query.where(~shaped & Image.class_id.is_(None))
            if empty
            else query.where(shaped | Image.class_id.is_not(None))
        )
    if label is not None:
        label_id = label_named(session, dataset_id, label, create=False).id
        if dataset.task == Task.CLASSIFY:
            query = query.where(Image.class_id == label_id)
        else:
            query = query.where(Image.id.in_(select(Annotation.image_id).where(Annotation.label_id == label_id)))
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    page = list(session.scalars(query.order_by(Image.id).offset(offset).limit(limit)))
    return schemas.ImagePage(total=total, offset=offset, items=images_out(session, page))


@router.get("/api/images/{image_id}")
def get_image(image_id: RowId, session: Db, _: Viewer) -> schemas.ImageOut:
    return images_out(session, [get_or_404(session, Image, image_id)])[0]


@router.get("/api/images/{image_id}/neighbours")
def neighbours(image_id: RowId, session: Db, _: Viewer) -> schemas.Neighbours:
    """The images before and after this one in its data set (the grid's order), and for a video frame the frame
    captured just before it (whose boxes the editor can copy)."""
    image = get_or_404(session, Image, image_id)
    same = Image.dataset_id == image.dataset_id
    before = session.scalar(select(Image.id).where(same, Image.id < image_id).order_by(Image.id.desc()).limit(1))
    after = session.scalar(select(Image.id).where(same, Image.id > image_id).order_by(Image.id).limit(1))
    frame = None
    if image.video_id is not None and image.video_ms is not None:
        frame = session.scalar(select(Image.id).where(Image.video_id == image.video_id, Image.video_ms < image.video_ms)
                               .order_by(Image.video_ms.desc()).limit(1))  # fmt: skip
    return schemas.Neighbours(previous=before, next=after, previous_frame=frame)


@router.get("/api/images/{image_id}/file", response_class=FileResponse)
def image_file(image_id: RowId, session: Db, storage: Files, _: Viewer) -> FileResponse:
    image = get_or_404(session, Image, image_id)
    return user_file(storage.path(image.file), headers={"Cache-Control": "private, max-age=86400"})


@router.get("/api/images/{image_id}/thumbnail", response_class=FileResponse)
def image_thumbnail(image_id: RowId, session: Db, storage: Files, _: Viewer) -> FileResponse:
    image = get_or_404(session, Image, image_id)
    thumb = storage.thumbnail(image.file, image.id, image.dataset_id)
    return user_file(thumb, headers={"Cache-Control": "private, max-age=86400"})


@router.get("/api/images/{image_id}/annotations")
def get_annotations(image_id: RowId, session: Db, _: Viewer) -> schemas.AnnotationsOut:
    return annotations_out(session, get_or_404(session, Image, image_id))


@router.put("/api/images/{image_id}/annotations")
def put_annotations(image_id: RowId, body: schemas.AnnotationsIn, session: Db, _: Editor) -> schemas.AnnotationsOut:
    """Replace an image's annotations, if nobody changed them since `version` (else 409 with the current ones'
    version in the message: reload them). New label names are added to the data set. `status` is for what the
    shapes cannot say (a detection image with none is unlabelled unless it is "labelled": nothing here); a status
    that contradicts them is refused (an unlabelled image with boxes was left out of some exports, boxes and all)."""
    image = get_or_404(session, Image, image_id)
    classify = in_classify_set(session, image)
    _check_status(body, before=image.status, classify=classify)
    check_shapes(session, image, body.shapes)
    named = names_given(body.shapes, body.class_label)
    check_labels_seen(session, image.dataset_id, named, body.labels_seen)
    take_version(session, image_id, body.version)
    session.execute(delete(Annotation).where(Annotation.image_id == image_id))
    labels = labels_named(session, image.dataset_id, named)
    for shape in body.shapes:
        session.add(Annotation(image_id=image_id, label_id=labels[shape.label].id, kind=shape.kind,
                               points=shape.points))  # fmt: skip
    image.class_id = labels[body.class_label].id if body.class_label else None
    image.class_model_id = image.class_confidence = None  # a person's class now
    image.status = body.status or _status_after_edit(image.status, bool(body.shapes or body.class_label),
                                                     classify=classify)  # fmt: skip
    session.commit()
    session.refresh(image)
    return annotations_out(session, image)


def annotations_out(session: Session, image: Image) -> schemas.AnnotationsOut:
    rows = session.execute(
        select(Annotation, Label.name).join(Label, Label.id == Annotation.label_id)
        .where(Annotation.image_id == image.id).order_by(Annotation.id)
    ).all()  # fmt: skip
    class_label = session.get(Label, image.class_id).name if image.class_id else None  # type: ignore[union-attr]
    return schemas.AnnotationsOut(
        image_id=image.id,
        version=image.version,
        status=image.status,  # type: ignore[arg-type]
        shapes=[_shape_out(annotation, name) for annotation, name in rows],
        class_label=class_label,
        class_model_id=image.class_model_id,
        class_confidence=image.class_confidence,
    )


def _shape_out(annotation: Annotation, label: str) -> schemas.ShapeOut:
    return schemas.ShapeOut(kind=annotation.kind, label=label, points=annotation.points,  # type: ignore[arg-type]
                            source=annotation.source, model_id=annotation.model_id,  # type: ignore[arg-type]
                            confidence=annotation.confidence)  # fmt: skip


def _check_status(body: schemas.AnnotationsIn, *, before: str, classify: bool) -> None:
    """Refuse a save whose status or class its data set and shapes contradict (a 422 naming them)."""
    check_class_label(body.class_label, classify=classify)
    labelled = bool(body.shapes or body.class_label)
    if body.status == "auto":
        raise HttpError(422, "status auto: only an auto-label run gives it (a person's save is labelled or reviewed)")
    if body.status == "unlabelled" and labelled:
        what = "a class" if body.class_label else f"{len(body.shapes)} shape(s)"
        raise HttpError(422, f"status unlabelled: the save has {what}; send none to leave the image unlabelled")
    if body.status in ("labelled", "reviewed") and classify and not labelled:
        raise HttpError(422, f"status {body.status}: a classification image is labelled by its class; give class_label")
    if body.status == "reviewed" and before not in ("auto", "reviewed"):
        raise HttpError(422, f"status reviewed: the image is {before}; only auto labels are reviewed (send labelled)")


def _status_after_edit(before: str, labelled: bool, *, classify: bool) -> str:
    """A person's edit of auto labels is their review (what they saved, boxes or none, is the truth); elsewhere
    an image with labels is labelled and one without is unlabelled. A classification image has no "nothing
    here": without a class it is unlabelled, whatever it was."""
    if classify and not labelled:
        return "unlabelled"
    if before in ("auto", "reviewed"):
        return "reviewed"
    return "labelled" if labelled else "unlabelled"


@router.delete("/api/images/{image_id}", status_code=204)
def delete_image(image_id: RowId, session: Db, storage: Files, _: Editor) -> None:
    image = get_or_404(session, Image, image_id)
    file = storage.path(image.file)
    session.delete(image)
    session.commit()
    file.unlink(missing_ok=True)


@router.post("/api/datasets/{dataset_id}/images/bulk")
def bulk_change(dataset_id: RowId, body: schemas.BulkIn, session: Db, storage: Files, _: Editor) -> schemas.BulkOut:
    """Delete the selected images, move them to a split, or (classify sets) give them a class or take it away
    (unlabelled again); all of them or, when one is not (or no longer) in the data set, none."""
    dataset = get_or_404(session, DataSet, dataset_id)
    chosen = Image.dataset_id == dataset_id, Image.id.in_(body.image_ids)
    missing = sorted(set(body.image_ids) - set(session.scalars(select(Image.id).where(*chosen))))
    if missing:
        named = ", ".join(map(str, missing[:10])) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise HttpError(422, f"image_ids: {named} not in data set {dataset.name!r} (deleted meanwhile?); nothing "
                             "was changed: reload the page")  # fmt: skip
    if body.action == "delete":
        files = list(session.scalars(select(Image.file).where(*chosen)))
        session.execute(delete(Image).where(*chosen))
        session.commit()
        for file in files:
            storage.path(file).unlink(missing_ok=True)
        return schemas.BulkOut(changed=len(files))
    if body.action == "split":
        if body.split is None:
            raise HttpError(422, "action split: give split (train, val or test)")
        values: dict = {"split": body.split}
    elif dataset.task != Task.CLASSIFY:
        raise HttpError(422, f"action {body.action}: for classification data sets")
    elif body.action == "unclass":
        values = {"class_id": None, "class_model_id": None, "class_confidence": None, "status": "unlabelled",
                  "version": Image.version + 1}  # fmt: skip
    else:
        if not body.class_label:
            raise HttpError(422, "action class: give class_label")
        check_labels_seen(session, dataset_id, [body.class_label], body.labels_seen)
        label = label_named(session, dataset_id, body.class_label, create=True)
        values = {"class_id": label.id, "class_model_id": None, "class_confidence": None, "status": "labelled",
                  "version": Image.version + 1}  # fmt: skip
    changed = session.execute(update(Image).where(*chosen).values(**values)).rowcount  # type: ignore[attr-defined]
    session.commit()
    return schemas.BulkOut(changed=changed)
