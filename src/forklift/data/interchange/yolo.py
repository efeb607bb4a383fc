"""YOLO (Darknet / Ultralytics) txt labels: data.yaml names the classes and each split's image folder; beside
images/.../a.png lies labels/.../a.txt with one `class cx cy w h` line per box, normalised to [0, 1].
"""

from __future__ import annotations

import random
from pathlib import Path

import yaml

from forklift.data.dataset import SPLITS, Dataset, ImageRecord
from forklift.data.interchange.common import (
    IMAGE_SUFFIXES,
    ORPHAN_ANNOTATION,
    DatasetBuilder,
    ExportSummary,
    RawBox,
    SkipKind,
    checked_size,
    detect_only,
    labelled_images,
    new_folder,
    outlines_as_boxes,
    place_image,
)
from forklift.errors import ForkliftError

CLASSES_TXT = "classes.txt"  # LabelImg writes the class names beside the labels: not a label file
MISSING_SPLIT = SkipKind("split folder missing", "split folders missing")
REPEATED_SPLIT = SkipKind("split folder read already for another split", "split folders read already for another split")
UNREADABLE_LABELS = SkipKind("unreadable label file", "unreadable label files")
SHAPES = "'class cx cy w h' or 'class x1 y1 x2 y2 x3 y3 ...'"  # a box, or a polygon (Ultralytics' segment labels)
MALFORMED_LINE = SkipKind(f"label line that is not {SHAPES}", f"label lines that are not {SHAPES}")
UNKNOWN_CLASS = SkipKind("label line with a class index out of range", "label lines with a class index out of range")


def read(source: Path, builder: DatasetBuilder) -> None:
    """Import from a data.yaml; sizes come from the image files' headers since the labels are normalised. A split
    folder that is not there, an image that cannot be read, a label file without its image and a label line that
    is malformed or names no class are skipped and reported."""
    config = _config(source)
    names = _names(config.get("names"), str(source))
    keypoints = _keypoint_values(config.get("kpt_shape"), str(source))
    for name in names:
        builder.add_class(name)
    if not any(config.get(split) for split in SPLITS):
        raise ForkliftError(f"{source}: names no folder of images (none of the keys {', '.join(SPLITS)})")
    root = source.parent / str(config.get("path") or "")
    read: dict[Path, str] = {}  # each folder read, and as which split (coco128's data.yaml names one for train and val)
    for split in SPLITS:
        folders = config.get(split) or []
        for folder in [folders] if isinstance(folders, str) else folders:
            directory = _split_folder(root, str(folder), builder)
            if not builder.holds(directory):  # outside the import: read as not there, its files never listed
                builder.skip(MISSING_SPLIT, f"{split}: {folder}")
            elif directory.resolve() in read:  # its images once, in the first split that names the folder
                builder.skip(REPEATED_SPLIT, f"{split}: {folder} (read as {read[directory.resolve()]})")
            elif directory.is_dir():
                read[directory.resolve()] = split
                _read_folder(directory, split, names, builder, root=root, keypoints=keypoints)
            elif directory.exists():
                raise ForkliftError(f"{source}: {split} folder {directory} is not a folder (lists are not supported)")
            else:
                builder.skip(MISSING_SPLIT, f"{split}: {folder}")


def _split_folder(root: Path, folder: str, builder: DatasetBuilder) -> Path:
    """A split's folder as data.yaml names it, relative to its root; by Ultralytics' rule, one named `../x` that is
    not there (in the import) is `x` (Roboflow's data.yaml names its splits `../train/images`, beside itself)."""
    directory = root / folder
    if folder.startswith("../") and not (builder.holds(directory) and directory.is_dir()):
        return root / folder[3:]
    return directory


def _read_folder(
    directory: Path, split: str, names: list[str], builder: DatasetBuilder, *, root: Path, keypoints: int
) -> None:
    """One split folder's images with their labels, then the label files no image there owns."""
    images = sorted(p for p in directory.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    for image in images:
        size = checked_size(image, builder, _shown(image, root))
        if size is None:
            continue
        boxes = _labels(_label_path(image), names, size, builder, root=root, keypoints=keypoints)
        if boxes is not None:
            builder.add_image(image.name, image, *size, split, boxes, str(image))
    owned = {_label_path(image) for image in images}
    for label in sorted(_as_labels(directory).rglob("*.txt")):
        if label not in owned and label.name != CLASSES_TXT:
            builder.skip(ORPHAN_ANNOTATION, _shown(label, root))


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """OUT/data.yaml, OUT/images/{split}/ and OUT/labels/{split}/ (an empty .txt for an image without boxes), for
    the splits that have images. YOLO trainers need a val split: a data set without one gets a seeded tenth of its
    images as val, and data.yaml and the summary say so."""
    detect_only(dataset, "YOLO")
    images, notes = labelled_images(dataset)
    folder = new_folder(out)
    splits, note = _splits_with_val(images)
    index = {name: i for i, name in enumerate(dataset.classes)}
    taken: set[str] = set()
    for image, split in zip(images, splits, strict=True):
        (folder / "images" / split).mkdir(parents=True, exist_ok=True)
        (folder / "labels" / split).mkdir(parents=True, exist_ok=True)
        name = place_image(dataset, image, folder / "images" / split, taken)
        lines = [
            f"{index[b.label]} {(b.x1 + b.x2) / 2 / image.width:.6f} {(b.y1 + b.y2) / 2 / image.height:.6f} "
            f"{(b.x2 - b.x1) / image.width:.6f} {(b.y2 - b.y1) / image.height:.6f}\n"
            for b in image.boxes
        ]
        (folder / "labels" / split / f"{Path(name).stem}.txt").write_text("".join(lines))
    present = [split for split in SPLITS if split in splits]
    config = {split: f"images/{split}" for split in present} | {"nc": len(index), "names": list(dataset.classes)}
    header = f"# {note}\n" if note else ""
    (folder / "data.yaml").write_text(header + yaml.safe_dump(config, sort_keys=False))
    boxes = sum(len(image.boxes) for image in images)
    notes += [note] if note else []
    notes += outlines_as_boxes(images)
    return ExportSummary(folder, "yolo", len(images), boxes, len(index), notes=notes)


def _splits_with_val(images: list[ImageRecord]) -> tuple[list[str], str]:
    """Each image's split in the export, and a note when val had to be made: a seeded tenth (at least one image)
    of the train images, when there are two or more."""
    splits = [image.split for image in images]
    train = [k for k, split in enumerate(splits) if split == "train"]
    if "val" in splits or len(train) < 2:
        return splits, ""
    chosen = random.Random(0).sample(train, max(1, round(len(train) / 10)))
    for k in chosen:
        splits[k] = "val"
    return splits, f"the data set has no val split: {len(chosen)} of its {len(train)} train images (seeded) are val"


def _config(source: Path) -> dict:
    try:
        config = yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ForkliftError(f"{source}: no such file") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ForkliftError(f"{source}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(config, dict):
        raise ForkliftError(f"{source}: expected a mapping with names and train/val/test folders")
    return config


def _names(value: object, where: str) -> list[str]:
    """names as a list, or as a mapping from 0..N-1 (Ultralytics writes both)."""
    if isinstance(value, dict) and sorted(value) == list(range(len(value))):
        value = [value[i] for i in range(len(value))]
    if not isinstance(value, list) or not value or not all(isinstance(name, str) and name for name in value):
        raise ForkliftError(f"{where}: 'names' must be a non-empty list of class names (or a mapping from 0)")
    return value


def _label_path(image: Path) -> Path:
    """Ultralytics' rule: the last images/ folder of the path becomes labels/, the suffix .txt."""
    return _as_labels(image).with_suffix(".txt")


def _as_labels(path: Path) -> Path:
    """path with its last images/ part made labels/ (unchanged without one: labels lie beside the images)."""
    parts = list(path.parts)
    if "images" in parts:
        parts[len(parts) - 1 - parts[::-1].index("images")] = "labels"
    return Path(*parts)


def _shown(path: Path, root: Path) -> str:
    """path as a report names it: relative to the data set's root where it lies inside it."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _keypoint_values(shape: object, where: str) -> int:
    """How many values follow a pose label's box: data.yaml's kpt_shape [keypoints, 2 or 3]; 0 without one."""
    if shape is None:
        return 0
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(v, int) and v > 0 for v in shape)):
        raise ForkliftError(f"{where}: kpt_shape must be [keypoints, 2 or 3], not {shape!r}")
    return shape[0] * shape[1]


def _labels(
    path: Path, names: list[str], size: tuple[int, int], builder: DatasetBuilder, *, root: Path, keypoints: int
) -> list[RawBox] | None:
    """An image's boxes in pixels (no label file means no boxes); lines that are malformed or name no class are
    skipped. None when the file cannot be read at all: its image is skipped rather than imported without boxes.
    A pose set's lines (`keypoints` values after the box, or none) are their boxes; a polygon line is no pose
    label."""
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows' Notepad) is not the class
    except (OSError, UnicodeDecodeError):
        builder.skip(UNREADABLE_LABELS, _shown(path, root))
        return None
    width, height = size
    boxes: list[RawBox] = []
    for number, line in enumerate(text.splitlines(), start=1):
        at = f"{_shown(path, root)}:{number}"
        fields = line.split()
        if not fields:
            continue
        try:
            index, values = int(fields[0]), [float(value) for value in fields[1:]]
        except ValueError:
            index, values = -1, []
        if keypoints and len(values) == 4 + keypoints:
            values = values[:4]
            builder.summary.posed += 1
        elif len(values) != 4 and (keypoints or len(values) < 6 or len(values) % 2):  # a pose set's box alone: a box
            builder.skip(MALFORMED_LINE, f"{at} {line.strip()[:40]!r}")
            continue
        if not 0 <= index < len(names):
            builder.skip(UNKNOWN_CLASS, f"{at} class {index}")
            continue
        boxes.append(_shape(names[index], values, width, height)._replace(where=at))
    return boxes


def _shape(label: str, values: list[float], width: int, height: int) -> RawBox:
    """A label line's box (cx cy w h) or polygon (x y pairs), as fractions of the image, in pixels."""
    if len(values) == 4:
        cx, cy, w, h = values
        return RawBox(label, (cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height)
    outline = tuple((values[k] * width, values[k + 1] * height) for k in range(0, len(values), 2))
    xs, ys = [x for x, _ in outline], [y for _, y in outline]
    return RawBox(label, min(xs), min(ys), max(xs), max(ys), polygon=outline)
