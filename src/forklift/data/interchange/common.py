"""What every foreign format shares: the import builder that clips boxes (or writes masks), the record of items an
import had to skip, unique file names, image sizes."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, NamedTuple

import numpy as np
from PIL import Image, UnidentifiedImageError

from forklift.data.dataset import SPLITS, Box, Dataset, FoundBy, ImageRecord, save_dataset
from forklift.data.file_names import unique_name
from forklift.data.masks import write_mask
from forklift.errors import ForkliftError
from forklift.vision.masks import IGNORE
from forklift.vocabulary import Task

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif"})
ROUNDING = 0.01  # pixels a box may stick out (normalised formats round) before its clipping is worth reporting
_TRANSPOSED = frozenset({5, 6, 7, 8})  # EXIF orientations that swap width and height
EXAMPLES = 3  # skipped items named per kind: enough to find the pattern, short for any count


Outline = tuple[tuple[float, float], ...]  # an object's polygon: (x, y) points in pixels


class RawBox(NamedTuple):
    """A box as a source gives it: its label and corners in pixels (possibly outside the image), the object's
    outline where the source has one (COCO's polygon segmentation), and the model that found it where the source
    marks a label no person reviewed."""

    label: str
    x1: float
    y1: float
    x2: float
    y2: float
    polygon: Outline | None = None
    found_by: FoundBy | None = None
    where: str = ""  # where the source gives it (a file's line, an annotation's id): named when it is dropped


class SkipKind(NamedTuple):
    """A kind of item an import leaves out, as the report names one and many of them."""

    one: str
    many: str


MISSING_IMAGE = SkipKind("image not found in the import", "images not found in the import")
UNREADABLE_IMAGE = SkipKind("unreadable image", "unreadable images")
RESIZED_IMAGE = SkipKind(
    "image whose size is not the one its labels are for", "images whose size is not the one their labels are for"
)
ORPHAN_ANNOTATION = SkipKind(
    "annotation file whose image is not found in the import", "annotation files whose image is not found in the import"
)
MALFORMED_ANNOTATION = SkipKind("malformed annotation file", "malformed annotation files")
UNSAFE_ENTRY = SkipKind("unsafe zip entry", "unsafe zip entries")


@dataclass
class SkippedItems:
    """What an import left out, counted by kind with the first few named: real exports have a few bad items, and
    one of them should neither sink the import nor vanish unreported."""

    counts: dict[SkipKind, int] = field(default_factory=dict)
    examples: dict[SkipKind, list[str]] = field(default_factory=dict)

    def add(self, kind: SkipKind, example: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        named = self.examples.setdefault(kind, [])
        if len(named) < EXAMPLES:
            named.append(example)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def lines(self) -> list[str]:
        """One line per kind, in the order they were first met."""
        return [self._line(kind, count) for kind, count in self.counts.items()]

    def _line(self, kind: SkipKind, count: int) -> str:
        named = ", ".join(self.examples[kind]) + (", ..." if count > EXAMPLES else "")
        if count == 1:
            return f"skipped 1 {kind.one} ({named})"
        return f"skipped {count} {kind.many} (first: {named})"


@dataclass
class ImportSummary:
    """What an import did, including what it had to repair, so nothing is changed silently."""

    out: Path
    task: Task = Task.DETECT
    images: int = 0
    boxes: int = 0
    classes: int = 0
    clipped: int = 0
    dropped: int = 0
    dropped_at: list[str] = field(default_factory=list)  # where the first dropped boxes were (EXAMPLES of them)
    crowd: int = 0
    renamed: int = 0
    boxed: int = 0  # outlines a box has to stand for (an RLE mask, an object in several parts)
    posed: int = 0  # a pose set's labels whose keypoints were left out (their boxes kept)
    difficult: int = 0  # VOC objects marked difficult, kept as boxes like the others (forklift has no such flag)
    alike: list[str] = field(default_factory=list)  # COCO categories of one name under several ids: one class each
    skipped_items: SkippedItems = field(default_factory=SkippedItems)

    @property
    def skipped(self) -> int:
        """How many items were left out: non-zero makes the CLI exit 1, as `data check` does on findings."""
        return self.skipped_items.total

    def lines(self) -> list[str]:
        """The summary line, then one line per kind of skipped item."""
        return [self.line(), *self.skipped_items.lines()]

    def line(self) -> str:
        head = f"imported {self.images} images, {self.classes} classes into {self.out}"
        if self.task == Task.SEGMENT:
            return f"{head} (masks; {self.crowd} crowd regions marked ignore, {self.renamed} files renamed)"
        return (
            f"imported {self.images} images, {self.boxes} boxes, {self.classes} classes into {self.out} "
            f"({self.clipped} boxes clipped to their image, {self.dropped} empty boxes dropped{self._dropped_at()}, "
            f"{self.crowd} crowd boxes skipped, {self.boxed} outlines kept as their boxes, {self.renamed} files "
            f"renamed{f', {self.posed} keypoint sets left out' if self.posed else ''}"
            f"{f', {self.difficult} objects marked difficult kept as boxes' if self.difficult else ''})"
        )

    def _dropped_at(self) -> str:
        """Where the first boxes dropped were, as their source gives them: a count alone left the lines unfound."""
        shown = ", ".join(self.dropped_at) + (", ..." if self.dropped > len(self.dropped_at) else "")
        return f" ({'first: ' if self.dropped > len(self.dropped_at) else ''}{shown})" if self.dropped_at else ""

    def changes(self) -> list[str]:
        """What the import changed of the labels, one line each (none where it changed nothing), for a person who
        reads no summary line: the app says them beside the images it added."""
        detect = self.task != Task.SEGMENT
        counted = [
            (self.crowd if detect else 0, "crowd regions (iscrowd: 1) skipped: their objects are not labelled"),
            (self.boxed, "outlines kept as their boxes only (an RLE mask, or an object in several parts)"),
            (self.posed, "boxes of a pose set kept without their keypoints"),
            (self.difficult, "objects marked difficult (VOC) kept as boxes like the others: VOC's mAP leaves them out"),
            (
                len(self.alike),
                f"category names shared by several ids, each imported as one class: {', '.join(self.alike)}",
            ),
            (self.clipped, "boxes clipped to their image"),
            (self.dropped, f"empty boxes dropped{self._dropped_at()}"),
        ]
        return [f"{count} {what}" for count, what in counted if count]


@dataclass
class ExportSummary:
    """What an export wrote."""

    out: Path
    format: str
    images: int
    boxes: int  # boxes, or for a segment data set the annotations (COCO) or masks written
    classes: int
    task: Task = Task.DETECT
    notes: list[str] = field(default_factory=list)  # what the export changed to suit the format, said to the person

    def line(self) -> str:
        objects = "masks" if self.task == Task.SEGMENT else "boxes"
        counts = f"{self.images} images, {self.boxes} {objects}, {self.classes} classes"
        return f"exported {counts} to {self.out} ({self.format})" + "".join(f"; {note}" for note in self.notes)


def new_folder(out: Path) -> Path:
    """out as a new or empty folder: an import or export never mixes its files with someone else's."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ForkliftError(f"{out}: already exists and is not an empty folder; choose a new one")
    out.mkdir(parents=True, exist_ok=True)
    return out


def image_size(content: Path | bytes, where: str, *, thorough: bool = False) -> tuple[int, int]:
    """Width and height as forklift sees the image (upright per EXIF), from the header only; `thorough`: a PNG's
    EXIF after its pixels too (the whole image decoded, as the app's upload check reads it)."""
    try:
        with Image.open(BytesIO(content) if isinstance(content, bytes) else content) as image:
            width, height = image.size
            # a PNG's getexif() decodes the whole image to look for EXIF after its pixels: the header's is enough
            # (an import of 10,000 photos read every header, and decoded every PNG)
            header_only = image.format == "PNG" and "exif" not in image.info and not thorough
            orientation = None if header_only else image.getexif().get(0x0112)
    except FileNotFoundError:
        raise ForkliftError(f"{where}: no such image") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise ForkliftError(f"{where}: not a readable image: {exc}") from None
    return (height, width) if orientation in _TRANSPOSED else (width, height)


def checked_size(
    content: Path | bytes, builder: DatasetBuilder, name: str, *, width: int = 0, height: int = 0
) -> tuple[int, int] | None:
    """The image's size from its header (upright per EXIF). None when the image is missing or unreadable, or when
    the source gives another size (0: none given), which its boxes are for (a photo turned by its EXIF tag after
    it was labelled, a file replaced): it is then recorded as skipped under name, so one bad image neither sinks
    the import nor comes in with its boxes where they were not drawn."""
    if isinstance(content, Path) and not (builder.holds(content) and content.is_file()):
        builder.skip(MISSING_IMAGE, name)  # the same words for a file outside the import as for none at all
        return None
    try:
        size = image_size(content, name)
    except ForkliftError:
        builder.skip(UNREADABLE_IMAGE, name)
        return None
    if width and height and (width, height) != size:
        builder.skip(RESIZED_IMAGE, f"{name}: labels for {width}x{height}, the image {size[0]}x{size[1]}")
        return None
    return size


def need(entry: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """entry[key] if it is of the expected kind (never a bool standing in for a number), else a one-line error."""
    value = entry.get(key) if isinstance(entry, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ForkliftError(f"{where}: {key!r} is missing or not of the expected kind (found {value!r})")
    return value


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ForkliftError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ForkliftError(f"{path}: not valid JSON: {exc}") from None


def detect_only(dataset: Dataset, format_name: str) -> None:
    if dataset.task != Task.DETECT:
        raise ForkliftError(f"{dataset.root}: a {dataset.task} data set has no boxes to export to {format_name}")


def segment_only(dataset: Dataset, format_name: str) -> None:
    if dataset.task != Task.SEGMENT:
        raise ForkliftError(f"{dataset.root}: a {dataset.task} data set has no masks to export to {format_name}")


def labelled_images(dataset: Dataset) -> tuple[list[ImageRecord], list[str]]:
    """The images an export of a label file per image holds (VOC, YOLO, PowerAI Vision), and a note on the ones it
    leaves out: an image no person has labelled yet would get an empty file, which tells every trainer "nothing
    here"."""
    kept = [image for image in dataset.images if not image.unlabelled]
    left = len(dataset.images) - len(kept)
    if not kept and left:
        raise ForkliftError(f"{dataset.root}: no person has labelled any of its {left} images; nothing to export")
    if not left:
        return kept, []
    plural = "image" if left == 1 else "images"
    return kept, [f"left out {left} {plural} no person has labelled (an empty label file says nothing is there)"]


def outlines_as_boxes(images: list[ImageRecord]) -> list[str]:
    """A note for an export whose format holds boxes alone (VOC, YOLO, PowerAI Vision): how many objects' outlines
    it leaves out (none: no note)."""
    outlined = sum(box.polygon is not None for image in images for box in image.boxes)
    if not outlined:
        return []
    return [f"{outlined} outlined objects written as their boxes only (the format holds boxes; COCO keeps outlines)"]


def export_name(image: ImageRecord, taken: set[str]) -> str:
    """The image's file name in an export: the one it came with when known (else its own), made unique, with the
    stored file's suffix where it came without an image's (an upload named `snapshot`: YOLO trainers find an image
    by its suffix). Only its last part, whichever separator it was given with: a name sent from Windows
    (``..\\x.jpg``) must not become a zip entry that climbs out of the folder it is unpacked to."""
    stored = PurePosixPath(image.file)
    given = PureWindowsPath(image.original or "").name  # splits at / and \ alike
    if not given.strip("."):
        return unique_name(stored.name, taken)
    if PurePosixPath(given).suffix.lower() not in IMAGE_SUFFIXES:
        given += stored.suffix
    return unique_name(given, taken)


def place_image(dataset: Dataset, image: ImageRecord, folder: Path, taken: set[str]) -> str:
    """Copy a data set's image into a flat folder under its export name; returns that name."""
    name = export_name(image, taken)
    shutil.copyfile(exported_image(dataset, image), folder / name)
    return name


def exported_image(dataset: Dataset, image: ImageRecord) -> Path:
    """The image's file, as an export may write it: a file missing, or of another size than its entry in
    dataset.json (whose boxes a normalised format would place by the wrong size), is a one-line error."""
    path = dataset.path(image)
    hint = "(`forklift data check` lists every such image)"
    try:
        width, height = image_size(path, str(path))
        if (width, height) == (image.height, image.width):  # turned by an EXIF tag after a PNG's pixels, maybe
            width, height = image_size(path, str(path), thorough=True)
    except ForkliftError as exc:
        raise ForkliftError(f"{exc} {hint}") from None
    if (width, height) != (image.width, image.height):
        raise ForkliftError(
            f"{path}: dataset.json gives it as {image.width}x{image.height}, the file is {width}x{height}, so its "
            f"boxes would be exported where they were not drawn {hint}"
        )
    return path


class DatasetBuilder:
    """Collects a foreign layout's images and boxes (or masks, for task segment) into a forklift data set,
    clipping boxes to their image."""

    def __init__(self, out: Path, task: Task = Task.DETECT, *, root: Path | None = None) -> None:
        self.root = root.resolve() if root is not None else None  # what the import may read: its own files
        self.out = new_folder(out)
        (self.out / "images").mkdir()
        self.task = task
        self.split = "train"  # the split of an image whose source names none
        self.classes: list[str] = []
        self.images: list[ImageRecord] = []
        self.summary = ImportSummary(out=self.out, task=task)
        self._taken: set[str] = set()

    def holds(self, path: Path) -> bool:
        """Whether `path` lies in the import's own folder (links followed): a file name in an annotation that
        points elsewhere on the machine (absolute, `..`) is read as not there."""
        if self.root is None:
            return True
        try:
            return path.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):  # a link loop
            return False

    def skip(self, kind: SkipKind, example: str) -> None:
        """Leave one item out of the import and record it for the report."""
        self.summary.skipped_items.add(kind, example)

    def add_class(self, name: str) -> None:
        if name not in self.classes:
            self.classes.append(name)

    def add_image(
        self,
        name: str,
        content: Path | bytes,
        width: int,
        height: int,
        split: str,
        boxes: list[RawBox],
        where: str,
        mask: np.ndarray | None = None,
        *,
        unlabelled: bool = False,
    ) -> None:
        """Copy one image (a file or its bytes) into OUT/images/ under its own name, made unique if need be; a
        segment import gives its label map (values index the classes added so far), written to OUT/masks/; an
        image its source says no person has labelled yet is marked so (no box is then not "nothing here")."""
        if not (isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0):
            raise ForkliftError(f"{where}: image size {width}x{height} is not positive")
        if split not in SPLITS:
            raise ForkliftError(f"{where}: split {split!r} is not one of {', '.join(SPLITS)}")
        base = PurePosixPath(name.replace("\\", "/")).name
        file = unique_name(base, self._taken)
        self.summary.renamed += file != base
        target = self.out / "images" / file
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif content.is_file():
            shutil.copyfile(content, target)
        else:
            raise ForkliftError(f"{content}: no such image (named by {where})")
        kept = [box for box in (self._clip(raw, width, height) for raw in boxes) if box is not None]
        record = ImageRecord(f"images/{file}", width, height, split, kept, unlabelled=unlabelled and not kept)
        if self.task == Task.SEGMENT:
            record.mask = f"masks/{PurePosixPath(file).stem}.png"
            write_mask(self.out / record.mask, self._checked(mask, width, height, where))
        self.images.append(record)

    def _checked(self, mask: np.ndarray | None, width: int, height: int, where: str) -> np.ndarray:
        """The label map if it fits the image and the classes; a one-line error naming the source if not."""
        if mask is None or mask.shape != (height, width):
            found = "none" if mask is None else f"{mask.shape[1]}x{mask.shape[0]}"
            raise ForkliftError(f"{where}: the mask is {found}, its image {width}x{height}")
        bad = mask[(mask > len(self.classes)) & (mask != IGNORE)]
        if bad.size:
            classes = len(self.classes)
            raise ForkliftError(f"{where}: mask value {int(bad.max())} is neither a class (1-{classes}) nor {IGNORE}")
        return mask.astype(np.uint8)

    def _clip(self, raw: RawBox, width: int, height: int) -> Box | None:
        label, corners = raw.label, (raw.x1, raw.y1, raw.x2, raw.y2)
        clipped = tuple(min(max(v, 0.0), limit) for v, limit in zip(corners, (width, height) * 2, strict=True))
        if not all(math.isfinite(v) for v in corners) or clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
            self.summary.dropped += 1
            if raw.where and len(self.summary.dropped_at) < EXAMPLES:
                self.summary.dropped_at.append(raw.where)
            return None
        self.summary.clipped += max(abs(a - b) for a, b in zip(clipped, corners, strict=True)) > ROUNDING
        self.add_class(label)
        x1, y1, x2, y2 = (float(v) for v in clipped)
        outline = _outline_within(_within_image(raw.polygon, width, height), (x1, y1, x2, y2))
        return Box(label, x1, y1, x2, y2, polygon=outline, found_by=raw.found_by)

    def finish(self, source: Path) -> ImportSummary:
        """Write dataset.json and say what was imported; if everything was skipped, or ``source`` lists no image,
        there is no data set to write."""
        if not self.images and self.summary.skipped:
            raise ForkliftError(f"nothing could be imported: {'; '.join(self.summary.skipped_items.lines())}")
        if not self.images:
            raise ForkliftError(f"{source}: lists no images: nothing to import")
        if not self.classes:
            raise ForkliftError("the source names no classes and has no boxes: nothing to import")
        save_dataset(Dataset(self.task, self.classes, self.images, self.out), self.out)
        self.summary.images = len(self.images)
        self.summary.boxes = sum(len(image.boxes) for image in self.images)
        self.summary.classes = len(self.classes)
        return self.summary


def _within_image(polygon: Outline | None, width: int, height: int) -> Outline | None:
    """An outline with its points past the image's edges moved onto them (as its box is clipped, and as Ultralytics
    clips a segment's points): an object cut by the frame keeps the outline of what is in the image."""
    if polygon is None:
        return None
    return tuple((min(max(x, 0.0), float(width)), min(max(y, 0.0), float(height))) for x, y in polygon)


def _outline_within(polygon: Outline | None, corners: tuple[float, float, float, float]) -> Outline | None:
    """The outline with its points moved into the box (a source rounds its bbox, or the box was clipped to the
    image); None when it had none, or when it strays from the box by more than a pixel: then it is not this box's
    outline, and the box is kept alone."""
    if polygon is None or not all(math.isfinite(v) for point in polygon for v in point):
        return None
    x1, y1, x2, y2 = corners
    xs, ys = [x for x, _ in polygon], [y for _, y in polygon]
    if min(xs) < x1 - 1 or min(ys) < y1 - 1 or max(xs) > x2 + 1 or max(ys) > y2 + 1:
        return None
    return tuple((min(max(x, x1), x2), min(max(y, y1), y2)) for x, y in polygon)
