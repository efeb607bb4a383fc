"""/api/datasets/{id}/export and /import: a data set out as a zip in forklift's or another tool's format, and a zip
of images or of a forklift, COCO, VOC, YOLO or PowerAI Vision export into a data set."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import Response, StreamingResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from forklift.app import schemas
from forklift.app.columns import TextRefused, check_text
from forklift.app.deps import Db, Editor, Files, RowId, Viewer
from forklift.app.headers import StreamThenRemove, attachment
from forklift.app.records import add_image, file_name, get_or_404, images_out, label_named
from forklift.app.storage import Storage, copy_limited, without_folder
from forklift.app.tables import Annotation, DataSet, Image, Label, Model
from forklift.app.transfer import (
    WHOLE_SET_FORMATS,
    ExportOptions,
    as_forklift_dataset,
    export_zip,
    exported_statuses,
    iter_files,
)
from forklift.data.dataset import INDEX, Box, Dataset, ImageRecord, load_dataset, load_dataset_leniently
from forklift.data.interchange import import_dataset
from forklift.data.interchange.archives import safe_extract
from forklift.data.interchange.common import image_size
from forklift.errors import ForkliftError
from forklift.serve.responses import HttpError
from forklift.vocabulary import Task

router = APIRouter(tags=["import and export"])
ImportFormat = Literal["images", "forklift", "coco", "voc", "yolo", "powerai"]


@router.get("/api/datasets/{dataset_id}/export", response_class=StreamingResponse)
def export(
    dataset_id: RowId, session: Db, storage: Files, _: Viewer,
    format: Literal["forklift", "coco", "voc", "yolo", "powerai"] = "coco",
    auto: bool = False, empty_labels: bool = False, check: bool = False,
) -> Response:  # fmt: skip
    """The images and their labels as a zip, streamed (its size is sent first, so browsers show progress). COCO
    and forklift's format hold every image, an unlabelled one with no annotations; VOC, YOLO and PowerAI Vision the
    labelled ones (see forklift.app.transfer.exported_statuses). The labels are a person's and the reviewed ones;
    `auto` adds a model's unreviewed ones, marked (COCO: the annotation's attributes; forklift's format: found_by
    with the model and its confidence). Classes are the labels in use, in the order they were made; `empty_labels`
    keeps the unused ones too. Polygons go to COCO as segmentations with their bbox and area, to the other formats
    as their bounding boxes. `check`: only whether the export can be made (204, or the 422 it would be), which
    the page asks before its browser downloads the zip (a download that fails is otherwise a file of JSON, or a
    page of it)."""
    dataset = get_or_404(session, DataSet, dataset_id)
    if dataset.task == Task.CLASSIFY and format != "forklift":
        raise HttpError(422, f"data set {dataset.name!r}: a classification data set exports in forklift's format "
                             f"only ({format} holds boxes)")  # fmt: skip
    options = ExportOptions(auto=auto, empty_labels=empty_labels)
    statuses = exported_statuses(format, options)
    data = as_forklift_dataset(session, dataset, storage.root, statuses=statuses, options=options)
    if not data.images:
        raise HttpError(422, f"data set {dataset.name!r}: no images to export in {format} format (it takes "
                            f"{', '.join(statuses)} ones)")  # fmt: skip
    if format not in WHOLE_SET_FORMATS and all(image.unlabelled for image in data.images):  # as the export finds
        raise HttpError(422, f"data set {dataset.name!r}: none of its {len(data.images)} image(s) has labels for a "
                             f"{format} export, whose empty label file says nothing is there (a model that found "
                             f"nothing is not a person's 'nothing here')")  # fmt: skip
    if check:
        return Response(status_code=204)
    name = file_name(dataset.name, "dataset")
    try:
        stream, size, scratch = export_zip(data, format, f"{name}-{format}")
    except ForkliftError as exc:
        raise HttpError(422, str(exc)) from exc
    headers = {"Content-Disposition": attachment(f"{name}-{format}.zip"), "Content-Length": str(size)}
    return StreamThenRemove(stream, scratch=scratch, media_type="application/zip", headers=headers)


@router.post("/api/datasets/{dataset_id}/import", status_code=201)
def import_zip(
    dataset_id: RowId, request: Request, file: Annotated[UploadFile, File()], session: Db, storage: Files, _: Editor,
    format: Annotated[ImportFormat, Form()] = "images",
) -> schemas.UploadResult:  # fmt: skip
    """Add a zip's images (and, for a format, their labels and splits) to the data set; what cannot be imported is
    listed by name, the rest is added. forklift's format (the app's own export) also brings back a model's
    unreviewed labels as unreviewed (status auto, with the model's confidence), and images no person labelled as
    unlabelled."""
    dataset = get_or_404(session, DataSet, dataset_id)
    config = request.app.state.config
    scratch = Path(tempfile.mkdtemp(prefix="forklift-import-", dir=storage.root))
    try:
        archive = scratch / "upload" / _upload_name(file.filename)  # its own name, which messages about it say
        archive.parent.mkdir()
        try:
            copy_limited(file.file, archive, file.filename or "upload.zip", limit=config.max_zip_bytes)
        except ForkliftError as exc:
            raise HttpError(413, str(exc)) from exc
        try:
            extracted = safe_extract(archive, scratch / "unpacked")
        except ForkliftError as exc:  # it names the zip
            raise HttpError(422, str(exc)) from exc
        if format == "images":
            return _add_images(session, storage, dataset, iter_files(extracted.folder), extracted.refused,
                               config.max_image_bytes, extracted.folder)  # fmt: skip
        try:
            data, refused, changed = _imported(format, archive, extracted.folder, scratch / "dataset", dataset)
        except ForkliftError as exc:  # the reader names the folder the zip was unpacked to, or the zip's path
            said = without_folder(without_folder(str(exc), archive, called="it"), extracted.folder, called="the zip")
            raise HttpError(422, f"{archive.name}: {said}") from exc
        result = _add_dataset(session, storage, dataset, data, [*extracted.refused, *refused],
                              config.max_image_bytes, own_format=format == "forklift")  # fmt: skip
        return result.model_copy(update={"changed": changed})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _imported(
    format: str, archive: Path, folder: Path, out: Path, dataset: DataSet
) -> tuple[Dataset, list[str], list[str]]:
    """The zip unpacked to `folder` read as a data set of `format` (another tool's converted into `out`), a line
    for each thing left out of it, and one for each kind of change to its labels (crowd regions skipped, masks
    kept as boxes: said in the page, where only a count of images was)."""
    if format != "forklift":
        if dataset.task == Task.CLASSIFY:
            raise ForkliftError(f"{folder}: a classification data set imports images or forklift's format ({format} "
                                f"holds boxes)")  # fmt: skip
        source = archive if format == "powerai" else folder  # the format's own file is found inside
        imported = import_dataset(format, source, out, task=dataset.task)
        return load_dataset(imported.out), imported.lines()[1:], imported.changes()
    indexes = sorted(folder.rglob(INDEX))
    if len(indexes) != 1:
        found = f"no {INDEX}" if not indexes else f"{len(indexes)} files named {INDEX}"
        raise ForkliftError(f"{folder}: {found} (forklift's format is one folder of {INDEX} and images/)")
    data, findings = load_dataset_leniently(indexes[0].parent)
    if data.task != dataset.task:
        raise ForkliftError(f"{folder}: a {data.task} data set; {dataset.name!r} is a {dataset.task} one")
    # an image one of whose boxes is refused is left out whole: kept with the others only, it would be labelled
    # (or "nothing here") without the object that box marks, and trained on so
    incomplete = {finding.image for finding in findings if finding.image is not None}
    data.images = [record for position, record in enumerate(data.images) if position not in incomplete]
    refused = [
        f"{finding.file or finding.problem}: {finding.detail}"
        + ("; the image is left out" if finding.image is not None else "")
        for finding in findings
    ]
    return data, refused, []


def _upload_name(filename: str | None) -> str:
    name = Path(filename or "").name
    return name if name.strip(".") else "upload.zip"


def _add_images(
    session: Session,
    storage: Storage,
    dataset: DataSet,
    paths: Iterable[Path],
    refused: list[str],
    limit: int,
    folder: Path,
) -> schemas.UploadResult:
    added: list[Image] = []
    for path in paths:
        try:
            with path.open("rb") as source:
                added.append(add_image(session, storage, dataset.id, source, str(path.relative_to(folder)),
                                       limit=limit))  # fmt: skip
        except ForkliftError as exc:
            refused.append(str(exc))
            continue
        session.commit()
    return schemas.UploadResult(added=images_out(session, added), refused=refused)


def _add_dataset(
    session: Session, storage: Storage, dataset: DataSet, data: Dataset, refused: list[str], limit: int, *,
    own_format: bool,
) -> schemas.UploadResult:  # fmt: skip
    """The data set's images and labels added; its classes made first, in the file's order (their numbers in the
    editor stay those of the export), the ones in use. `own_format`: forklift's layout (the app's own export) is
    taken as written: every class it lists (another tool's may list dozens never used), each image's size
    checked against its file (its labels are for the size it says), and an image with no boxes that is not marked
    unlabelled kept as "nothing here"."""
    used = {box.label for record in data.images for box in record.boxes} | {r.label for r in data.images if r.label}
    for name in data.classes:
        if own_format or name in used:
            with contextlib.suppress(TextRefused):  # a name no label can keep: its images are refused below, saying why
                label_named(session, dataset.id, name, create=True)
    models = _models_by_name(session)
    added: list[Image] = []
    for record in data.images:
        original = record.original or Path(record.file).name  # the name the person gave it, kept across exports
        try:
            for name in {box.label for box in record.boxes} | ({record.label} if record.label else set()):
                check_text(Label, name=name)
            path = data.path(record)
            if own_format:
                _check_size(path, record)
            with path.open("rb") as source:
                image = add_image(session, storage, dataset.id, source, record.file, limit=limit,
                                  original_name=original, split=record.split,
                                  status=_status(record, own_format=own_format))  # fmt: skip
        except ForkliftError as exc:
            refused.append(str(exc))
            continue
        if record.label:
            image.class_id = label_named(session, dataset.id, record.label, create=True).id
            if record.label_found_by is not None:
                image.class_model_id = models.get(record.label_found_by.model)
                image.class_confidence = record.label_found_by.confidence
        for box in record.boxes:
            label = label_named(session, dataset.id, box.label, create=True)
            found_by = box.found_by
            kind, points = _shape(box)
            session.add(Annotation(image_id=image.id, label_id=label.id, kind=kind, points=points,
                                   source="auto" if found_by else "human",
                                   model_id=models.get(found_by.model) if found_by else None,
                                   confidence=found_by.confidence if found_by else None))  # fmt: skip
        session.commit()
        added.append(image)
    return schemas.UploadResult(added=images_out(session, added), refused=refused)


def _shape(box: Box) -> tuple[str, list[Any]]:
    """(kind, points) of the annotation a box becomes: the polygon it outlines (forklift's and COCO's exports
    keep the app's polygons), else the box."""
    if box.polygon is not None:
        return "polygon", [[x, y] for x, y in box.polygon]
    return "box", [box.x1, box.y1, box.x2, box.y2]


def _status(record: ImageRecord, *, own_format: bool) -> str:
    """auto while a model's labels on it are unreviewed (an export made with them marks them); unlabelled when its
    export says no person labelled it, or (another tool's format, which cannot tell "nothing here" from "not yet")
    when it has no labels; else labelled."""
    if record.label_found_by is not None or any(box.found_by for box in record.boxes):
        return "auto"
    if record.unlabelled or not (own_format or record.boxes or record.label):
        return "unlabelled"
    return "labelled"


def _check_size(path: Path, record: ImageRecord) -> None:
    """The image file is the size its dataset.json says, which its labels are for."""
    size = image_size(path, record.file)
    if size != (record.width, record.height):
        raise ForkliftError(f"{record.file}: its labels are for a {record.width}x{record.height} image; the file is "
                            f"{size[0]}x{size[1]}")  # fmt: skip


def _models_by_name(session: Session) -> dict[str, int]:
    """This app's models by name, for the model an export says labelled something: a name two models share, or
    one not here (another app's model, or one deleted), links to none."""
    models = session.execute(select(Model.id, Model.name)).all()
    names = Counter(name for _, name in models)
    return {name: model_id for model_id, name in models if names[name] == 1}
