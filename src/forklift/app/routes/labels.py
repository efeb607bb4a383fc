"""A data set's labels: add, rename, merge into another, delete (with the annotations that use it)."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import or_, select, update

from forklift.app import schemas
from forklift.app.deps import Db, Editor, RowId, Viewer
from forklift.app.records import existing_label, get_or_404, label_counts, label_named
from forklift.app.tables import Annotation, DataSet, Image, Label, LabelMerge
from forklift.serve.responses import HttpError

router = APIRouter(tags=["labels"])


@router.get("/api/datasets/{dataset_id}/labels")
def list_labels(dataset_id: RowId, session: Db, _: Viewer) -> list[schemas.LabelCount]:
    return label_counts(session, get_or_404(session, DataSet, dataset_id))


@router.post("/api/datasets/{dataset_id}/labels", status_code=201)
def add_label(dataset_id: RowId, body: schemas.LabelIn, session: Db, _: Editor) -> list[schemas.LabelCount]:
    dataset = get_or_404(session, DataSet, dataset_id)
    label_named(session, dataset_id, body.name, create=True)
    session.commit()
    return label_counts(session, dataset)


@router.patch("/api/labels/{label_id}")
def change_label(label_id: RowId, body: schemas.LabelChange, session: Db, _: Editor) -> list[schemas.LabelCount]:
    """Rename a label, or merge it into another label of the same data set (its uses move there)."""
    label = get_or_404(session, Label, label_id)
    dataset = get_or_404(session, DataSet, label.dataset_id)
    if (body.merge_into is None) == (body.name is None):  # both: a merge would drop the rename unsaid
        raise HttpError(422, f"give name (rename) or merge_into (merge){', not both' if body.name else ''}")
    if body.merge_into is not None:
        target = get_or_404(session, Label, body.merge_into)
        if target.dataset_id != label.dataset_id or target.id == label.id:
            raise HttpError(422, f"merge_into {body.merge_into}: another label of the same data set")
        _changed_where_used(session, label)
        session.execute(update(Annotation).where(Annotation.label_id == label.id).values(label_id=target.id))
        session.execute(update(Image).where(Image.class_id == label.id).values(class_id=target.id))
        session.execute(update(LabelMerge).where(LabelMerge.into_id == label.id).values(into_id=target.id))
        session.add(LabelMerge(dataset_id=label.dataset_id, label_id=label.id, into_id=target.id))
        session.delete(label)
    elif body.name is not None:
        if body.name != label.name:
            if existing_label(session, label.dataset_id, body.name) is not None:
                raise HttpError(409, f"label {body.name!r} exists already; merge into it instead")
            _changed_where_used(session, label)
        label.name = body.name
    session.commit()
    return label_counts(session, dataset)


@router.delete("/api/labels/{label_id}")
def delete_label(label_id: RowId, session: Db, _: Editor) -> list[schemas.LabelCount]:
    """Delete a label and every box or polygon with it; images it classified become unlabelled."""
    label = get_or_404(session, Label, label_id)
    dataset = get_or_404(session, DataSet, label.dataset_id)
    used = _changed_where_used(session, label)
    session.execute(
        update(Image)
        .where(Image.class_id == label.id)
        .values(class_id=None, class_model_id=None, class_confidence=None, status="unlabelled")
    )
    session.delete(label)
    session.flush()
    shapes_left = select(Annotation.id).where(Annotation.image_id == Image.id).exists()
    session.execute(  # an image whose every shape went with the label has nothing labelled left
        update(Image)
        .where(Image.id.in_(used), Image.class_id.is_(None), ~shapes_left)
        .values(status="unlabelled")
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return label_counts(session, dataset)


def _changed_where_used(session: Db, label: Label) -> list[int]:
    """A new version of every image that uses ``label`` (its shapes, or its class): an editor open on one of them
    holds the label as it was, and its next save is refused (409, the page reloads the image) rather than writing
    back the shapes a delete removed or the name a rename or merge replaced (which would make the label again).
    The images' ids."""
    shapes = select(Annotation.image_id).where(Annotation.label_id == label.id)
    used = list(session.scalars(select(Image.id).where(or_(Image.id.in_(shapes), Image.class_id == label.id))))
    session.execute(
        update(Image)
        .where(Image.id.in_(used))
        .values(version=Image.version + 1)
        .execution_options(synchronize_session=False)
    )
    return used
