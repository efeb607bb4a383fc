"""Measuring a model directory on a data set's split, whoever trained it: detection (COCO mAP through
pycocotools), classification (top-1/top-5) and segmentation (IoU per class, mIoU), with the report a person opens.
`forklift eval` and training's final measure call `evaluate.evaluate`."""
