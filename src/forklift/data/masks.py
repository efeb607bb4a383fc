"""Segmentation masks on disk: single-channel 8-bit PNG label images, one per image, the image's size.

Pixel value 0 is background, k is classes[k - 1], 255 (IGNORE) is left out of training and metrics. Reading says
which problem a bad mask has, so `forklift data check` can report it and training can skip the image.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

from forklift.data.dataset import Dataset, ImageRecord
from forklift.errors import ForkliftError
from forklift.vision.masks import IGNORE

MISSING_MASK = "missing mask"
UNREADABLE_MASK = "unreadable mask"
MASK_SIZE = "mask size mismatch"
MASK_VALUES = "bad mask values"
SINGLE_CHANNEL = ("L", "P")  # gray, or palette indices (Pascal VOC's masks): both are the label values as stored


class MaskProblem(ForkliftError):
    """A mask that cannot be used, with the kind of problem (one of the constants above) for reports."""

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


def read_mask(path: Path, width: int, height: int, classes: int) -> np.ndarray:
    """The HxW uint8 label map of a mask file that must be width x height and hold values <= classes or 255.

    The size is checked from the PNG header, before decoding, so a mask cannot be a decompression bomb.
    """
    try:
        with Image.open(path) as image:
            if image.size != (width, height):
                found = f"{image.size[0]}x{image.size[1]}"
                raise MaskProblem(MASK_SIZE, f"{path}: the mask is {found}, its image {width}x{height}")
            if image.mode not in SINGLE_CHANNEL:
                raise MaskProblem(UNREADABLE_MASK, f"{path}: mode {image.mode}, not a single-channel 8-bit image")
            labels = np.array(image)
    except FileNotFoundError:
        raise MaskProblem(MISSING_MASK, f"{path}: no such mask file") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise MaskProblem(UNREADABLE_MASK, f"{path}: not a readable PNG mask: {exc}") from None
    bad = labels[(labels > classes) & (labels != IGNORE)]
    if bad.size:
        values = ", ".join(str(v) for v in np.unique(bad)[:5])
        raise MaskProblem(MASK_VALUES, f"{path}: values {values} are neither a class (1-{classes}) nor {IGNORE}")
    return labels


def load_mask(dataset: Dataset, image: ImageRecord) -> np.ndarray:
    """The label map of one image of a segment data set, checked against the image's size and the classes."""
    if image.mask is None:
        raise ForkliftError(f"{dataset.root}: {image.file} has no mask (is the data set's task segment?)")
    return read_mask(dataset.root / image.mask, image.width, image.height, len(dataset.classes))


def write_mask(path: Path, labels: np.ndarray) -> None:
    """Write a label map as a single-channel 8-bit PNG (creating its folder)."""
    if labels.ndim != 2 or labels.dtype != np.uint8:
        raise ForkliftError(f"{path}: a mask is an HxW uint8 array, not {labels.dtype} of shape {labels.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cv2.imencode(".png", labels, [cv2.IMWRITE_PNG_COMPRESSION, 3])[1].tobytes())
