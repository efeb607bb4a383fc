"""Measuring a model directory on a data set's split, whoever trained it: detection (COCO mAP through
pycocotools), classification (top-1/top-5) and segmentation (IoU per class, mIoU), with the report a person opens.
`forklift eval` and training's final measure call `evaluate.evaluate`; a tabular model on a table goes through
`tabular.evaluate_table` (scikit-learn is imported on that path only).

This module imports nothing heavy: the command line offers the metric names without loading a stage.
"""

from forklift.vocabulary import Task

METRICS: dict[Task, tuple[str, ...]] = {  # the one-number metrics of each task, the headline first
    Task.DETECT: ("map50", "map"),
    Task.CLASSIFY: ("top1", "top5"),
    Task.SEGMENT: ("miou", "pixel_accuracy"),
}
