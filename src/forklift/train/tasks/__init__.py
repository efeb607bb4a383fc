"""Training tasks, one plug-in per kind of data set: `detect` (Darknet YOLO), `classify` (Darknet classifier),
`segment` (torchvision architectures), on the base in `base.py`. `make_task` picks the plug-in by the data set's
task; the plug-ins import the base, never the other way round."""

from __future__ import annotations

from forklift.data.dataset import Dataset
from forklift.errors import ForkliftError
from forklift.train.tasks.base import NetworkSource, TrainingTask
from forklift.train.tasks.classify import ClassificationTask
from forklift.train.tasks.detect import DetectionTask
from forklift.train.tasks.segment import SegmentationTask
from forklift.vocabulary import Task

__all__ = ["NetworkSource", "TrainingTask", "make_task"]


def make_task(dataset: Dataset, source: NetworkSource, *, seed: int, mosaic: bool = False) -> TrainingTask:
    """The task for the data set's kind, with its network built (and initialised) from `source`."""
    if mosaic and dataset.task != Task.DETECT:
        raise ForkliftError("--mosaic: only for detection data sets")
    if dataset.task == Task.DETECT:
        return DetectionTask(dataset, source, seed=seed, mosaic=mosaic)
    if dataset.task == Task.CLASSIFY:
        return ClassificationTask(dataset, source, seed=seed)
    if dataset.task == Task.SEGMENT:
        return SegmentationTask(dataset, source, seed=seed)
    raise ForkliftError(f"{dataset.root}: training for {dataset.task} data sets is not available")
