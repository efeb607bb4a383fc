"""/api/datasets/{id}/augment: N augmented variants of each selected image, as new images derived from it."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select

from forklift.app import schemas
from forklift.app.deps import Db, Editor, Files, RowId
from forklift.app.records import derived_name, get_or_404, images_out
from forklift.app.tables import Annotation, DataSet, Image, Label
from forklift.serve.responses import HttpError

router = APIRouter(tags=["augmentation"])


@router.post("/api/datasets/{dataset_id}/augment", status_code=201)
def augment(dataset_id: RowId, body: schemas.AugmentIn, session: Db, storage: Files, _: Editor) -> schemas.UploadResult:
    """Each variant: a random non-empty subset of the operations asked for, boxes and polygons transformed with the
    image; it keeps its source's split, status and class, and names its source in `derived_from`."""
    from forklift.app.augment import Shape, augmented  # albumentations imports torch: only when asked for

    get_or_404(session, DataSet, dataset_id)
    sources = list(session.scalars(select(Image).where(Image.dataset_id == dataset_id, Image.id.in_(body.image_ids))))
    if len(sources) != len(set(body.image_ids)):
        raise HttpError(404, f"some of image_ids are not images of data set {dataset_id}")
    waiting = [source.original_name for source in sources if source.status == "auto"]
    if waiting:  # variants would multiply labels nobody has checked
        more = f" (and {len(waiting) - 1} more)" if len(waiting) > 1 else ""
        raise HttpError(422, f"{waiting[0]}{more} waits for review: accept or correct it first")
    names = dict(session.execute(select(Label.id, Label.name).where(Label.dataset_id == dataset_id)).all())
    label_ids = {name: label_id for label_id, name in names.items()}
    added = []
    for source in sources:
        shapes = [Shape(a.kind, names[a.label_id], a.points)
                  for a in session.scalars(select(Annotation).where(Annotation.image_id == source.id))]  # fmt: skip
        content = storage.path(source.file).read_bytes()
        for k in range(body.variants):
            jpeg, moved = augmented(
                content, shapes, list(body.operations), seed=body.seed * 1_000_003 + source.id * 101 + k
            )
            name = derived_name(source.original_name, f"~aug{k + 1}.jpg")
            image = Image(dataset_id=dataset_id, file=storage.save_bytes(dataset_id, jpeg, ".jpg"),
                          original_name=name, width=source.width, height=source.height,
                          split=source.split, status=source.status, class_id=source.class_id,
                          derived_from=source.id)  # fmt: skip
            session.add(image)
            session.flush()
            for shape in moved:
                session.add(Annotation(image_id=image.id, label_id=label_ids[shape.label], kind=shape.kind,
                                       points=shape.points))  # fmt: skip
            session.commit()
            added.append(image)
    return schemas.UploadResult(added=images_out(session, added), refused=[])
