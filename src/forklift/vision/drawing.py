"""Boxes drawn on images, and pictures written as files, so that what a detector found can be looked at.

The drawing is torchvision's `draw_bounding_boxes` (Pillow underneath) on RGB uint8 arrays: this module only
converts between the arrays the rest of forklift uses and torchvision's CHW tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.utils import draw_bounding_boxes, make_grid

Colour = str | tuple[int, int, int]


def draw_boxes(
    image: np.ndarray,
    boxes: Sequence[Sequence[float]],
    *,
    colours: Colour | Sequence[Colour],
    labels: Sequence[str] | None = None,
    width: int = 2,
) -> np.ndarray:
    """A copy of the RGB uint8 image [H, W, 3] with boxes (x1, y1, x2, y2 in pixels) outlined, each in its colour
    (or all in one), and each label written on a filled tag in the box's colour, readable on any background."""
    if not len(boxes):
        return image.copy()
    tensor = torch.tensor(image).permute(2, 0, 1)
    drawn = draw_bounding_boxes(
        tensor,
        torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
        labels=list(labels) if labels is not None else None,
        colors=colours if isinstance(colours, str | tuple) else list(colours),
        width=width,
        label_colors="black",
        fill_labels=labels is not None,
    )
    return drawn.permute(1, 2, 0).contiguous().numpy()


def write_image(image: np.ndarray, path: Path) -> Path:
    """The RGB uint8 image written to `path` (format from the suffix; JPEG at quality 92 to keep edges crisp)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path, quality=92)
    return path


def write_grid(images: Sequence[np.ndarray], path: Path, *, columns: int = 4, padding: int = 4) -> Path:
    """Equal-sized RGB uint8 images as one contact sheet, `columns` across on a white ground, written to `path`."""
    tensors = [torch.tensor(image).permute(2, 0, 1) for image in images]
    grid = make_grid(tensors, nrow=columns, padding=padding, pad_value=255)
    return write_image(grid.permute(1, 2, 0).numpy(), path)
