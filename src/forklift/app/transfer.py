"""Data sets in and out of the app: export in forklift's and other tools' formats (the existing writers of
`forklift.data.interchange`), streamed as a zip that is never whole in memory; import of a zip of images or of a
COCO, VOC, YOLO or PowerAI Vision export, through the existing readers, after a safe extraction.

Zips are unpacked by `forklift.data.interchange.archives.safe_extract`: an unsafe entry is refused in one line
naming it, and the other entries are still imported.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session
from zipstream import ZIP_STORED, ZipStream

from forklift.app.tables import TRAINED_ON, Annotation, DataSet, Image, Label, Model
from forklift.data.dataset import Box, Dataset, FoundBy, ImageRecord, save_dataset
from forklift.data.interchange import FORMATS
from forklift.data.interchange.common import place_image
from forklift.errors import ForkliftError
from forklift.vocabulary import DataFormat, Task

EXPORTS = ("forklift", "coco", "voc", "yolo", "powerai")


ALL_IMAGES = ("unlabelled", "labelled", "auto", "reviewed")
WHOLE_SET_FORMATS = ("forklift", "coco")  # the formats an export gives every image in: see exported_statuses


@dataclass(frozen=True)
class ExportOptions:
    """What an export holds beyond a person's labels: a model's unreviewed labels (marked as such), and labels
    that no shape or image uses (as classes)."""

    auto: bool = False
    empty_labels: bool = False


def exported_statuses(format_name: str, options: ExportOptions) -> tuple[str, ...]:
    """The images an export in `format_name` holds. COCO keeps its images and annotations in separate lists, and
    forklift's layout an image's boxes in the image's entry, so both carry an image with no labels as it is: their
    exports are the whole data set (its unlabelled images with no annotations, as COCO allows; detectron2 and
    MMDetection leave such images out of training by default; an image a model labelled and no person reviewed
    goes without those labels unless asked for). VOC, YOLO and PowerAI Vision write a label file per image, where
    an empty one tells every trainer "nothing here": those get the images a person labelled or reviewed (and the
    auto-labelled ones when asked for). A classification set exports in forklift's layout only, where an image
    without a class is marked unlabelled."""
    if format_name in WHOLE_SET_FORMATS:
        return ALL_IMAGES
    return (*TRAINED_ON, "auto") if options.auto else TRAINED_ON


DELETED_MODEL = "(a deleted model)"


def as_forklift_dataset(
    session: Session,
    dataset: DataSet,
    root: Path,
    *,
    statuses: tuple[str, ...] = TRAINED_ON,
    options: ExportOptions | None = None,
) -> Dataset:
    """The app's data set as forklift's `Dataset` over the app's own files (`root`: the data directory), with the
    images of `statuses` (training takes labelled and reviewed ones: an unlabelled one would teach that nothing is
    in it). An image a model labelled and no person reviewed keeps those labels only with `options.auto`, each
    marked with the model and its confidence (`FoundBy`). Its classes are the labels in use, in the order they
    were made (their numbers in the editor), and with `options.empty_labels` the unused ones too. A polygon goes
    as its bounding box carrying its points (forklift's detect sets hold boxes; COCO's writer gives the points as
    the object's segmentation)."""
    options = options or ExportOptions()
    labels = dict(session.execute(select(Label.id, Label.name).where(Label.dataset_id == dataset.id)).all())
    models = dict(session.execute(select(Model.id, Model.name)).all())
    images = session.scalars(select(Image).where(Image.dataset_id == dataset.id, Image.status.in_(statuses))
                             .order_by(Image.id)).all()  # fmt: skip
    shapes: dict[int, list[Annotation]] = {}
    query = select(Annotation).join(Image, Image.id == Annotation.image_id).where(Image.dataset_id == dataset.id)
    for annotation in session.scalars(query.order_by(Annotation.id)):
        shapes.setdefault(annotation.image_id, []).append(annotation)
    records: list[ImageRecord] = []
    used: set[int] = set()
    for image in images:
        unreviewed = image.status == "auto"
        kept = [a for a in shapes.get(image.id, []) if options.auto or not unreviewed]
        boxes = [_box(a, labels[a.label_id], models if unreviewed else None) for a in kept]
        class_id = image.class_id if (options.auto or not unreviewed) else None
        label = labels.get(class_id) if class_id else None
        unlabelled = image.status not in TRAINED_ON and not kept and label is None  # no person's nor asked-for labels
        if dataset.task == Task.CLASSIFY and label is None and not unlabelled:
            continue
        record = ImageRecord(image.file, image.width, image.height, image.split, boxes, label,
                             original=image.original_name, unlabelled=unlabelled)  # fmt: skip
        if label is not None and unreviewed:  # only a model gives an image the status "auto"
            record.label_found_by = FoundBy(_model_name(models, image.class_model_id), image.class_confidence)
        records.append(record)
        used.update(a.label_id for a in kept)
        used.update([class_id] if class_id else [])
    classes = [name for number, name in sorted(labels.items()) if options.empty_labels or number in used]
    return Dataset(Task(dataset.task), classes, records, root, name=dataset.name)


def _box(annotation: Annotation, label: str, models: dict[int, str] | None) -> Box:
    """The annotation as a box; with `models` (its image unreviewed), a model's label is marked as that model's."""
    found_by = None
    if models is not None and annotation.source == "auto":
        found_by = FoundBy(_model_name(models, annotation.model_id), annotation.confidence)
    if annotation.kind == "box":
        x1, y1, x2, y2 = annotation.points
        return Box(label, float(x1), float(y1), float(x2), float(y2), found_by=found_by)
    points = tuple((float(x), float(y)) for x, y in annotation.points)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    return Box(label, min(xs), min(ys), max(xs), max(ys), polygon=points, found_by=found_by)


def export_zip(data: Dataset, format_name: str, name: str) -> tuple[Iterable[bytes], int, Path]:
    """(the zip's bytes as a stream, its size, the scratch folder to remove once it is sent): the data set written in
    `format_name` into a scratch folder on disk and zipped as it is sent, images stored as they are (so the size is
    known up front). PowerAI Vision's format is itself a zip: that zip is sent."""
    if format_name not in EXPORTS:
        raise ForkliftError(f"format {format_name}: one of {', '.join(EXPORTS)}")
    scratch = Path(tempfile.mkdtemp(prefix="forklift-export-"))
    try:
        out = scratch / name
        if format_name == "powerai":
            FORMATS[DataFormat.POWERAI].write(data, out.with_suffix(".zip"))
            return _chunks(out.with_suffix(".zip")), out.with_suffix(".zip").stat().st_size, scratch
        if format_name == "forklift":
            _write_forklift(data, out)
        else:
            FORMATS[DataFormat(format_name)].write(data, out)
        stream = ZipStream(compress_type=ZIP_STORED, sized=True)
        for path in sorted(scratch.rglob("*")):
            if path.is_file():
                stream.add_path(str(path), str(path.relative_to(scratch)))
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return iter(stream), len(stream), scratch


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            yield chunk


def _write_forklift(data: Dataset, out: Path) -> None:
    """forklift's own layout: the images under the names they came with, every record's fields kept."""
    (out / "images").mkdir(parents=True)
    taken: set[str] = set()
    moved = [
        replace(record, file=f"images/{place_image(data, record, out / 'images', taken)}") for record in data.images
    ]
    save_dataset(Dataset(data.task, data.classes, moved, out), out)


def iter_files(folder: Path) -> Iterator[Path]:
    yield from sorted(p for p in folder.rglob("*") if p.is_file())


def _model_name(models: dict[int, str], model_id: int | None) -> str:
    """The name of the model that labelled something; a model deleted since is said as such (its labels stay
    marked as a model's)."""
    return models.get(model_id, DELETED_MODEL) if model_id is not None else DELETED_MODEL
