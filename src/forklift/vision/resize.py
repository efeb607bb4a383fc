"""Fitting an image to a network input: `stretch` or `letterbox`, and the map back to original pixels."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from forklift.vocabulary import ResizeMode

LETTERBOX_FILL = 127  # Darknet pads with 0.5 gray


@dataclass(frozen=True)
class Placement:
    """Where the original image sits in the network input: input = original * scale + pad."""

    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float
    width: int  # of the original image
    height: int

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """Nx4 x1,y1,x2,y2 in network-input pixels -> pixels of the original image, clipped to it."""
        out = np.empty_like(boxes, dtype=np.float64)
        out[:, 0::2] = (boxes[:, 0::2] - self.pad_x) / self.scale_x
        out[:, 1::2] = (boxes[:, 1::2] - self.pad_y) / self.scale_y
        out[:, 0::2] = out[:, 0::2].clip(0, self.width)
        out[:, 1::2] = out[:, 1::2].clip(0, self.height)
        return out


def stretch(image: np.ndarray, width: int, height: int) -> tuple[np.ndarray, Placement]:
    """Resize to exactly width x height, ignoring the aspect ratio (Darknet's own predict does this)."""
    h, w = image.shape[:2]
    resized = cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)
    return resized, Placement(width / w, height / h, 0.0, 0.0, w, h)


def letterbox(image: np.ndarray, width: int, height: int) -> tuple[np.ndarray, Placement]:
    """Keep the aspect ratio, centre the image and pad the rest with gray."""
    h, w = image.shape[:2]
    scale = min(width / w, height / h)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    canvas = np.full((height, width, image.shape[2]), LETTERBOX_FILL, dtype=image.dtype)
    pad_x, pad_y = (width - new_w) // 2, (height - new_h) // 2
    canvas[pad_y : pad_y + new_h, pad_x : pad_x + new_w] = resized
    return canvas, Placement(new_w / w, new_h / h, float(pad_x), float(pad_y), w, h)


RESIZERS = {ResizeMode.LETTERBOX: letterbox, ResizeMode.STRETCH: stretch}


def fit(image: np.ndarray, width: int, height: int, mode: ResizeMode) -> tuple[np.ndarray, Placement]:
    return RESIZERS[mode](image, width, height)
