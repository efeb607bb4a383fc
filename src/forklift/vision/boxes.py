"""From decoded network rows to scored, labelled boxes: thresholds and per-class NMS (OpenCV's, on NumPy arrays:
serving and predicting an exported model need no PyTorch)."""

from __future__ import annotations

from typing import TypeVar

import cv2
import numpy as np

ONE_OBJECT_IOU = 0.6  # boxes of different classes overlapping more are one object: only the surest is kept
Found = TypeVar("Found", bound=tuple)  # (label, score, corners, ...anything carried along)


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
    keep = per_class_nms(boxes, picked, class_ids, iou)
    return boxes[keep], picked[keep], class_ids[keep]


def per_class_nms(corners: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float) -> np.ndarray:
    """Indices of the boxes (x1, y1, x2, y2) that no surer box of their class overlaps by more than `iou`, best
    first."""
    if len(corners) == 0:
        return np.zeros(0, np.int64)
    rects, confidences, ids = _widths_and_heights(corners), scores.astype(np.float32), classes.astype(np.int32)
    kept = cv2.dnn.NMSBoxesBatched(rects, confidences, ids, -1.0, iou)  # type: ignore[arg-type]  # stubs: lists
    return np.asarray(kept, dtype=np.int64).reshape(-1)


def _widths_and_heights(corners: np.ndarray) -> np.ndarray:
    """x1, y1, x2, y2 rows as OpenCV's x, y, width, height (float64: its Rect2d)."""
    boxes = corners.astype(np.float64)
    boxes[:, 2:] -= boxes[:, :2]
    return boxes


def one_box_per_object(boxes: list[Found], iou: float = ONE_OBJECT_IOU) -> list[Found]:
    """(label, score, corners, ...) boxes without those that overlap a surer box of another class by more than
    `iou`: a detector suppresses within a class only, while a person labels an object with one class (auto labels
    and the app's try-an-image answer one box an object)."""
    if len(boxes) < 2:
        return boxes
    corners = np.array([box[2] for box in boxes], dtype=np.float64)
    scores = np.array([float(box[1]) for box in boxes], dtype=np.float32)
    kept = per_class_nms(corners, scores, np.zeros(len(boxes), np.int32), iou)
    return [boxes[k] for k in kept.tolist()]
