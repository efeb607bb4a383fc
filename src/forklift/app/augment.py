"""Augmented copies of labelled images, as PowerAI Vision offered: flip, rotate, blur, sharpen, colour, crop,
noise (albumentations). Each variant is a new image whose boxes (as bounding boxes) and polygons (as key points)
went through the same transform, marked as derived from its source.

Boxes and polygons are in edge coordinates (pixel i spans [i, i + 1]). albumentations flips bounding boxes that way
(x' = W - x) but key points as pixel indices (x' = W - 1 - x), which would put a flipped polygon a pixel off its
object and its own box; so the flip is done here, before the other operations, mirroring pixels and points alike.
The pixel-only operations (blur, sharpen, colour, noise) leave boxes and polygons as they were."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import albumentations as A
import numpy as np
from PIL import Image as PILImage
from PIL import ImageOps

from forklift.vision.images import to_rgb8

OPERATIONS = ("flip", "rotate", "blur", "sharpen", "colour", "crop", "noise")
MIN_VISIBLE = 0.3  # of a box's area that must stay in the frame for the box to be kept


@dataclass(frozen=True)
class Shape:
    kind: str  # box | polygon
    label: str
    points: list[Any]


def pipeline(operations: list[str], width: int, height: int) -> A.Compose:
    """The operations in this order, each applied (with its own random strength), boxes and points following;
    all but the flip (`flipped`)."""
    steps = {
        "rotate": A.Affine(rotate=(-15, 15), p=1, fit_output=False),
        "blur": A.GaussianBlur(blur_limit=(3, 7), p=1),
        "sharpen": A.Sharpen(alpha=(0.2, 0.5), p=1),
        "colour": A.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05, p=1),
        "crop": A.RandomSizedBBoxSafeCrop(height=height, width=width, erosion_rate=0.0, p=1),
        "noise": A.GaussNoise(std_range=(0.02, 0.08), p=1),
    }
    return A.Compose(
        [steps[name] for name in OPERATIONS if name in operations and name in steps],
        bbox_params=A.BboxParams(format="pascal_voc", label_fields=["box_labels"], min_visibility=MIN_VISIBLE,
                                 clip=True),
        keypoint_params=A.KeypointParams(format="xy", label_fields=["point_owners"], remove_invisible=False),
    )  # fmt: skip


def augmented(content: bytes, shapes: list[Shape], operations: list[str], seed: int) -> tuple[bytes, list[Shape]]:
    """One variant of the image (JPEG) and its shapes, by a random non-empty subset of `operations` drawn from
    `seed`; a box mostly cut off is dropped, a polygon left with fewer than 3 distinct points too."""
    with PILImage.open(io.BytesIO(content)) as opened:
        pixels = to_rgb8(ImageOps.exif_transpose(opened))
    height, width = pixels.shape[:2]
    boxes = [s for s in shapes if s.kind == "box"]
    polygons = [s for s in shapes if s.kind == "polygon"]
    owners = [k for k, s in enumerate(polygons) for _ in s.points]
    rng = np.random.default_rng(seed)  # each variant: a non-empty random subset of the operations asked for
    chosen = [str(name) for name in rng.choice(operations, rng.integers(1, len(operations) + 1), replace=False)]
    if "flip" in chosen:
        pixels, boxes, polygons = flipped(pixels, boxes, polygons)
    points = [(x, y) for s in polygons for x, y in s.points]
    compose = pipeline(chosen, width, height)
    compose.set_random_seed(seed)
    out = compose(image=pixels, bboxes=[s.points for s in boxes], box_labels=[s.label for s in boxes],
                  keypoints=points, point_owners=owners)  # fmt: skip
    image = out["image"]
    h, w = image.shape[:2]
    result = [Shape("box", label, [round(float(v), 1) for v in box])
              for box, label in zip(out["bboxes"], out["box_labels"], strict=True)]  # fmt: skip
    moved: dict[int, list[list[float]]] = {}
    for (x, y), owner in zip(out["keypoints"], out["point_owners"], strict=True):
        moved.setdefault(int(owner), []).append(
            [round(min(max(float(x), 0), w), 1), round(min(max(float(y), 0), h), 1)]
        )
    for owner, polygon in sorted(moved.items()):
        if len({tuple(p) for p in polygon}) >= 3:
            result.append(Shape("polygon", polygons[owner].label, polygon))
    buffer = io.BytesIO()
    PILImage.fromarray(image).save(buffer, "JPEG", quality=92)
    return buffer.getvalue(), result


def flipped(
    pixels: np.ndarray, boxes: list[Shape], polygons: list[Shape]
) -> tuple[np.ndarray, list[Shape], list[Shape]]:
    """The image mirrored left to right, with its boxes and polygons: x' = W - x, in edge coordinates."""
    width = pixels.shape[1]
    mirrored = [Shape("box", s.label, [width - s.points[2], s.points[1], width - s.points[0], s.points[3]])
                for s in boxes]  # fmt: skip
    turned = [Shape("polygon", s.label, [[width - x, y] for x, y in s.points]) for s in polygons]
    return np.ascontiguousarray(pixels[:, ::-1]), mirrored, turned
