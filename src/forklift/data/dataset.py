"""forklift's own data-set layout: one folder a person can open, read and diff.

```
DATA/
  dataset.json   {"format": "forklift-dataset", "version": 1, "task": "detect" | "classify" | "segment",
                  "classes": ["circle", ...],
                  "images": [{"file": "images/000001.png", "width": W, "height": H, "split": "train"|"val"|"test",
                              "boxes": [{"label": "circle", "x1": .., "y1": .., "x2": .., "y2": ..}],   # detect: pixels
                                        # a box may add "polygon": [[x, y], ...] (the object's outline, inside it)
                              "label": "circle",                                     # classify (null: unlabelled)
                              "mask": "masks/000001.png"}]}                                             # segment
  images/...     the image files, paths relative to DATA
  masks/...      segment: one single-channel 8-bit PNG per image, its size; pixel 0 = background,
                 i + 1 = classes[i], 255 = ignore (the classes do not list background)
```

Boxes are floats in pixels of their image, 0 <= x1 < x2 <= W and 0 <= y1 < y2 <= H. `load_dataset` checks all of
this and says what is wrong in one line naming the file and the entry; `save_dataset` writes dataset.json only
(whoever creates the images and masks writes them). The files themselves are checked by forklift.data.check
(masks through forklift.data.masks), since reading them all is slow.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from forklift.atomic import write_text_atomically
from forklift.errors import ForkliftError
from forklift.vision.images import decode_image
from forklift.vocabulary import Split, Task, word, words

FORMAT = "forklift-dataset"
VERSION = 1
INDEX = "dataset.json"
SPLITS = words(Split)  # plain strings, as dataset.json and YAML files hold them

# What a lenient load calls the problems of an entry (forklift.data.check adds those of the image files).
BAD_ENTRY = "bad entry"
UNKNOWN_LABEL = "unknown label"
BOX_OUTSIDE = "box outside image"
EMPTY_BOX = "empty box"


@dataclass(frozen=True)
class Finding:
    """One problem of one entry, kept rather than raised so that a check can report every problem at once."""

    problem: str
    file: str
    detail: str
    image: int | None  # the entry's position in Dataset.images; None: the entry could not be read, so it is not there

    def to_json(self) -> dict[str, Any]:
        return {"problem": self.problem, "file": self.file, "detail": self.detail}


class _EntryProblem(ForkliftError):
    """A problem of one entry, said relative to it; the loader adds where the entry is."""

    def __init__(self, problem: str, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail
        self.part = ""  # the box it is about, "boxes[j]", if any


@dataclass(frozen=True)
class FoundBy:
    """Which model labelled something that no person has reviewed (an auto label exported on request), and how
    sure it was: a reader that trains should know such labels from a person's."""

    model: str
    confidence: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "confidence": self.confidence}


@dataclass(frozen=True)
class Box:
    """One object's bounds in pixels of its image, with its class name; `polygon`, when the object was outlined
    as one (the app's polygons), its points [(x, y), ...] within these bounds: forklift's own layout keeps it
    beside the bounds, COCO's writer gives it as the object's segmentation, the other formats keep the bounds."""

    label: str
    x1: float
    y1: float
    x2: float
    y2: float
    polygon: tuple[tuple[float, float], ...] | None = field(default=None, kw_only=True)
    found_by: FoundBy | None = field(default=None, kw_only=True)  # an unreviewed auto label's model

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"label": self.label, "x1": self.x1, "y1": self.y1, "x2": self.x2, "y2": self.y2}
        if self.polygon is not None:
            entry["polygon"] = [list(point) for point in self.polygon]
        if self.found_by is not None:
            entry["found_by"] = self.found_by.to_json()
        return entry


@dataclass
class ImageRecord:
    """One image of a data set: its file (relative to the data set's folder), size, split and labels."""

    file: str
    width: int
    height: int
    split: str
    boxes: list[Box] = field(default_factory=list)
    label: str | None = None
    mask: str | None = None  # segment: the mask file, relative to the data set's folder
    label_found_by: FoundBy | None = None  # classify: the model that gave `label`, when no person reviewed it
    original: str | None = (
        None  # the name the file came with (an upload's, a video frame's video@time): exports keep it
    )
    # no person has labelled it yet (the app's whole-set export keeps such images): no box is not "nothing here",
    # so training and evaluation leave it out
    unlabelled: bool = False

    def to_json(self, task: Task) -> dict[str, Any]:
        entry: dict[str, Any] = {"file": self.file, "width": self.width, "height": self.height, "split": self.split}
        if self.original is not None:
            entry["original"] = self.original
        if self.unlabelled:
            entry["unlabelled"] = True
        if task == Task.DETECT:
            entry["boxes"] = [box.to_json() for box in self.boxes]
        elif task == Task.SEGMENT:
            entry["mask"] = self.mask
        else:
            entry["label"] = self.label
            if self.label_found_by is not None:
                entry["label_found_by"] = self.label_found_by.to_json()
        return entry


@dataclass
class Dataset:
    """A data set: what it is for, its class names in order, its images, and the folder they live in."""

    task: Task
    classes: list[str]
    images: list[ImageRecord]
    root: Path
    name: str | None = None  # what people call it, where it has a name apart from its folder's (the app's sets)

    @property
    def title(self) -> str:
        """Its name, else its folder's: what an export's own description calls it."""
        return self.name or self.root.name

    def path(self, image: ImageRecord) -> Path:
        """Where an image's file is on disk."""
        return self.root / image.file

    def decoded(self, image: ImageRecord) -> np.ndarray:
        """An image's pixels, RGB uint8, upright (as every engine decodes them)."""
        return decode_image(self.path(image).read_bytes(), image.file)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "task": self.task,
            "classes": list(self.classes),
            "images": [image.to_json(self.task) for image in self.images],
        }


def save_dataset(dataset: Dataset, path: Path) -> Path:
    """Write DATA/dataset.json through a temporary file, so a reader never sees half of it; returns its path."""
    return write_text_atomically(Path(path) / INDEX, json.dumps(dataset.to_json(), indent=1) + "\n")


def load_dataset(path: Path) -> Dataset:
    """Read a data set from its folder (or its dataset.json), checking every entry against the layout."""
    return _load(Path(path), None)


def load_dataset_leniently(path: Path) -> tuple[Dataset, list[Finding]]:
    """Read a data set keeping what is usable and a Finding for each problem of an entry, so all are reported at once.

    An entry whose fields cannot make an ImageRecord is left out (one finding); one with bad boxes is kept without
    them (a finding each). Problems of the whole file (JSON, format, version, task, classes) still raise.
    """
    findings: list[Finding] = []
    return _load(Path(path), findings), findings


def _load(path: Path, findings: list[Finding] | None) -> Dataset:
    """The loader of both modes: strict when findings is None, else problems of entries go into findings."""
    index = path / INDEX if path.is_dir() else path
    refuse_other_layouts(path)
    if index.is_file() and index.name != INDEX:  # /etc/passwd said "not valid JSON", as if it were a data set's
        raise ForkliftError(f"{path}: not a data set (a folder holding {INDEX}, or that file itself)")
    document = _read_json(index)
    where = str(index)
    if not isinstance(document, dict):
        raise ForkliftError(f"{where}: expected a JSON object with format {FORMAT!r}")
    if document.get("format") != FORMAT:
        raise ForkliftError(f"{where}: format is {document.get('format')!r}, expected {FORMAT!r}")
    if document.get("version") != VERSION:
        raise ForkliftError(f"{where}: version {document.get('version')!r} is not supported (forklift reads {VERSION})")
    task = word(Task, document.get("task"), where=f"{where}: task")
    classes = _classes(document.get("classes"), where)
    entries = document.get("images")
    if not isinstance(entries, list):
        raise ForkliftError(f"{where}: 'images' must be a list")
    images = _images(entries, task, classes, where, findings)
    return Dataset(task=task, classes=classes, images=images, root=index.parent)


def describe(dataset: Dataset) -> str:
    """One line a person reads after making or loading a data set: images per split, objects per class."""
    splits = Counter(image.split for image in dataset.images)
    split_text = ", ".join(f"{splits[split]} {split}" for split in SPLITS)
    if dataset.task == Task.SEGMENT:  # what each mask holds takes reading it: forklift data stats does
        return f"{len(dataset.images)} images ({split_text}); masks of {', '.join(dataset.classes)}"
    if dataset.task == Task.DETECT:
        labels = Counter(box.label for image in dataset.images for box in image.boxes)
        counted = f"{sum(labels.values())} boxes"
    else:
        labels = Counter(image.label for image in dataset.images if image.label is not None)
        counted = "labels"
    class_text = ", ".join(f"{name} {labels[name]}" for name in dataset.classes)
    return f"{len(dataset.images)} images ({split_text}); {counted}: {class_text}"


# another tool's layout, as its own file shows it, and the format `forklift data import` reads it as
FOREIGN = (("*.json", "coco"), ("data.yaml", "yolo"), ("Annotations", "voc"), ("*.zip", "powerai"))


def refuse_other_layouts(path: Path) -> None:
    """A zip, or a folder of another tool's layout, where a data set was expected: one line saying how to make a
    data set of it (rather than "not valid JSON" or "no dataset.json")."""
    index = path / INDEX
    if path.is_file() and zipfile.is_zipfile(path):
        raise ForkliftError(
            f"{path}: a zip, not a data set folder: unpack an export of forklift's own layout, or make a data set "
            f"of another tool's with 'forklift data import --from FORMAT {path} DATA'"
        )
    if path.is_dir() and not index.exists():
        for pattern, kind in FOREIGN:
            if next(path.glob(pattern), None) is not None:
                raise ForkliftError(f"{path}: no {INDEX}; it looks like a {kind} export: make a data set of it with "
                                    f"'forklift data import --from {kind} {path} DATA'")  # fmt: skip


def _read_json(index: Path) -> Any:
    try:
        return json.loads(index.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ForkliftError(f"{index}: no such file (a data set is a folder holding {INDEX})") from None
    except json.JSONDecodeError as exc:
        raise ForkliftError(f"{index}: not valid JSON: {exc}") from None  # "...: line 21 column 5 (char 400)"
    except UnicodeDecodeError:
        raise ForkliftError(f"{index}: not UTF-8 text") from None
    except OSError as exc:
        raise ForkliftError(f"{index}: cannot read: {exc.strerror}") from None


def _classes(value: Any, where: str) -> list[str]:
    """The class names; none at all is a data set nobody has labelled yet (training refuses it, saying so)."""
    if not isinstance(value, list) or not all(isinstance(name, str) and name for name in value):
        raise ForkliftError(f"{where}: 'classes' must be a list of names")
    repeated = sorted(name for name, count in Counter(value).items() if count > 1)
    if repeated:
        raise ForkliftError(f"{where}: class {repeated[0]!r} is listed twice")
    return value


def _field(entry: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """entry[key] if it is of the kind the layout says (never a bool standing in for a number)."""
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,)))
        raise _EntryProblem(BAD_ENTRY, f"{key!r} must be {names}, found {value!r}")
    return value


def _label(entry: dict[str, Any], classes: list[str]) -> str:
    label = _field(entry, "label", str)
    if label not in classes:
        raise _EntryProblem(UNKNOWN_LABEL, f"label {label!r} is not one of the classes")
    return label


def _file_of(entry: Any) -> str:
    """The entry's file as written, or "" where it has none, for messages."""
    file = entry.get("file") if isinstance(entry, dict) else None
    return file if isinstance(file, str) else ""


def _images(
    entries: list[Any], task: Task, classes: list[str], where: str, findings: list[Finding] | None
) -> list[ImageRecord]:
    """The records of the entries; the first problem raises, unless findings collects them all."""
    images: list[ImageRecord] = []
    for i, entry in enumerate(entries):
        problems: list[_EntryProblem] = []
        try:
            record: ImageRecord | None = _image(entry, task, classes, None if findings is None else problems)
        except _EntryProblem as problem:
            record = None
            problems.append(problem)
        if findings is None:
            if problems:
                raise ForkliftError(f"{where}: {_locate(i, _file_of(entry), problems[0])}: {problems[0].detail}")
        else:
            position = len(images) if record is not None else None
            for p in problems:
                findings.append(Finding(p.problem, _file_of(entry), f"{_locate(i, '', p)}: {p.detail}", position))
        if record is not None:
            images.append(record)
    return images


def _locate(i: int, file: str, problem: _EntryProblem) -> str:
    """Where in dataset.json a problem is: images[i], the file when given, the box if it is about one."""
    return " ".join(part for part in (f"images[{i}]", f"({file})" if file else "", problem.part) if part)


def _image(entry: Any, task: Task, classes: list[str], problems: list[_EntryProblem] | None) -> ImageRecord:
    """One entry's record; a bad box raises, or goes into problems (and out of the record) when given."""
    if not isinstance(entry, dict):
        raise _EntryProblem(BAD_ENTRY, "expected an object with file, width, height and split")
    file = _inside(entry, "file")
    width, height = _field(entry, "width", int), _field(entry, "height", int)
    if width < 1 or height < 1:
        raise _EntryProblem(BAD_ENTRY, f"size {width}x{height} is not positive")
    split = entry.get("split")
    if split not in SPLITS:
        raise _EntryProblem(BAD_ENTRY, f"split is {split!r}, expected one of {', '.join(SPLITS)}")
    original = entry.get("original")
    record = ImageRecord(file=file, width=width, height=height, split=split,
                         original=original if isinstance(original, str) else None,
                         unlabelled=entry.get("unlabelled") is True)  # fmt: skip
    if task == Task.CLASSIFY:
        if record.unlabelled and entry.get("label") is None:  # no class yet: a whole-set export keeps it so
            return record
        record.label = _label(entry, classes)
        record.label_found_by = _found_by(entry.get("label_found_by"))
        return record
    if task == Task.SEGMENT:
        record.mask = _inside(entry, "mask")
        return record
    for j, box in enumerate(_field(entry, "boxes", list)):
        try:
            record.boxes.append(_box(box, classes, width, height))
        except _EntryProblem as problem:
            problem.part = f"boxes[{j}]"
            if problems is None:
                raise
            problems.append(problem)
    return record


def _inside(entry: dict[str, Any], key: str) -> str:
    """entry[key] as a relative path that stays inside the data set's folder."""
    path = _field(entry, key, str)
    relative = PurePosixPath(path)
    if not path or relative.is_absolute() or ".." in relative.parts:
        raise _EntryProblem(BAD_ENTRY, f"the {key} must be a path inside the data set's folder")
    return path


def _box(entry: Any, classes: list[str], width: int, height: int) -> Box:
    if not isinstance(entry, dict):
        raise _EntryProblem(BAD_ENTRY, "expected an object with label, x1, y1, x2, y2")
    label = _label(entry, classes)
    x1, y1, x2, y2 = (float(_field(entry, key, (int, float))) for key in ("x1", "y1", "x2", "y2"))
    if not (x1 < x2 and y1 < y2):
        raise _EntryProblem(EMPTY_BOX, f"({x1}, {y1}, {x2}, {y2}) has no area")
    if min(x1, y1) < 0 or x2 > width or y2 > height:
        raise _EntryProblem(BOX_OUTSIDE, f"({x1}, {y1}, {x2}, {y2}) is not a box inside the {width}x{height} image")
    polygon = _polygon(entry.get("polygon"), (x1, y1, x2, y2))
    return Box(label, x1, y1, x2, y2, polygon=polygon, found_by=_found_by(entry.get("found_by")))


def _polygon(value: Any, corners: tuple[float, float, float, float]) -> tuple[tuple[float, float], ...] | None:
    """A box's outline: three or more [x, y] points within its bounds; None when the box has none."""
    if value is None:
        return None
    pairs = isinstance(value, list) and len(value) >= 3 and all(isinstance(p, list) and len(p) == 2 for p in value)
    if not pairs or not all(isinstance(v, int | float) and not isinstance(v, bool) for p in value for v in p):
        raise _EntryProblem(BAD_ENTRY, "a polygon is a list of three or more [x, y] points")
    x1, y1, x2, y2 = corners
    outside = next((p for p in value if not (x1 <= p[0] <= x2 and y1 <= p[1] <= y2)), None)
    if outside is not None:
        raise _EntryProblem(BAD_ENTRY, f"polygon point {outside} is outside its box ({x1}, {y1}, {x2}, {y2})")
    return tuple((float(x), float(y)) for x, y in value)


def _found_by(entry: Any) -> FoundBy | None:
    """An auto label's provenance as written by `FoundBy.to_json`; None when absent or not of that shape."""
    if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
        return None
    confidence = entry.get("confidence")
    return FoundBy(entry["model"], float(confidence) if isinstance(confidence, int | float) else None)
