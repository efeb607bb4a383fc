"""COCO detection JSON: `images`, `annotations` (bbox [x, y, w, h] in pixels) and `categories` with any ids.

An image's split is not part of COCO; forklift writes it as an extra `split` key that other readers ignore, and
reads it back when present (else the image is "train").
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path, PurePosixPath

from forklift.data.dataset import Dataset
from forklift.data.formats.common import (
    DatasetBuilder,
    ExportSummary,
    RawBox,
    detect_only,
    image_size,
    need,
    new_folder,
    place_image,
    read_json,
)
from forklift.errors import ForkliftError

ANNOTATIONS = "annotations.json"


def read(source: Path, builder: DatasetBuilder, images: Path) -> None:
    """Import a COCO JSON whose `file_name`s are relative to images; crowd boxes are skipped and counted."""
    document = read_json(source)
    where = str(source)
    if not isinstance(document, dict):
        raise ForkliftError(f"{where}: expected a COCO JSON object")
    names: dict[int, str] = {}
    for i, category in enumerate(_list(document, "categories", where)):
        at = f"{where}: categories[{i}]"
        ident, name = need(category, "id", int, at), need(category, "name", str, at)
        if ident in names:
            raise ForkliftError(f"{at}: category id {ident} is used twice")
        names[ident] = name
    for ident in sorted(names):
        builder.add_class(names[ident])
    boxes: dict[int, list[RawBox]] = defaultdict(list)
    for i, annotation in enumerate(_list(document, "annotations", where)):
        at = f"{where}: annotations[{i}]"
        if isinstance(annotation, dict) and annotation.get("iscrowd"):
            builder.summary.crowd += 1
            continue
        category = need(annotation, "category_id", int, at)
        if category not in names:
            raise ForkliftError(f"{at}: category_id {category} is not among the categories")
        bbox = need(annotation, "bbox", list, at)
        if len(bbox) != 4 or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in bbox):
            raise ForkliftError(f"{at}: bbox must be four numbers [x, y, w, h], found {bbox!r}")
        x, y, w, h = (float(v) for v in bbox)
        boxes[need(annotation, "image_id", int, at)].append((names[category], x, y, x + w, y + h))
    entries = _list(document, "images", where)
    known = {entry.get("id") for entry in entries if isinstance(entry, dict)}
    orphans = sorted(set(boxes) - known)
    if orphans:
        raise ForkliftError(f"{where}: annotations name image_id {orphans[0]}, which is not among the images")
    for i, entry in enumerate(entries):
        at = f"{where}: images[{i}]"
        ident, file_name = need(entry, "id", int, at), need(entry, "file_name", str, at)
        path = images / PurePosixPath(file_name)
        width, height = entry.get("width"), entry.get("height")
        if not isinstance(width, int) or not isinstance(height, int):
            width, height = image_size(path, at)
        builder.add_image(file_name, path, width, height, entry.get("split", "train"), boxes.get(ident, []), at)


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """OUT/annotations.json with category ids 1..N in class order, and OUT/images/ (file_name "images/...")."""
    detect_only(dataset, "COCO")
    folder = new_folder(out)
    (folder / "images").mkdir()
    ids = {name: i + 1 for i, name in enumerate(dataset.classes)}
    taken: set[str] = set()
    images, annotations = [], []
    for number, image in enumerate(dataset.images, start=1):
        name = place_image(dataset, image, folder / "images", taken)
        file_name = f"images/{name}"
        images.append(
            {"id": number, "file_name": file_name, "width": image.width, "height": image.height, "split": image.split}
        )
        for box in image.boxes:
            w, h = box.x2 - box.x1, box.y2 - box.y1
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": number,
                    "category_id": ids[box.label],
                    "bbox": [box.x1, box.y1, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    document = {
        "info": {"description": f"{dataset.root.name}, exported by forklift"},
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": [{"id": ids[name], "name": name, "supercategory": ""} for name in dataset.classes],
    }
    (folder / ANNOTATIONS).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return ExportSummary(folder, "coco", len(images), len(annotations), len(ids))


def _list(document: dict, key: str, where: str) -> list:
    value = document.get(key)
    if not isinstance(value, list):
        raise ForkliftError(f"{where}: {key!r} must be a list")
    return value
