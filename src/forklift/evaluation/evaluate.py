"""How good a model is on a data set's split: runs the model on the split's usable images and measures the answers
with the task's metrics (`detection`, `classification`, `segmentation` beside this module).

`forklift eval` and training (on its best epoch) call `evaluate`; with `out`, the report (`report.py`) is written
as eval.json plus PNG pictures (confusion matrix, precision-recall curves) that a person can open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import Dataset, ImageRecord
from forklift.data.masks import load_mask
from forklift.errors import ForkliftError
from forklift.evaluation.classification import ClassificationMetrics, classification_metrics
from forklift.evaluation.detection import DetectionMetrics, detection_metrics
from forklift.evaluation.report import write_report
from forklift.evaluation.segmentation import SegmentationMetrics, segmentation_metrics
from forklift.model_files.model_dir import ModelDirectory, open_model_dir
from forklift.runtime.base import PredictOptions, Predictor
from forklift.runtime.load import load_predictor
from forklift.vision.masks import labels_from_segments
from forklift.vision.results import Segment
from forklift.vocabulary import ModelFormat, Precision, Runtime, Task

BATCH = 8  # images per predict call: batched inference without holding the whole split in memory
EVAL_CONF, EVAL_IOU = 0.001, 0.6  # what mAP is measured on: every box over a floor, NMS at 0.6 (as YOLO evaluates)


@dataclass
class EvalResult:
    """What `evaluate` measured, on what, and which files it wrote."""

    model: str
    data: str
    split: str
    task: Task
    classes: list[str]
    images: int
    skipped: int  # images of the split that `forklift data check` rejects
    metrics: DetectionMetrics | ClassificationMetrics | SegmentationMetrics
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # classes on one side only (matched by name)
    epoch: int | None = None  # the training epoch whose weights the model holds, when a training run evaluates it

    def to_json(self) -> dict[str, Any]:
        keys = ("model", "data", "split", "task", "classes", "images", "skipped", "notes", "epoch")
        head = {key: getattr(self, key) for key in keys}
        return {**head, **asdict(self.metrics)}


def evaluate(
    model_dir: Path,
    data: Path,
    *,
    split: str = "val",
    conf: float = EVAL_CONF,
    iou: float = EVAL_IOU,
    threshold: float = 0.25,
    runtime: Runtime | None = None,
    precision: Precision | None = None,
    out: Path | None = None,
    epoch: int | None = None,
) -> EvalResult:
    """Run the model on the split's usable images and measure it; with `out`, write eval.json and the pictures there.
    A training run gives the `epoch` its model holds, which eval.json says with the figures.

    The low default `conf` keeps the low-scoring detections that mAP needs to trace the whole precision-recall curve.
    """
    model = open_model_dir(model_dir)
    if model.format == ModelFormat.STYLE:  # its labels are none: "share no class" said the wrong thing
        raise ForkliftError(f"{model_dir}: a style model answers images, which eval has no measure of (it measures "
                            f"detectors, classifiers, segmenters and tabular models)")  # fmt: skip
    report = check_dataset(data)
    dataset = report.dataset
    notes = check_labels(model.labels, dataset.classes, model_dir, data)
    images = [image for image in usable_images(report) if image.split == split]
    skipped = sum(image.split == split and not image.unlabelled for image in dataset.images) - len(images)
    if not images:
        raise ForkliftError(
            f"{data}: no usable images in split {split!r} ({skipped} skipped by 'forklift data check'); --split names "
            f"another, or 'forklift data split {data} --val 0.2' makes a val split"
        )
    metrics = measure(
        model, dataset, images, conf=conf, iou=iou, threshold=threshold, runtime=runtime, precision=precision
    )
    names = (model.name, str(data), split, dataset.task, list(dataset.classes))
    result = EvalResult(*names, len(images), skipped, metrics, notes=notes, epoch=epoch)
    if out is not None:
        result.files = write_report(result, Path(out))
    return result


def measure(
    model: ModelDirectory,
    dataset: Dataset,
    images: list[ImageRecord],
    *,
    conf: float = EVAL_CONF,
    iou: float = EVAL_IOU,
    threshold: float = 0.25,
    runtime: Runtime | None = None,
    precision: Precision | None = None,
) -> DetectionMetrics | ClassificationMetrics | SegmentationMetrics:
    """The model's metrics on images of the data set that are already checked (training validates on the val
    images it checked once, rather than checking the whole set again each time)."""
    predictor = load_predictor(model, runtime, PredictOptions(conf=conf, iou=iou, precision=precision))
    if predictor.task != dataset.task:
        raise ForkliftError(
            f"{model.path}: a {predictor.task} model cannot be evaluated on {dataset.root}, a {dataset.task} set"
        )
    return measure_with(predictor, dataset, images, threshold=threshold)


def measure_with(
    predictor: Predictor, dataset: Dataset, images: list[ImageRecord], *, threshold: float = 0.25
) -> DetectionMetrics | ClassificationMetrics | SegmentationMetrics:
    """:func:`measure` with a predictor loaded already (with `measure`'s conf and iou): for a caller that measures
    one graph on many subsets of the images and would otherwise load (compile) it for each."""
    answers = _predict(predictor, dataset, images)
    if dataset.task == Task.DETECT:
        return detection_metrics(images, answers, dataset.classes, threshold)
    if dataset.task == Task.SEGMENT:
        return _segment_metrics(dataset, images, answers)
    return classification_metrics(images, answers, dataset.classes)


def check_labels(labels: list[str], classes: list[str], model_dir: Path, data: Path) -> list[str]:
    """The model's classes and the data set's, matched by name (an export lists them in the order a person made
    them, a model in its own): one line for each class on one side only, or an error when none is shared."""
    if not set(labels) & set(classes):
        raise ForkliftError(
            f"{model_dir}: the model's labels ({', '.join(labels[:5])}...) share no class with those of {data} "
            f"({', '.join(classes[:5])}...)"
        )
    notes = [f"class {name!r} of the data set is not a class of the model: it is never found" for name in classes
             if name not in labels]  # fmt: skip
    unknown = [name for name in labels if name not in classes]
    if unknown:
        notes.append(f"the model's classes {', '.join(map(repr, unknown))} are not in the data set: left out")
    return notes


def _predict(predictor: Predictor, dataset: Dataset, images: list[ImageRecord]) -> list[list[Any]]:
    """Each image's detections (or class scores, or segments), in the order of `images`."""
    answers: list[list[Any]] = []
    known = set(dataset.classes)  # the model's other classes are not measured (check_labels says so)
    with tqdm(total=len(images), desc="eval", unit="image", disable=None, leave=False) as progress:
        for start in range(0, len(images), BATCH):
            batch = images[start : start + BATCH]
            prediction = predictor.predict([(image.file, dataset.path(image).read_bytes()) for image in batch])
            for result in prediction.results:
                if result.error is not None:
                    raise ForkliftError(result.error)
                found = result.detections or result.classes or result.segments or []
                answers.append([answer for answer in found if answer.label in known])
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
