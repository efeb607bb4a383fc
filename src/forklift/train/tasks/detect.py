"""Detection training: a Darknet-cfg YOLO (v3, v3-tiny, v4-tiny...) with the YOLOv3 loss of its [yolo] heads.

The cfg is rewritten for the data set's classes (each head's `classes=` and the filters of the convolution before
it) and, on request, a new input size; fine-tuning copies a model directory's weights in, all but the head
convolutions when the classes differ. The model directory written holds the cfg, weights, names, forklift.json
and the ONNX export.
"""

from __future__ import annotations

import torch

from forklift.data.dataset import Dataset, ImageRecord
from forklift.model_files.cfg_edit import set_classes
from forklift.model_files.darknet_cfg import parse_cfg
from forklift.model_files.model_config import ModelConfig
from forklift.nets.darknet import Convolutional, DarknetNet
from forklift.nets.fresh_weights import initialise
from forklift.train.loader import DEFAULT_AUGMENTATION, Augmentation, DetectionImages, collate
from forklift.train.loss import yolo_heads, yolo_loss
from forklift.train.tasks.base import (
    DarknetTask,
    NetworkSource,
    copy_head_by_name,
    copy_matching_weights,
    darknet_source,
    say_heads,
)
from forklift.vocabulary import ResizeMode, Task

CONF, IOU = 0.25, 0.45  # the thresholds written to forklift.json


class DetectionTask(DarknetTask):
    kind = Task.DETECT
    loss_terms = ("loss", "box", "obj", "cls")
    metric_names = ("map50", "map")

    def __init__(
        self, dataset: Dataset, source: NetworkSource, *, seed: int, augmentation: Augmentation = DEFAULT_AUGMENTATION
    ) -> None:
        super().__init__(dataset, seed=seed, augmentation=augmentation)
        self.name, self.cfg_text, start, start_labels = darknet_source(
            source, dataset.classes, set_classes, detector=True
        )
        self.net = DarknetNet(parse_cfg(self.cfg_text, f"{self.name}.cfg"))
        yolo_heads(self.net)
        initialise(self.net, seed)
        if start is not None:
            _transfer(start, self.net, start_labels, dataset.classes)

    def images(self, records: list[ImageRecord], augment: bool) -> DetectionImages:
        size = (self.net.input_width, self.net.input_height)
        return self.augmented(DetectionImages, records, size, augment=augment)

    def collate(self, batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        return collate(batch)

    def loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        terms = yolo_loss(self.net, self.net.heads(inputs), targets)
        return {"loss": terms.total, "box": terms.box, "obj": terms.obj, "cls": terms.cls}

    def model_config(self) -> ModelConfig:
        return ModelConfig(
            task=Task.DETECT,
            input_width=self.net.input_width,
            input_height=self.net.input_height,
            resize=ResizeMode.LETTERBOX,
            conf=CONF,
            iou=IOU,
        )


def _transfer(start: DarknetNet, net: DarknetNet, start_labels: list[str], classes: list[str]) -> None:
    """Start from the model's weights; the convolutions before the heads row by row, each class's rows from the
    class of the same name (an export may list the classes in another order), a class the model lacks fresh."""
    heads = tuple(f"layers.{i - 1}." for i in net.head_indices)
    copy_matching_weights(start, net, skip=heads)
    fresh: set[str] = set()
    for index in net.head_indices:
        old, new = start.layers[index - 1], net.layers[index - 1]
        assert isinstance(old, Convolutional) and isinstance(new, Convolutional)  # set_classes checked the cfg
        fresh.update(copy_head_by_name(old.conv, new.conv, start_labels, classes, per_group=5))
    say_heads([name for name in classes if name in fresh], classes)
