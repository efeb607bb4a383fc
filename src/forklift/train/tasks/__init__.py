"""Training tasks, one plug-in per kind of data set: `detect` (Darknet YOLO, or a torchvision two-stage detector
for a two-stage `--arch`), `classify` (Darknet classifier), `segment` (torchvision architectures), `style` (the
fast-neural-style network on a folder of images), on the base in
`base.py`. `make_task` picks the plug-in by the data set's task; the plug-ins import the base, never the other way
round."""

from __future__ import annotations

from forklift.data.dataset import Dataset
from forklift.errors import ForkliftError
from forklift.nets.two_stage import ARCHITECTURES
from forklift.train.loader import DEFAULT_AUGMENTATION, Augmentation
from forklift.train.tasks.base import NetworkSource, TrainingTask
from forklift.train.tasks.classify import ClassificationTask
from forklift.train.tasks.detect import DetectionTask
from forklift.train.tasks.segment import SegmentationTask
from forklift.train.tasks.style import StyleOptions, StyleTask
from forklift.train.tasks.two_stage import NO_OPTIONS, TwoStageOptions, TwoStageTask, is_two_stage
from forklift.vocabulary import Task

NO_STYLE = StyleOptions()

__all__ = ["NetworkSource", "StyleOptions", "TrainingTask", "TwoStageOptions", "make_task"]


def make_task(
    dataset: Dataset,
    source: NetworkSource,
    *,
    seed: int,
    augmentation: Augmentation = DEFAULT_AUGMENTATION,
    two_stage: TwoStageOptions = NO_OPTIONS,
    style: StyleOptions = NO_STYLE,
) -> TrainingTask:
    """The task for the data set's kind, with its network built (and initialised) from `source`: on a detect set
    a two-stage detector when `source` names one, else a Darknet YOLO. The `two_stage` options are refused for the
    others, and a weights file for any but the torchvision architectures."""
    wanted = dataset.task == Task.DETECT and is_two_stage(source)
    if source.weights is not None and not (wanted or dataset.task == Task.SEGMENT):
        raise ForkliftError(
            f"--weights {source.weights}: for torchvision architectures (--arch: two-stage detectors, segmenters); "
            "a Darknet or style model starts from a model directory: --model DIR (forklift models pull NAME DIR)"
        )
    if dataset.task == Task.STYLE:
        return StyleTask(dataset, source, seed=seed, options=style, augmentation=augmentation)
    if style.given():
        raise ForkliftError(f"--{style.given()[0].replace('_', '-')}: only for style training (--task style)")
    if augmentation.mosaic and dataset.task != Task.DETECT:
        raise ForkliftError("--mosaic: only for detection data sets")
    given = two_stage.given()
    if given and not wanted:
        raise ForkliftError(
            f"--{given[0].replace('_', '-')}: only for two-stage detectors on detect data sets "
            f"(--arch {' | '.join(ARCHITECTURES)})"
        )
    if wanted:
        return TwoStageTask(dataset, source, seed=seed, augmentation=augmentation, options=two_stage)
    if dataset.task == Task.DETECT:
        if source.arch is not None:
            raise ForkliftError(
                f"--arch {source.arch}: not a detector architecture; known: {', '.join(ARCHITECTURES)} "
                f"(or give --cfg or --model for a Darknet YOLO)"
            )
        return DetectionTask(dataset, source, seed=seed, augmentation=augmentation)
    if dataset.task == Task.CLASSIFY:
        return ClassificationTask(dataset, source, seed=seed, augmentation=augmentation)
    if dataset.task == Task.SEGMENT:
        return SegmentationTask(dataset, source, seed=seed, augmentation=augmentation)
    raise ForkliftError(f"{dataset.root}: training for {dataset.task} data sets is not available")
