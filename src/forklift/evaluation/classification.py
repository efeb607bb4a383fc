"""Classification metrics: top-1 and top-5 accuracy and the confusion of the true class with the first answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from forklift.data.dataset import ImageRecord
from forklift.errors import ForkliftError
from forklift.vision.results import ClassScore


@dataclass
class ClassificationMetrics:
    """How often a classifier's first (or first five) answers hold the true class."""

    top1: float
    top5: float
    confusion: list[list[int]]  # rows: true class; columns: the top-1 answer


def classification_metrics(
    images: Sequence[ImageRecord], answers: Sequence[Sequence[ClassScore]], classes: list[str]
) -> ClassificationMetrics:
    """Top-1 and top-5 accuracy over the images, and the confusion of the true class with the top-1 answer."""
    confusion = np.zeros((len(classes), len(classes)), dtype=int)
    top1 = top5 = 0
    for image, scores in zip(images, answers, strict=True):
        if image.label is None:
            raise ForkliftError(f"{image.file}: has no label to score a classifier's answers against")
        ranked = [s.label for s in sorted(scores, key=lambda s: -s.score)]
        top1 += ranked[:1] == [image.label]
        top5 += image.label in ranked[:5]
        if ranked:
            confusion[classes.index(image.label), classes.index(ranked[0])] += 1
    return ClassificationMetrics(top1=top1 / len(images), top5=top5 / len(images), confusion=confusion.tolist())
