"""What a data set holds, in numbers a person checks before training: is a class rare, are the boxes tiny?

For segment data sets the masks are read: images showing each class, and each class's share of the pixels.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from forklift.data.dataset import SPLITS, Dataset, ImageRecord
from forklift.data.masks import load_mask
from forklift.vision.masks import IGNORE
from forklift.vocabulary import Task

PERCENTILES = (5, 25, 50, 75, 95)


def dataset_stats(dataset: Dataset) -> dict[str, Any]:
    """Images per split, objects (boxes, labels for classify, images showing the class for segment) per class and
    split, boxes per image, box sizes relative to their image (percentiles of width / W and height / H), the
    pixel share of each class (segment) and image sizes."""
    pixels = _pixel_counts(dataset) if dataset.task == Task.SEGMENT else {}
    per_class: dict[str, dict[str, int]] = {
        split: _class_counts(dataset, [i for i in dataset.images if i.split == split], pixels) for split in SPLITS
    }
    per_class["all"] = _class_counts(dataset, dataset.images, pixels)
    stats: dict[str, Any] = {
        "task": dataset.task,
        "images": {split: sum(1 for i in dataset.images if i.split == split) for split in SPLITS},
        "objects_per_class": per_class,
        "image_sizes": dict(Counter(f"{i.width}x{i.height}" for i in dataset.images).most_common()),
    }
    stats["images"]["all"] = len(dataset.images)
    if pixels:
        total = np.sum(list(pixels.values()), axis=0)
        names = ["background", *dataset.classes]
        share = {name: round(float(total[k] / max(total.sum(), 1)), 6) for k, name in enumerate(names)}
        stats["pixel_share"] = {**share, "ignore": round(float(total[IGNORE] / max(total.sum(), 1)), 6)}
    if dataset.task == Task.DETECT:
        counts = np.array([len(i.boxes) for i in dataset.images])
        stats["boxes_per_image"] = (
            {"min": int(counts.min()), "mean": round(float(counts.mean()), 3), "max": int(counts.max())}
            if len(counts)
            else {}
        )
        stats["box_size"] = {
            "width": _percentiles([(b.x2 - b.x1) / i.width for i in dataset.images for b in i.boxes]),
            "height": _percentiles([(b.y2 - b.y1) / i.height for i in dataset.images for b in i.boxes]),
        }
    return stats


def _pixel_counts(dataset: Dataset) -> dict[str, np.ndarray]:
    """Each image's count of every mask value (0..255), by file."""
    return {i.file: np.bincount(load_mask(dataset, i).ravel(), minlength=IGNORE + 1) for i in dataset.images}


def _class_counts(dataset: Dataset, images: list[ImageRecord], pixels: dict[str, np.ndarray]) -> dict[str, int]:
    if dataset.task == Task.SEGMENT:
        return {name: sum(int(pixels[i.file][k] > 0) for i in images) for k, name in enumerate(dataset.classes, 1)}
    labels = Counter(
        [b.label for i in images for b in i.boxes] if dataset.task == Task.DETECT else [i.label for i in images]
    )
    return {name: labels[name] for name in dataset.classes}


def _percentiles(fractions: list[float]) -> dict[str, float]:
    if not fractions:
        return {}
    values = np.percentile(fractions, PERCENTILES)
    return {f"p{p}": round(float(v), 4) for p, v in zip(PERCENTILES, values, strict=True)}


def print_stats(stats: dict[str, Any]) -> None:
    """The numbers as a few aligned tables."""
    columns = [*SPLITS, "all"]
    print(f"{'':<14}" + "".join(f"{c:>8}" for c in columns))
    print(f"{'images':<14}" + "".join(f"{stats['images'][c]:>8}" for c in columns))
    for name in stats["objects_per_class"]["all"]:
        print(f"{name:<14}" + "".join(f"{stats['objects_per_class'][c][name]:>8}" for c in columns))
    if stats["task"] == Task.DETECT and stats["boxes_per_image"]:
        per_image = stats["boxes_per_image"]
        print(f"boxes per image: min {per_image['min']}, mean {per_image['mean']}, max {per_image['max']}")
        for axis, values in stats["box_size"].items():
            text = ", ".join(f"{p} {v:.3f}" for p, v in values.items())
            print(f"box {axis} / image {axis}: {text}")
    if "pixel_share" in stats:
        print("pixel share: " + ", ".join(f"{name} {share:.2%}" for name, share in stats["pixel_share"].items()))
    print("image sizes: " + ", ".join(f"{size} ({n})" for size, n in stats["image_sizes"].items()))
