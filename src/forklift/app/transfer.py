"""Data sets in and out of the app: export in forklift's and other tools' formats (the existing writers of
`forklift.data.interchange`), streamed as a zip that is never whole in memory; import of a zip of images or of a
COCO, VOC, YOLO or PowerAI Vision export, through the existing readers, after a safe extraction.

A zip entry is refused when its name is absolute or climbs out with `..`, when it is a symlink, or when it is a
zip bomb's part (more than MAX_RATIO times its compressed size, or past MAX_UNPACKED in all); the other entries
are still imported and each refusal is one line naming the entry.
"""

from __future__ import annotations

import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sqlalchemy import select
from sqlalchemy.orm import Session
from zipstream import ZIP_STORED, ZipStream

from forklift.app.tables import Annotation, DataSet, Image, Label
from forklift.data.dataset import Box, Dataset, ImageRecord
from forklift.data.interchange import FORMATS
from forklift.errors import ForkliftError
from forklift.vocabulary import DataFormat, Task

MAX_RATIO = 100  # uncompressed / compressed, per entry
MAX_UNPACKED = 8 * 2**30  # bytes, all entries together
EXPORTS = ("forklift", "coco", "voc", "yolo", "powerai")


LABELLED = ("labelled", "auto", "reviewed")  # images with labels: auto ones too (the review queue is not a filter)
ALL_IMAGES = ("unlabelled", *LABELLED)
WHOLE_SET_FORMATS = ("forklift", "coco")  # the formats an export gives every image in: see exported_statuses


def exported_statuses(format_name: str) -> tuple[str, ...]:
    """The images an export in `format_name` holds. COCO keeps its images and annotations in separate lists, and
    forklift's layout an image's boxes in the image's entry, so both carry an image with no labels as it is: their
    exports are the whole data set (its unlabelled images with no annotations, as COCO allows; detectron2 and
    MMDetection leave such images out of training by default). VOC, YOLO and PowerAI Vision write a label file
    per image, where an empty one tells every trainer "nothing here": those get the labelled images only. A
    classification set's image without a class is in none (forklift's layout needs its class)."""
    return ALL_IMAGES if format_name in WHOLE_SET_FORMATS else LABELLED


def as_forklift_dataset(
    session: Session, dataset: DataSet, root: Path, *, statuses: tuple[str, ...] = LABELLED
) -> Dataset:
    """The app's data set as forklift's `Dataset` over the app's own files (`root`: the data directory), with the
    images of `statuses` (training takes labelled and reviewed ones: an unlabelled one would teach that nothing is
    in it). A polygon goes as its bounding box carrying its points (forklift's detect sets hold boxes; COCO's
    writer gives the points as the object's segmentation)."""
    labels = dict(session.execute(select(Label.id, Label.name).where(Label.dataset_id == dataset.id)).all())
    images = session.scalars(select(Image).where(Image.dataset_id == dataset.id, Image.status.in_(statuses))
                             .order_by(Image.id)).all()  # fmt: skip
    shapes: dict[int, list[Annotation]] = {}
    query = select(Annotation).join(Image, Image.id == Annotation.image_id).where(Image.dataset_id == dataset.id)
    for annotation in session.scalars(query.order_by(Annotation.id)):
        shapes.setdefault(annotation.image_id, []).append(annotation)
    records = []
    for image in images:
        boxes = [_box(a, labels[a.label_id]) for a in shapes.get(image.id, [])]
        label = labels.get(image.class_id) if image.class_id else None
        if dataset.task == Task.CLASSIFY and label is None:
            continue
        records.append(ImageRecord(image.file, image.width, image.height, image.split, boxes, label))
    return Dataset(Task(dataset.task), sorted(labels.values()), records, root)


def _box(annotation: Annotation, label: str) -> Box:
    if annotation.kind == "box":
        x1, y1, x2, y2 = annotation.points
        return Box(label, float(x1), float(y1), float(x2), float(y2))
    points = tuple((float(x), float(y)) for x, y in annotation.points)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    return Box(label, min(xs), min(ys), max(xs), max(ys), polygon=points)


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
    from forklift.data.dataset import save_dataset

    (out / "images").mkdir(parents=True)
    moved = []
    for record in data.images:
        target = out / "images" / PurePosixPath(record.file).name
        shutil.copyfile(data.path(record), target)
        moved.append(ImageRecord(f"images/{target.name}", record.width, record.height, record.split, record.boxes,
                                 record.label))  # fmt: skip
    save_dataset(Dataset(data.task, data.classes, moved, out), out)


@dataclass
class Extracted:
    folder: Path
    refused: list[str] = field(default_factory=list)


def safe_extract(archive: Path, folder: Path) -> Extracted:
    """Unpack the zip's safe entries into `folder`; each unsafe one is one line in `refused`."""
    done = Extracted(folder)
    unpacked = 0
    try:
        with zipfile.ZipFile(archive) as zipped:
            for entry in zipped.infolist():
                name = entry.filename
                path = PurePosixPath(name)
                mode = entry.external_attr >> 16
                if path.is_absolute() or ".." in path.parts or name.startswith(("\\", "/")) or ":" in path.parts[0]:
                    done.refused.append(f"{name}: an absolute path or one that climbs out with '..'")
                elif stat.S_ISLNK(mode):
                    done.refused.append(f"{name}: a symlink")
                elif entry.is_dir():
                    continue
                elif entry.file_size > MAX_RATIO * max(entry.compress_size, 1) and entry.file_size > 2**20:
                    done.refused.append(f"{name}: unpacks to {entry.file_size:,} bytes from {entry.compress_size:,} "
                                        f"(a zip bomb?)")  # fmt: skip
                elif unpacked + entry.file_size > MAX_UNPACKED:
                    done.refused.append(f"{name}: the zip unpacks to more than {MAX_UNPACKED // 2**30} GiB")
                else:
                    target = folder.joinpath(*path.parts)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zipped.open(entry) as source, target.open("wb") as out:
                        shutil.copyfileobj(source, out, 1 << 20)
                    unpacked += entry.file_size
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ForkliftError(f"{archive.name}: not a readable zip ({exc})") from exc
    return done


def located_source(format_name: str, folder: Path, archive: Path) -> Path:
    """What the format's reader takes, found in the unpacked zip: COCO's JSON, VOC's folder (the one with
    Annotations/), YOLO's data.yaml; PowerAI Vision reads its own zip."""
    if format_name == "powerai":
        return archive
    patterns = {"coco": "*.json", "voc": "Annotations", "yolo": "data.yaml"}
    found = sorted(folder.rglob(patterns[format_name]), key=lambda p: len(p.parts))
    if not found:
        raise ForkliftError(f"{archive.name}: no {patterns[format_name]} in it for a {format_name} import")
    return found[0].parent if format_name == "voc" else found[0]


def iter_files(folder: Path) -> Iterator[Path]:
    yield from sorted(p for p in folder.rglob("*") if p.is_file())
