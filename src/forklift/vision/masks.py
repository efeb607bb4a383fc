"""Label maps ⇄ COCO compressed RLE (pycocotools), the form a mask takes in the result JSON and in COCO files.

A label map is an HxW uint8 array: 0 is background, k is class k (1-based, the labels' order), 255 is ignore.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pycocotools import mask as coco_mask

from forklift.vision.results import Segment

IGNORE = 255  # a pixel no class is claimed for (crowd regions, unlabelled borders); metrics leave it out


def encode_rle(binary: np.ndarray) -> dict[str, Any]:
    """An HxW mask (any dtype, non-zero = inside) as {"size": [h, w], "counts": str}, COCO's compressed RLE."""
    rle = coco_mask.encode(np.asfortranarray(binary, dtype=np.uint8))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def decode_rle(rle: dict[str, Any]) -> np.ndarray:
    """COCO RLE (compressed str/bytes or uncompressed list counts) -> HxW bool mask."""
    height, width = rle["size"]
    if isinstance(rle["counts"], list):
        rle = coco_mask.frPyObjects(rle, height, width)
    elif isinstance(rle["counts"], str):
        rle = {"size": [height, width], "counts": rle["counts"].encode("ascii")}
    return coco_mask.decode(rle).astype(bool)


def segments_from_labels(labels: np.ndarray, names: list[str]) -> list[Segment]:
    """One Segment per class present in the label map (background and ignore are not classes), in class order."""
    counts = np.bincount(labels.ravel(), minlength=len(names) + 1)
    return [
        Segment(names[k - 1], int(counts[k]), encode_rle(labels == k)) for k in range(1, len(names) + 1) if counts[k]
    ]


def labels_from_segments(segments: list[Segment], names: list[str], height: int, width: int) -> np.ndarray:
    """The label map the segments describe (pixels of no segment are background); the inverse of the above."""
    labels = np.zeros((height, width), np.uint8)
    for segment in segments:
        labels[decode_rle(segment.mask)] = names.index(segment.label) + 1
    return labels
