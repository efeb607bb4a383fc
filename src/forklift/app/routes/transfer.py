"""/api/datasets/{id}/export and /import: a data set out as a zip in forklift's or another tool's format, and a zip
of images or of a COCO, VOC, YOLO or PowerAI Vision export into a data set."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session
from starlette.background import BackgroundTask

from forklift.app import schemas
from forklift.app.columns import TextRefused, check_text
from forklift.app.deps import Db, Editor, Files, RowId, Viewer
from forklift.app.records import add_image, file_name, get_or_404, images_out, label_named
from forklift.app.storage import Storage, copy_limited, without_folder
from forklift.app.tables import Annotation, DataSet, Image, Label
from forklift.app.transfer import ExportOptions, as_forklift_dataset, export_zip, exported_statuses, iter_files
from forklift.data.interchange import import_dataset
from forklift.data.interchange.archives import safe_extract
from forklift.errors import ForkliftError
from forklift.serve.responses import HttpError
from forklift.vocabulary import Task

router = APIRouter(tags=["import and export"])
ImportFormat = Literal["images", "coco", "voc", "yolo", "powerai"]


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
    if check:
        return Response(status_code=204)
    name = file_name(dataset.name, "dataset")
    try:
        stream, size, scratch = export_zip(data, format, f"{name}-{format}")
    except ForkliftError as exc:
        raise HttpError(422, str(exc)) from exc
    headers = {"Content-Disposition": f'attachment; filename="{name}-{format}.zip"', "Content-Length": str(size)}
    return StreamingResponse(stream, media_type="application/zip", headers=headers,
                             background=BackgroundTask(shutil.rmtree, scratch, ignore_errors=True))  # fmt: skip


@router.post("/api/datasets/{dataset_id}/import", status_code=201)
def import_zip(
    dataset_id: RowId, request: Request, file: Annotated[UploadFile, File()], session: Db, storage: Files, _: Editor,
    format: Annotated[ImportFormat, Form()] = "images",
) -> schemas.UploadResult:  # fmt: skip
    """Add a zip's images (and, for a format, their labels and splits) to the data set; what cannot be imported is
    listed by name, the rest is added."""
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
        source = archive if format == "powerai" else extracted.folder  # the format's own file is found inside
        try:
            imported = import_dataset(format, source, scratch / "dataset", task=dataset.task)
        except ForkliftError as exc:  # the reader names the folder the zip was unpacked to, or the zip's path
            said = without_folder(without_folder(str(exc), archive, called="it"), extracted.folder, called="the zip")
            raise HttpError(422, f"{archive.name}: {said}") from exc
        return _add_dataset(session, storage, dataset, imported.out, [*extracted.refused, *imported.lines()[1:]],
                            config.max_image_bytes)  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
    session: Session, storage: Storage, dataset: DataSet, folder: Path, refused: list[str], limit: int
) -> schemas.UploadResult:
    from forklift.data.dataset import load_dataset

    data = load_dataset(folder)
    used = {box.label for record in data.images for box in record.boxes} | {r.label for r in data.images if r.label}
    for name in data.classes:  # first, in the file's order: their numbers in the editor stay those of the export
        if name in used:
            with contextlib.suppress(TextRefused):  # a name no label can keep: its images are refused below, saying why
                label_named(session, dataset.id, name, create=True)
    added: list[Image] = []
    for record in data.images:
        status = "labelled" if record.boxes or record.label else "unlabelled"
        original = record.original or Path(record.file).name  # the name the person gave it, kept across exports
        try:
            for name in {box.label for box in record.boxes} | ({record.label} if record.label else set()):
                check_text(Label, name=name)
            with data.path(record).open("rb") as source:
                image = add_image(session, storage, dataset.id, source, record.file, limit=limit,
                                  original_name=original, split=record.split, status=status)  # fmt: skip
        except ForkliftError as exc:
            refused.append(str(exc))
            continue
        if record.label:
            image.class_id = label_named(session, dataset.id, record.label, create=True).id
        for box in record.boxes:
            label = label_named(session, dataset.id, box.label, create=True)
            session.add(Annotation(image_id=image.id, label_id=label.id, kind="box",
                                   points=[box.x1, box.y1, box.x2, box.y2]))  # fmt: skip
        session.commit()
        added.append(image)
    return schemas.UploadResult(added=images_out(session, added), refused=refused)
