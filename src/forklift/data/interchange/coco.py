"""COCO JSON: `images`, `annotations` (bbox [x, y, w, h] in pixels, and `segmentation`) and `categories`.

Detect reads the boxes and writes them, with their polygon as the `segmentation` of an object outlined by one (the
app's polygons). Segment reads each annotation's `segmentation` (polygons, or RLE with list or
compressed counts, decoded by pycocotools) and paints it into the image's mask in file order, later annotations
over earlier ones, crowd regions as ignore (255). It writes one annotation per class present in a mask: its
pixels as compressed RLE (exact, unlike polygons), with their bbox and area; ignore pixels have no COCO form and
are left out, so they read back as background.

An image's split is not part of COCO; forklift writes it as an extra `split` key that other readers ignore, and
reads it back when present (else the image is in the split its JSON's name says, "train" when it says none). So
too an image no person has labelled yet (`"unlabelled": true`: no annotations, and not "nothing here"), and a
model's unreviewed box (`"attributes": {"source": "auto", "model": ..., "confidence": ...}`, as CVAT marks
attributes).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from pycocotools import mask as coco_mask

from forklift.data.dataset import Dataset, FoundBy, ImageRecord
from forklift.data.interchange.common import (
    DatasetBuilder,
    ExportSummary,
    Outline,
    RawBox,
    SkipKind,
    checked_size,
    need,
    new_folder,
    place_image,
    read_json,
)
from forklift.data.masks import load_mask
from forklift.errors import ForkliftError
from forklift.vision.masks import IGNORE, decode_rle, encode_rle
from forklift.vocabulary import Task

ANNOTATIONS = "annotations.json"
Region = tuple[int, Any, str]  # segment: mask value, the annotation's segmentation, where it is in the file
UNKNOWN_IMAGE = SkipKind("annotation naming an unknown image id", "annotations naming unknown image ids")
UNKNOWN_CATEGORY = SkipKind("annotation naming an unknown category id", "annotations naming unknown category ids")
NO_REGION = SkipKind(
    "annotation with no region to paint (its segmentation empty: a box alone)",
    "annotations with no region to paint (their segmentation empty: boxes alone)",
)


def read(source: Path, builder: DatasetBuilder, images: Path) -> None:
    """Import a COCO JSON whose `file_name`s are relative to images; crowd boxes are skipped and counted (segment:
    crowd regions become ignore pixels). Annotations naming an image or category that is not there, and images
    missing on disk, are skipped and reported: real exports have both."""
    document = read_json(source)
    where = str(source)
    if not isinstance(document, dict):
        raise ForkliftError(f"{where}: expected a COCO JSON object")
    names = _categories(document, where)
    for ident in sorted(names):
        builder.add_class(names[ident])
    counted = Counter(names.values())
    builder.summary.alike = [f"{name} (ids {', '.join(str(k) for k in sorted(names) if names[k] == name)})"
                             for name, count in counted.items() if count > 1]  # fmt: skip
    segment = builder.task == Task.SEGMENT
    if segment and len(builder.classes) >= IGNORE:
        raise ForkliftError(f"{where}: {len(builder.classes)} classes do not fit 8-bit masks (at most {IGNORE - 1})")
    entries = _list(document, "images", where)
    images = _images_folder(source, images, entries, builder)
    ids = _Ids(_image_ids(entries, where), names)
    boxes, regions = _annotations(document, ids, builder, where)
    for i, entry in enumerate(entries):
        at = f"{where}: images[{i}]"
        ident, file_name = need(entry, "id", int, at), need(entry, "file_name", str, at)
        path = images / PurePosixPath(file_name)
        size = checked_size(path, builder, file_name, width=_pixels(entry, "width"), height=_pixels(entry, "height"))
        if size is None:
            continue
        width, height = size
        mask = _paint(regions.get(ident, []), width, height) if segment else None
        split = entry.get("split", builder.split)
        unlabelled = entry.get("unlabelled") is True
        builder.add_image(file_name, path, width, height, split, boxes.get(ident, []), at, mask=mask,
                          unlabelled=unlabelled)  # fmt: skip


def _image_ids(entries: list, where: str) -> set[int]:
    """The images' ids, none of them twice: an annotation names its image by id, and two images of one id would
    each get the other's boxes."""
    first: dict[int, int] = {}
    for i, entry in enumerate(entries):
        ident = need(entry, "id", int, f"{where}: images[{i}]")
        if ident in first:
            raise ForkliftError(f"{where}: images[{i}]: image id {ident} is used twice (images[{first[ident]}] too)")
        first[ident] = i
    return set(first)


@dataclass
class _Ids:
    """What an annotation may name: the images' ids, and category id -> class name."""

    images: set[Any]
    categories: dict[int, str]


def _images_folder(source: Path, images: Path, entries: list, builder: DatasetBuilder) -> Path:
    """The folder the `file_name`s are relative to: `images`; or, where that is the JSON's own folder and holds
    none of the first images named, the folder beside it that does, as other tools lay an export out (CVAT:
    annotations/instances_default.json with images/; a JSON at the top with images/), within what the import may
    read."""
    names = [e["file_name"] for e in entries[:20] if isinstance(e, dict) and isinstance(e.get("file_name"), str)]
    if images != source.parent or not names or any((images / PurePosixPath(n)).is_file() for n in names):
        return images
    for candidate in (images / "images", images.parent, images.parent / "images"):
        if builder.holds(candidate) and any((candidate / PurePosixPath(n)).is_file() for n in names):
            return candidate
    return images


def _categories(document: dict, where: str) -> dict[int, str]:
    names: dict[int, str] = {}
    for i, category in enumerate(_list(document, "categories", where)):
        at = f"{where}: categories[{i}]"
        ident, name = need(category, "id", int, at), need(category, "name", str, at)
        if ident in names:
            raise ForkliftError(f"{at}: category id {ident} is used twice")
        names[ident] = name
    return names


def _annotations(
    document: dict, ids: _Ids, builder: DatasetBuilder, where: str
) -> tuple[dict[int, list[RawBox]], dict[int, list[Region]]]:
    """Each image's boxes (detect) or regions (segment), by image id."""
    segment = builder.task == Task.SEGMENT
    boxes: dict[int, list[RawBox]] = defaultdict(list)
    regions: dict[int, list[Region]] = defaultdict(list)
    for i, annotation in enumerate(_list(document, "annotations", where)):
        at = f"{where}: annotations[{i}]"
        crowd = isinstance(annotation, dict) and bool(annotation.get("iscrowd"))
        if crowd and not segment:
            builder.summary.crowd += 1
            continue
        kept = _named(annotation, i, ids, builder, where)
        if kept is None:
            continue
        image, name = kept
        if segment:
            segmentation = need(annotation, "segmentation", (list, dict), at)
            if not _holds_outline(segmentation):  # a box alone (as a detect export writes one): no pixels to paint
                builder.skip(NO_REGION, _called(annotation, i))
                continue
            builder.summary.crowd += crowd
            value = IGNORE if crowd else builder.classes.index(name) + 1
            regions[image].append((value, segmentation, at))
            continue
        bbox = need(annotation, "bbox", list, at)
        if len(bbox) != 4 or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in bbox):
            raise ForkliftError(f"{at}: bbox must be four numbers [x, y, w, h], found {bbox!r}")
        x, y, w, h = (float(v) for v in bbox)
        segmentation = annotation.get("segmentation")
        outline, found_by = _outline(segmentation), _found_by(annotation.get("attributes"))
        builder.summary.boxed += outline is None and _holds_outline(segmentation)
        where = _called(annotation, i)
        boxes[image].append(RawBox(name, x, y, x + w, y + h, polygon=outline, found_by=found_by, where=where))
    return boxes, regions


def _called(annotation: dict, i: int) -> str:
    """An annotation as a report names it: by its id, else by its place in the file."""
    number = annotation.get("id")
    return f"id {number}" if isinstance(number, int) else f"annotations[{i}]"


def _holds_outline(segmentation: Any) -> bool:
    """Whether a segmentation outlines anything: an RLE mask, or a polygon with points (`[[]]` is none)."""
    return isinstance(segmentation, dict) or (isinstance(segmentation, list) and any(segmentation))


def _found_by(attributes: Any) -> FoundBy | None:
    """The model whose unreviewed label an annotation is, as forklift's export marks one; None for a person's."""
    if not isinstance(attributes, dict) or attributes.get("source") != "auto":
        return None
    model, confidence = attributes.get("model"), attributes.get("confidence")
    if not isinstance(model, str) or not model:
        return None
    if not (isinstance(confidence, int | float) and not isinstance(confidence, bool) and 0 <= confidence <= 1):
        confidence = None
    return FoundBy(model, None if confidence is None else float(confidence))


def _outline(segmentation: Any) -> Outline | None:
    """A detect annotation's outline: its segmentation when that is one polygon of three or more points (as the
    app writes a polygon); an object in several parts, an RLE mask or none at all leave the box alone."""
    if not isinstance(segmentation, list) or len(segmentation) != 1 or not isinstance(segmentation[0], list):
        return None
    flat = segmentation[0]
    if len(flat) < 6 or len(flat) % 2 or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in flat):
        return None
    return tuple((float(flat[k]), float(flat[k + 1])) for k in range(0, len(flat), 2))


def _named(annotation: Any, i: int, ids: _Ids, builder: DatasetBuilder, where: str) -> tuple[int, str] | None:
    """The annotation's image id and class name; None (and a skip recorded) when it names an unknown one."""
    at = f"{where}: annotations[{i}]"
    image, category = need(annotation, "image_id", int, at), need(annotation, "category_id", int, at)
    label = _called(annotation, i)
    if image not in ids.images:
        builder.skip(UNKNOWN_IMAGE, f"{label} -> image {image}")
        return None
    if category not in ids.categories:
        builder.skip(UNKNOWN_CATEGORY, f"{label} -> category {category}")
        return None
    return image, ids.categories[category]


def _pixels(entry: dict, key: str) -> int:
    """An image's width or height as the JSON gives it; 0 (read it from the file) when absent or not a number."""
    value = entry.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _paint(regions: list[Region], width: int, height: int) -> np.ndarray:
    """An image's label map: its annotations' regions painted in order over background."""
    labels = np.zeros((height, width), np.uint8)
    for value, segmentation, at in regions:
        labels[_region(segmentation, width, height, at)] = value
    return labels


def _region(segmentation: Any, width: int, height: int, at: str) -> np.ndarray:
    """A COCO segmentation (polygons [[x, y, ...], ...] or RLE) as an HxW bool mask, as COCO.annToMask decodes it."""
    if isinstance(segmentation, dict):
        size = segmentation.get("size")
        if size != [height, width] or not isinstance(segmentation.get("counts"), list | str):
            raise ForkliftError(f"{at}: RLE needs size [{height}, {width}] (its image's) and counts, found {size!r}")
        try:
            return decode_rle(segmentation)
        except (ValueError, TypeError, UnicodeError) as exc:
            raise ForkliftError(f"{at}: RLE cannot be decoded: {exc}") from None
    for polygon in segmentation:
        numbers = isinstance(polygon, list) and all(isinstance(v, int | float) for v in polygon)
        if not numbers or len(polygon) < 6 or len(polygon) % 2:
            raise ForkliftError(f"{at}: a polygon is a list of at least 3 x, y pairs, found {str(polygon)[:60]}")
    if not segmentation:
        return np.zeros((height, width), bool)
    rle = coco_mask.merge(coco_mask.frPyObjects(segmentation, height, width))
    return coco_mask.decode(rle).astype(bool)


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """OUT/annotations.json with category ids 1..N in class order, and OUT/images/ (file_name "images/...")."""
    if dataset.task == Task.CLASSIFY:
        raise ForkliftError(f"{dataset.root}: a classify data set has no boxes or masks to export to COCO")
    folder = new_folder(out)
    (folder / "images").mkdir()
    ids = {name: i + 1 for i, name in enumerate(dataset.classes)}
    taken: set[str] = set()
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for number, image in enumerate(dataset.images, start=1):
        name = place_image(dataset, image, folder / "images", taken)
        file_name = f"images/{name}"
        entry = {"id": number, "file_name": file_name, "width": image.width, "height": image.height}
        images.append(entry | {"split": image.split} | ({"unlabelled": True} if image.unlabelled else {}))
        found = _mask_annotations(dataset, image) if dataset.task == Task.SEGMENT else _box_annotations(image, ids)
        for annotation in found:
            annotations.append({"id": len(annotations) + 1, "image_id": number, **annotation, "iscrowd": 0})
    document = {
        "info": {"description": f"{dataset.title}, exported by forklift"},
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": [{"id": ids[name], "name": name, "supercategory": ""} for name in dataset.classes],
    }
    (folder / ANNOTATIONS).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return ExportSummary(folder, "coco", len(images), len(annotations), len(ids), task=dataset.task)


def _box_annotations(image: ImageRecord, ids: dict[str, int]) -> list[dict[str, Any]]:
    """A box as its bbox and area, its segmentation empty (COCO gives every annotation one; CVAT writes a box's
    so); an outlined object (a box with a polygon) with its polygon as its segmentation, its area the polygon's
    pixels as pycocotools rasterises them (what COCO's own annotations give)."""
    annotations = []
    for box in image.boxes:
        w, h = box.x2 - box.x1, box.y2 - box.y1
        annotation = {"category_id": ids[box.label], "bbox": [box.x1, box.y1, w, h], "area": w * h, "segmentation": []}
        if box.polygon:
            outline = [float(v) for point in box.polygon for v in point]
            rle = coco_mask.merge(coco_mask.frPyObjects([outline], image.height, image.width))
            annotation.update(segmentation=[outline], area=float(coco_mask.area(rle)))
        if box.found_by is not None:  # a model's unreviewed label, marked as CVAT marks attributes
            annotation["attributes"] = {"source": "auto", **box.found_by.to_json()}
        annotations.append(annotation)
    return annotations


def _mask_annotations(dataset: Dataset, image: ImageRecord) -> list[dict[str, Any]]:
    """One annotation per class in the image's mask: compressed RLE of its pixels, their bounds and count."""
    labels = load_mask(dataset, image)
    annotations = []
    for k in range(1, len(dataset.classes) + 1):
        inside = labels == k
        if not inside.any():
            continue
        ys, xs = np.nonzero(inside)
        bbox = [int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)]
        annotations.append(
            {"category_id": k, "segmentation": encode_rle(inside), "bbox": bbox, "area": int(inside.sum())}
        )
    return annotations


def _list(document: dict, key: str, where: str) -> list:
    value = document.get(key)
    if not isinstance(value, list):
        raise ForkliftError(f"{where}: {key!r} must be a list")
    return value
