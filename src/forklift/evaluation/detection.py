"""Detection metrics: COCO mAP, per-class AP@.5 and PR curves through pycocotools, and precision, recall and a
confusion matrix at one operating threshold. They take ground truth and answers directly, so they can be
checked against pycocotools' own use and torchmetrics without a model."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pycocotools import mask as coco_mask
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from forklift.data.dataset import Box, ImageRecord
from forklift.vision.results import Detection

MATCH_IOU = 0.5  # a detection finds a box at this overlap, for precision/recall and the confusion matrix


@dataclass
class DetectionMetrics:
    """COCO's numbers for a detector, and what it does at one operating threshold."""

    map: float | None  # mAP@[.5:.95]; None when the split has no boxes
    map50: float | None
    map50_small: float | None  # mAP@.5 over objects under 32 x 32 px (COCO's "small" area); None: there are none
    ap50: dict[str, float | None]  # per class; None for a class without boxes in the split
    threshold: float
    precision: float | None  # None: nothing scored `threshold` or more (0 of 0 right is no precision)
    recall: float | None  # None: the split has no boxes
    confusion: list[list[int]]  # rows: true class, then background; columns: predicted class, then background
    pr_recall: list[float]  # the recall points of the curves
    pr_curves: dict[str, list[float] | None]  # per class: precision at each recall point (IoU .5, 100 detections)


def detection_metrics(
    images: Sequence[ImageRecord],
    detections: Sequence[Sequence[Detection]],
    classes: list[str],
    threshold: float = 0.25,
) -> DetectionMetrics:
    """COCO mAP, per-class AP@.5 and PR curves from pycocotools; precision, recall and confusion at `threshold`."""
    truth = coco_ground_truth(images, classes)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        cocoeval = COCOeval(truth, _coco_detections(truth, detections, classes), "bbox")
        cocoeval.evaluate()
        cocoeval.accumulate()
        cocoeval.summarize()
    # precision[T, R, K, A, M]: IoU .5 is T=0, area "all" is A=0 and "small" A=1, 100 detections per image is
    # M=-1; -1 = no boxes (of that class and area)
    curves = cocoeval.eval["precision"][0, :, :, 0, -1]
    small = cocoeval.eval["precision"][0, :, :, 1, -1]
    precision, recall, confusion = _operating_point(images, detections, classes, threshold)
    return DetectionMetrics(
        map=_defined(cocoeval.stats[0]),
        map50=_defined(cocoeval.stats[1]),
        map50_small=float(small[small > -1].mean()) if (small > -1).any() else None,
        ap50={name: _defined(curves[:, k].mean()) for k, name in enumerate(classes)},
        threshold=threshold,
        precision=precision,
        recall=recall,
        confusion=confusion,
        pr_recall=[float(r) for r in cocoeval.params.recThrs],
        pr_curves={name: curves[:, k].tolist() if curves[0, k] >= 0 else None for k, name in enumerate(classes)},
    )


def _defined(value: float) -> float | None:
    """pycocotools says -1 where there is nothing to measure; JSON says null."""
    return float(value) if value >= 0 else None


def _xywh(box: Box | Detection) -> list[float]:
    return [box.x1, box.y1, box.x2 - box.x1, box.y2 - box.y1]


def coco_ground_truth(images: Sequence[ImageRecord], classes: list[str]) -> COCO:
    """The images' boxes as an in-memory COCO data set: image k has id k + 1, class k has category id k + 1."""
    annotations: list[dict[str, Any]] = [
        {"image_id": image_id, "category_id": classes.index(box.label) + 1, "bbox": _xywh(box), "iscrowd": 0}
        for image_id, image in enumerate(images, start=1)
        for box in image.boxes
    ]
    for number, annotation in enumerate(annotations, start=1):
        annotation.update(id=number, area=annotation["bbox"][2] * annotation["bbox"][3])
    truth = COCO()
    truth.dataset = {
        "images": [{"id": i, "width": image.width, "height": image.height} for i, image in enumerate(images, start=1)],
        "categories": [{"id": k, "name": name} for k, name in enumerate(classes, start=1)],
        "annotations": annotations,
    }
    with contextlib.redirect_stdout(io.StringIO()):
        truth.createIndex()
    return truth


def coco_detections(detections: Sequence[Sequence[Detection]], classes: list[str]) -> list[dict[str, Any]]:
    """The detections as the result list `COCO.loadRes` takes, with the ids of `coco_ground_truth`."""
    return [
        {"image_id": image_id, "category_id": classes.index(d.label) + 1, "bbox": _xywh(d), "score": d.score}
        for image_id, found in enumerate(detections, start=1)
        for d in found
    ]


def _coco_detections(truth: COCO, detections: Sequence[Sequence[Detection]], classes: list[str]) -> COCO:
    """loadRes of the detections; it cannot take an empty list, so no detections is an empty COCO of the same images."""
    results = coco_detections(detections, classes)
    if results:
        return truth.loadRes(results)
    empty = COCO()
    empty.dataset = {**truth.dataset, "annotations": []}
    empty.createIndex()
    return empty


def _operating_point(
    images: Sequence[ImageRecord], detections: Sequence[Sequence[Detection]], classes: list[str], threshold: float
) -> tuple[float | None, float | None, list[list[int]]]:
    """Precision and recall of the detections scoring at least `threshold` (a box found by one of its own class),
    and the confusion matrix of the same detections matched whatever their class."""
    confusion = np.zeros((len(classes) + 1, len(classes) + 1), dtype=int)
    found_right = kept_count = truth_count = 0
    for image, found in zip(images, detections, strict=True):
        kept = [d for d in found if d.score >= threshold]
        found_right += len(_greedy_matches(image.boxes, kept, same_class=True))
        kept_count += len(kept)
        truth_count += len(image.boxes)
        pairs = _greedy_matches(image.boxes, kept, same_class=False)
        _add_confusion(
            confusion, [classes.index(b.label) for b in image.boxes], [classes.index(d.label) for d in kept], pairs
        )
    precision = found_right / kept_count if kept_count else None
    recall = found_right / truth_count if truth_count else None
    return precision, recall, confusion.tolist()


def _greedy_matches(truth: Sequence[Box], found: Sequence[Detection], same_class: bool) -> list[tuple[int, int]]:
    """(detection, truth box) pairs at IoU >= MATCH_IOU, as COCO matches: each detection, highest score first, takes
    the free box it overlaps most (of its own class when `same_class`), so no box is found twice."""
    if not truth or not found:
        return []
    overlap = coco_mask.iou(_boxes(found), _boxes(truth), [0] * len(truth))  # rows: detections, columns: truth
    if same_class:
        other_class = np.array([[d.label != t.label for t in truth] for d in found])
        overlap[other_class] = 0.0
    pairs = []
    for d in sorted(range(len(found)), key=lambda i: -found[i].score):
        best = int(overlap[d].argmax())
        if overlap[d, best] >= MATCH_IOU:
            pairs.append((d, best))
            overlap[:, best] = 0.0  # the box is taken
    return pairs


def _boxes(boxes: Sequence[Box | Detection]) -> np.ndarray:
    """x, y, width, height rows: COCO's boxes, as its IoU takes them."""
    return np.array([_xywh(b) for b in boxes], dtype=np.float64)


def _add_confusion(confusion: np.ndarray, truth: list[int], found: list[int], pairs: list[tuple[int, int]]) -> None:
    """Count one image: a pair at (true, predicted), a missed box at (true, background), an extra detection at
    (background, predicted); classes are indices, background the last row and column."""
    background = len(confusion) - 1
    for d, t in pairs:
        confusion[truth[t], found[d]] += 1
    missed = set(range(len(truth))) - {t for _, t in pairs}
    extra = set(range(len(found))) - {d for d, _ in pairs}
    for t in missed:
        confusion[truth[t], background] += 1
    for d in extra:
        confusion[background, found[d]] += 1
