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
from forklift.vocabulary import Precision, Runtime, Task

BATCH = 8  # images per predict call: batched inference without holding the whole split in memory


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

    def to_json(self) -> dict[str, Any]:
        head = {key: getattr(self, key) for key in ("model", "data", "split", "task", "classes", "images", "skipped")}
        return {**head, **asdict(self.metrics)}


def evaluate(
    model_dir: Path,
    data: Path,
    *,
    split: str = "val",
    conf: float = 0.001,
    iou: float = 0.6,
    threshold: float = 0.25,
    runtime: Runtime | None = None,
    precision: Precision | None = None,
    out: Path | None = None,
) -> EvalResult:
    """Run the model on the split's usable images and measure it; with `out`, write eval.json and the pictures there.

    The low default `conf` keeps the low-scoring detections that mAP needs to trace the whole precision-recall curve.
    """
    model = open_model_dir(model_dir)
    report = check_dataset(data)
    dataset = report.dataset
    check_labels(model.labels, dataset.classes, model_dir, data)
    images = [image for image in usable_images(report) if image.split == split]
    skipped = sum(image.split == split for image in dataset.images) - len(images)
    if not images:
        raise ForkliftError(f"{data}: no usable images in split {split!r} ({skipped} skipped by 'forklift data check')")
    metrics = measure(
        model, dataset, images, conf=conf, iou=iou, threshold=threshold, runtime=runtime, precision=precision
    )
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
    *,
    conf: float = 0.001,
    iou: float = 0.6,
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
    answers = _predict(predictor, dataset, images)
    if dataset.task == Task.DETECT:
        return detection_metrics(images, answers, dataset.classes, threshold)
    if dataset.task == Task.SEGMENT:
        return _segment_metrics(dataset, images, answers)
    return classification_metrics(images, answers, dataset.classes)


def check_labels(labels: list[str], classes: list[str], model_dir: Path, data: Path) -> None:
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
