"""YOLO (Darknet / Ultralytics) txt labels: data.yaml names the classes and each split's image folder; beside
images/.../a.png lies labels/.../a.txt with one `class cx cy w h` line per box, normalised to [0, 1].
"""

from __future__ import annotations

from pathlib import Path

import yaml

from forklift.data.dataset import SPLITS, Dataset
from forklift.data.formats.common import (
    IMAGE_SUFFIXES,
    DatasetBuilder,
    ExportSummary,
    RawBox,
    detect_only,
    image_size,
    new_folder,
    place_image,
)
from forklift.errors import ForkliftError


def read(source: Path, builder: DatasetBuilder) -> None:
    """Import from a data.yaml; sizes come from the image files' headers since the labels are normalised."""
    config = _config(source)
    names = _names(config.get("names"), str(source))
    for name in names:
        builder.add_class(name)
    root = source.parent / str(config.get("path") or "")
    for split in SPLITS:
        folders = config.get(split) or []
        for folder in [folders] if isinstance(folders, str) else folders:
            directory = root / str(folder)
            if not directory.is_dir():
                raise ForkliftError(f"{source}: {split} folder {directory} does not exist (lists are not supported)")
            for image in sorted(p for p in directory.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES):
                width, height = image_size(image, str(image))
                boxes = _labels(_label_path(image), names, width, height)
                builder.add_image(image.name, image, width, height, split, boxes, str(image))


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """OUT/data.yaml, OUT/images/{split}/ and OUT/labels/{split}/ (an empty .txt for an image without boxes)."""
    detect_only(dataset, "YOLO")
    folder = new_folder(out)
    for split in SPLITS:
        (folder / "images" / split).mkdir(parents=True)
        (folder / "labels" / split).mkdir(parents=True)
    index = {name: i for i, name in enumerate(dataset.classes)}
    taken: set[str] = set()
    for image in dataset.images:
        name = place_image(dataset, image, folder / "images" / image.split, taken)
        lines = [
            f"{index[b.label]} {(b.x1 + b.x2) / 2 / image.width:.6f} {(b.y1 + b.y2) / 2 / image.height:.6f} "
            f"{(b.x2 - b.x1) / image.width:.6f} {(b.y2 - b.y1) / image.height:.6f}\n"
            for b in image.boxes
        ]
        (folder / "labels" / image.split / f"{Path(name).stem}.txt").write_text("".join(lines))
    config = {split: f"images/{split}" for split in SPLITS} | {"nc": len(index), "names": list(dataset.classes)}
    (folder / "data.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    boxes = sum(len(image.boxes) for image in dataset.images)
    return ExportSummary(folder, "yolo", len(dataset.images), boxes, len(index))


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
    parts = list(image.parts)
    if "images" in parts:
        parts[len(parts) - 1 - parts[::-1].index("images")] = "labels"
    return Path(*parts).with_suffix(".txt")


def _labels(path: Path, names: list[str], width: int, height: int) -> list[RawBox]:
    """An image's boxes in pixels; no label file means no boxes."""
    if not path.is_file():
        return []
    boxes: list[RawBox] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) != 5:
                raise ValueError
            index, cx, cy, w, h = int(fields[0]), *(float(v) for v in fields[1:])
        except ValueError:
            raise ForkliftError(f"{path}:{number}: expected 'class cx cy w h', found {line.strip()!r}") from None
        if not 0 <= index < len(names):
            raise ForkliftError(f"{path}:{number}: class {index} is not in 0..{len(names) - 1}")
        boxes.append(
            (names[index], (cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height)
        )
    return boxes
