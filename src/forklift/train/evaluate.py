"""How good a model is on a data set's split: COCO mAP through pycocotools for detectors, top-1/top-5 for classifiers,
IoU per class and mIoU for segmentation (forklift.train.segment_eval).

`forklift eval` and training (on its best epoch) call `evaluate`; `detection_metrics`, `classification_metrics` and
`segmentation_metrics` take ground truth and answers directly, so they can be checked against pycocotools and
torchmetrics without a model. Everything is written as eval.json plus PNG pictures (confusion matrix,
precision-recall curves) that a person can open.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torchvision.ops import box_iou
from tqdm import tqdm

from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import Box, Dataset, ImageRecord
from forklift.data.masks import load_mask
from forklift.errors import ForkliftError
from forklift.formats.model_dir import ModelDirectory, open_model_dir
from forklift.runtime.base import PredictOptions, Predictor
from forklift.runtime.load import load_predictor
from forklift.train.segment_eval import BACKGROUND, SegmentationMetrics, segmentation_metrics
from forklift.vision.masks import labels_from_segments
from forklift.vision.results import ClassScore, Detection, Segment

MATCH_IOU = 0.5  # a detection finds a box at this overlap, for precision/recall and the confusion matrix
BATCH = 8  # images per predict call: batched inference without holding the whole split in memory


@dataclass
class DetectionMetrics:
    """COCO's numbers for a detector, and what it does at one operating threshold."""

    map: float | None  # mAP@[.5:.95]; None when the split has no boxes
    map50: float | None
    ap50: dict[str, float | None]  # per class; None for a class without boxes in the split
    threshold: float
    precision: float
    recall: float
    confusion: list[list[int]]  # rows: true class, then background; columns: predicted class, then background
    pr_recall: list[float]  # the recall points of the curves
    pr_curves: dict[str, list[float] | None]  # per class: precision at each recall point (IoU .5, 100 detections)


@dataclass
class ClassificationMetrics:
    """How often a classifier's first (or first five) answers hold the true class."""

    top1: float
    top5: float
    confusion: list[list[int]]  # rows: true class; columns: the top-1 answer


@dataclass
class EvalResult:
    """What `evaluate` measured, on what, and which files it wrote."""

    model: str
    data: str
    split: str
    task: str
    classes: list[str]
    images: int
    skipped: int  # images of the split that `forklift data check` rejects
    metrics: DetectionMetrics | ClassificationMetrics | SegmentationMetrics
    files: list[Path] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        head = {key: getattr(self, key) for key in ("model", "data", "split", "task", "classes", "images", "skipped")}
        return {**head, **asdict(self.metrics)}


def evaluate(
    model_dir: Path,
    data: Path,
    split: str = "val",
    conf: float = 0.001,
    iou: float = 0.6,
    threshold: float = 0.25,
    runtime: str | None = None,
    out: Path | None = None,
) -> EvalResult:
    """Run the model on the split's usable images and measure it; with `out`, write eval.json and the pictures there.

    The low default `conf` keeps the low-scoring detections that mAP needs to trace the whole precision-recall curve.
    """
    model = open_model_dir(model_dir)
    report = check_dataset(data)
    dataset = report.dataset
    _check_labels(model.labels, dataset.classes, model_dir, data)
    images = [image for image in usable_images(report) if image.split == split]
    skipped = sum(image.split == split for image in dataset.images) - len(images)
    if not images:
        raise ForkliftError(f"{data}: no usable images in split {split!r} ({skipped} skipped by 'forklift data check')")
    metrics = measure(model, dataset, images, conf, iou, threshold, runtime)
    result = EvalResult(
        model.name, str(data), split, dataset.task, list(dataset.classes), len(images), skipped, metrics
    )
    if out is not None:
        result.files = write_report(result, Path(out))
    return result


def measure(
    model: ModelDirectory,
    dataset: Dataset,
    images: list[ImageRecord],
    conf: float = 0.001,
    iou: float = 0.6,
    threshold: float = 0.25,
    runtime: str | None = None,
) -> DetectionMetrics | ClassificationMetrics | SegmentationMetrics:
    """The model's metrics on images of the data set that are already checked (training validates on the val
    images it checked once, rather than checking the whole set again each time)."""
    predictor = load_predictor(model, runtime, PredictOptions(conf=conf, iou=iou))
    if predictor.task != dataset.task:
        raise ForkliftError(
            f"{model.path}: a {predictor.task} model cannot be evaluated on {dataset.root}, a {dataset.task} set"
        )
    answers = _predict(predictor, dataset, images)
    if dataset.task == "detect":
        return detection_metrics(images, answers, dataset.classes, threshold)
    if dataset.task == "segment":
        return _segment_metrics(dataset, images, answers)
    return classification_metrics(images, answers, dataset.classes)


def _check_labels(labels: list[str], classes: list[str], model_dir: Path, data: Path) -> None:
    """The model's class k must be the data set's class k, or every number would be about the wrong class."""
    if labels == classes:
        return
    k = next(
        (k for k, (a, b) in enumerate(zip(labels, classes, strict=False)) if a != b), min(len(labels), len(classes))
    )
    said = [repr(names[k]) if k < len(names) else "nothing" for names in (labels, classes)]
    raise ForkliftError(
        f"{model_dir}: the model's labels do not match the classes of {data}: "
        f"class {k + 1} is {said[0]} in the model and {said[1]} in the data set"
    )


def _predict(predictor: Predictor, dataset: Dataset, images: list[ImageRecord]) -> list[list[Any]]:
    """Each image's detections (or class scores, or segments), in the order of `images`."""
    answers: list[list[Any]] = []
    with tqdm(total=len(images), desc="eval", unit="image", disable=None, leave=False) as progress:
        for start in range(0, len(images), BATCH):
            batch = images[start : start + BATCH]
            prediction = predictor.predict([(image.file, dataset.path(image).read_bytes()) for image in batch])
            for result in prediction.results:
                if result.error is not None:
                    raise ForkliftError(result.error)
                answers.append(result.detections or result.classes or result.segments or [])
            progress.update(len(batch))
    return answers


def _segment_metrics(
    dataset: Dataset, images: list[ImageRecord], answers: Sequence[Sequence[Segment]]
) -> SegmentationMetrics:
    """The segments' label maps against the masks, one image at a time."""
    classes = dataset.classes
    truth = (load_mask(dataset, image) for image in images)
    predicted = (
        labels_from_segments(list(found), classes, image.height, image.width)
        for image, found in zip(images, answers, strict=True)
    )
    return segmentation_metrics(truth, predicted, classes)


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
    # precision[T, R, K, A, M]: IoU .5 is T=0, area "all" is A=0, 100 detections per image is M=-1; -1 = no boxes
    curves = cocoeval.eval["precision"][0, :, :, 0, -1]
    precision, recall, confusion = _operating_point(images, detections, classes, threshold)
    return DetectionMetrics(
        map=_defined(cocoeval.stats[0]),
        map50=_defined(cocoeval.stats[1]),
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
    annotations = [
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
) -> tuple[float, float, list[list[int]]]:
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
    precision = found_right / kept_count if kept_count else 0.0
    recall = found_right / truth_count if truth_count else 0.0
    return precision, recall, confusion.tolist()


def _greedy_matches(truth: Sequence[Box], found: Sequence[Detection], same_class: bool) -> list[tuple[int, int]]:
    """(detection, truth box) pairs at IoU >= MATCH_IOU, as COCO matches: each detection, highest score first, takes
    the free box it overlaps most (of its own class when `same_class`), so no box is found twice."""
    if not truth or not found:
        return []
    overlap = box_iou(_boxes(found), _boxes(truth))  # rows: detections, columns: truth boxes
    if same_class:
        other_class = torch.tensor([[d.label != t.label for t in truth] for d in found])
        overlap[other_class] = 0.0
    pairs = []
    for d in sorted(range(len(found)), key=lambda i: -found[i].score):
        best = int(overlap[d].argmax())
        if overlap[d, best] >= MATCH_IOU:
            pairs.append((d, best))
            overlap[:, best] = 0.0  # the box is taken
    return pairs


def _boxes(boxes: Sequence[Box | Detection]) -> torch.Tensor:
    return torch.tensor([[b.x1, b.y1, b.x2, b.y2] for b in boxes], dtype=torch.float64)


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


def classification_metrics(
    images: Sequence[ImageRecord], answers: Sequence[Sequence[ClassScore]], classes: list[str]
) -> ClassificationMetrics:
    """Top-1 and top-5 accuracy over the images, and the confusion of the true class with the top-1 answer."""
    confusion = np.zeros((len(classes), len(classes)), dtype=int)
    top1 = top5 = 0
    for image, scores in zip(images, answers, strict=True):
        ranked = [s.label for s in sorted(scores, key=lambda s: -s.score)]
        top1 += ranked[:1] == [image.label]
        top5 += image.label in ranked[:5]
        if ranked:
            confusion[classes.index(image.label), classes.index(ranked[0])] += 1
    return ClassificationMetrics(top1=top1 / len(images), top5=top5 / len(images), confusion=confusion.tolist())


def write_report(result: EvalResult, out: Path) -> list[Path]:
    """eval.json, confusion.png and (for a detector) pr-curves.png in `out`; returns their paths.

    A segmentation confusion counts pixels: it is drawn with each row divided by its sum (the share of the true
    class's pixels predicted as each class), while eval.json keeps the counts."""
    out.mkdir(parents=True, exist_ok=True)
    metrics = result.metrics
    confusion = np.array(metrics.confusion)
    names = result.classes
    if isinstance(metrics, DetectionMetrics):
        names = [*result.classes, BACKGROUND]
    elif isinstance(metrics, SegmentationMetrics):
        names = [BACKGROUND, *result.classes]
        confusion = np.round(confusion / np.maximum(confusion.sum(axis=1, keepdims=True), 1), 2)
    written = [_plot_confusion(confusion, names, out / "confusion.png")]
    if isinstance(metrics, DetectionMetrics):
        written.append(_plot_pr_curves(metrics, out / "pr-curves.png"))
    report = out / "eval.json"
    report.write_text(json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8")
    return [report, *written]


def _plot_confusion(confusion: np.ndarray, names: list[str], path: Path) -> Path:
    size = 2.0 + 0.6 * len(names)
    figure = Figure(figsize=(size, size))
    axes = figure.subplots()
    axes.imshow(confusion, cmap="Blues")
    axes.set_xticks(range(len(names)), names, rotation=45, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    for (row, column), count in np.ndenumerate(confusion):
        dark = count > confusion.max() / 2
        axes.text(column, row, str(count), ha="center", va="center", fontsize=8, color="white" if dark else "black")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path


def _plot_pr_curves(metrics: DetectionMetrics, path: Path) -> Path:
    figure = Figure(figsize=(7, 5))
    axes = figure.subplots()
    for name, curve in metrics.pr_curves.items():
        if curve is not None:
            axes.plot(metrics.pr_recall, curve, label=f"{name} (AP@.5 {metrics.ap50[name]:.3f})")
    axes.set_xlabel("recall")
    axes.set_ylabel("precision")
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1.05)
    axes.set_title(f"precision-recall at IoU 0.5 (mAP@.5 {metrics.map50 or 0:.3f})")
    axes.grid(True, alpha=0.3)
    if any(curve is not None for curve in metrics.pr_curves.values()):
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path
