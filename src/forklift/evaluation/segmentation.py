"""Semantic segmentation metrics from one pixel confusion matrix: per-class IoU, mIoU and pixel accuracy.

Classes here include background: index 0 is background, k is classes[k - 1], as in the masks. Pixels whose truth
is ignore (255) are left out. mIoU is the mean IoU over the classes present in the truth or in the predictions
(background included); a class absent from both has no IoU (None) and does not count, as in the mean of
torchmetrics' MulticlassJaccardIndex(average="macro") and of mmsegmentation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from forklift.errors import ForkliftError
from forklift.vision.masks import IGNORE

BACKGROUND = "background"


@dataclass
class SegmentationMetrics:
    """What a segmentation model gets right, pixel by pixel."""

    miou: float | None  # None when no pixel was counted
    iou: dict[str, float | None]  # background first, then the classes; None: absent from truth and prediction
    pixel_accuracy: float | None
    class_accuracy: dict[str, float | None]  # per class: the share of its true pixels predicted as it
    pixels: int  # pixels counted (truth not ignore)
    confusion: list[list[int]]  # pixels; rows: true class, columns: predicted class, background first


def confusion_matrix(truth: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """(classes + 1) x (classes + 1) counts of (true, predicted) pixel pairs of one image, through np.bincount."""
    if truth.shape != predicted.shape:
        raise ForkliftError(f"a predicted mask is {predicted.shape}, its truth {truth.shape}: sizes must match")
    n = classes + 1
    truth, predicted = truth.ravel().astype(np.int64), predicted.ravel().astype(np.int64)
    counted = truth != IGNORE
    truth, predicted = truth[counted], predicted[counted]
    for name, values in (("true", truth), ("predicted", predicted)):
        if values.size and (values.min() < 0 or values.max() >= n):
            outside = int(values[(values < 0) | (values >= n)][0])
            raise ForkliftError(f"a {name} mask holds {outside}, which is not a class (0-{classes}) or 255 in truth")
    return np.bincount(truth * n + predicted, minlength=n * n).reshape(n, n)


def segmentation_metrics(
    truth_masks: Iterable[np.ndarray], predicted_masks: Iterable[np.ndarray], classes: list[str]
) -> SegmentationMetrics:
    """Accumulate every image's confusion, then read IoU = TP / (TP + FP + FN) per class and the means from it.

    Takes iterables of HxW label maps, so a whole split is measured without holding its masks in memory.
    """
    n = len(classes) + 1
    confusion = np.zeros((n, n), np.int64)
    for truth, predicted in zip(truth_masks, predicted_masks, strict=True):
        confusion += confusion_matrix(truth, predicted, len(classes))
    return metrics_from_confusion(confusion, classes)


def metrics_from_confusion(confusion: np.ndarray, classes: list[str]) -> SegmentationMetrics:
    """The metrics of an accumulated (classes + 1) x (classes + 1) pixel confusion matrix."""
    names = [BACKGROUND, *classes]
    hits = np.diag(confusion).astype(np.float64)
    true_pixels, predicted_pixels = confusion.sum(axis=1), confusion.sum(axis=0)
    union = true_pixels + predicted_pixels - hits
    iou = {name: float(hits[k] / union[k]) if union[k] else None for k, name in enumerate(names)}
    present = [value for value in iou.values() if value is not None]
    pixels = int(confusion.sum())
    return SegmentationMetrics(
        miou=float(np.mean(present)) if present else None,
        iou=iou,
        pixel_accuracy=float(hits.sum() / pixels) if pixels else None,
        class_accuracy={
            name: float(hits[k] / true_pixels[k]) if true_pixels[k] else None for k, name in enumerate(names)
        },
        pixels=pixels,
        confusion=confusion.tolist(),
    )
