"""From decoded network rows to scored, labelled boxes: thresholds and per-class NMS (torchvision's)."""

from __future__ import annotations

import numpy as np
import torch
from torchvision.ops import batched_nms


def select_detections(
    rows: np.ndarray, conf: float, iou: float, input_width: int, input_height: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows `cx, cy, w, h, objectness, class probs...` (fractions of the input) -> boxes, scores, class ids.

    Score = objectness x class probability. Every (box, class) pair above `conf` is a candidate, as in
    Darknet, then NMS runs per class. Boxes come back as x1, y1, x2, y2 in network-input pixels, best first.
    """
    scores = rows[:, 4:5] * rows[:, 5:]
    box_index, class_ids = np.nonzero(scores > conf)
    if box_index.size == 0:
        return np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)
    chosen = rows[box_index]
    half_w, half_h = chosen[:, 2] / 2, chosen[:, 3] / 2
    boxes = np.stack(
        [
            (chosen[:, 0] - half_w) * input_width,
            (chosen[:, 1] - half_h) * input_height,
            (chosen[:, 0] + half_w) * input_width,
            (chosen[:, 1] + half_h) * input_height,
        ],
        axis=1,
    ).astype(np.float32)
    picked = scores[box_index, class_ids].astype(np.float32)
    keep = batched_nms(torch.from_numpy(boxes), torch.from_numpy(picked), torch.from_numpy(class_ids), iou).numpy()
    return boxes[keep], picked[keep], class_ids[keep]
