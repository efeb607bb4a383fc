"""Classification training: a Darknet classifier cfg (convolutions ending in global average pooling and softmax)
with a cross-entropy loss, top-1 and top-5 on val.

The cfg's last convolution is rewritten to one filter per class of the data set (and [net] to the input size on
request); fine-tuning copies a classifier model directory's weights in, all but that convolution when the classes
differ. The model directory holds the cfg, weights, names, forklift.json and the ONNX export, so `forklift predict`
and `serve` answer with `classes`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from forklift.data.dataset import Dataset, ImageRecord
from forklift.errors import ForkliftError
from forklift.model_files.cfg_edit import apply_edits, set_net_size, set_option
from forklift.model_files.darknet_cfg import parse_cfg
from forklift.model_files.model_config import ModelConfig
from forklift.nets.darknet import Convolutional, DarknetNet
from forklift.nets.fresh_weights import initialise
from forklift.train.loader import (
    DEFAULT_AUGMENTATION,
    Augmentation,
    AugmentedImages,
    as_input,
    hsv_jitter,
    random_affine,
)
from forklift.train.tasks.base import (
    DarknetTask,
    NetworkSource,
    copy_head_by_name,
    copy_matching_weights,
    darknet_source,
    say_heads,
)
from forklift.vision.resize import fit
from forklift.vocabulary import ResizeMode, Task

RESIZE = ResizeMode.STRETCH  # a classifier sees the whole image; written to forklift.json so predict does the same


class ClassificationImages(AugmentedImages):
    """(image [3, H, W] float in [0, 1], class index) for each record; augmented like detection (scale, shift,
    flip, HSV) when asked."""

    def sample(self, index: int, rng: np.random.Generator | None) -> tuple[torch.Tensor, int]:
        fitted, _ = fit(self.decoded(index), self.width, self.height, RESIZE)
        if rng is not None:
            nothing = np.zeros((0, 4)), np.zeros(0, dtype=np.int64)
            fitted, _, _ = random_affine(fitted, *nothing, rng, self.augmentation)
            if rng.random() < 0.5:
                fitted = fitted[:, ::-1]
            fitted = hsv_jitter(fitted, rng, self.augmentation.hsv)
        label = self.records[index].label
        if label is None:
            raise ForkliftError(f"{self.records[index].file}: has no label to train a classifier on")
        return as_input(fitted), self.class_index[label]


class ClassificationTask(DarknetTask):
    kind = Task.CLASSIFY
    loss_terms = ("loss",)
    metric_names = ("top1", "top5")

    def __init__(
        self, dataset: Dataset, source: NetworkSource, *, seed: int, augmentation: Augmentation = DEFAULT_AUGMENTATION
    ) -> None:
        super().__init__(dataset, seed=seed, augmentation=augmentation)
        self.name, self.cfg_text, start, start_labels = darknet_source(
            source, dataset.classes, set_classifier_classes, detector=False
        )
        self.net = DarknetNet(parse_cfg(self.cfg_text, f"{self.name}.cfg"))
        if self.net.is_detector:
            raise ForkliftError(f"{self.name}.cfg: a detector; classification needs a classifier cfg")
        initialise(self.net, seed)
        if start is not None:
            last_conv = max(i for i, s in enumerate(self.net.config.layers) if s.kind == "convolutional")
            copy_matching_weights(start, self.net, skip=(f"layers.{last_conv}.",))
            old, new = start.layers[last_conv], self.net.layers[last_conv]
            assert isinstance(old, Convolutional) and isinstance(new, Convolutional)
            say_heads(
                copy_head_by_name(old.conv, new.conv, start_labels, dataset.classes, per_group=0), dataset.classes
            )

    def images(self, records: list[ImageRecord], augment: bool) -> ClassificationImages:
        size = (self.net.input_width, self.net.input_height)
        return self.augmented(ClassificationImages, records, size, augment=augment)

    def collate(self, batch: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack([image for image, _ in batch]), torch.tensor([label for _, label in batch])

    def loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        (logits,) = self.net.heads(inputs, softmax=False)
        return {"loss": F.cross_entropy(logits.float(), targets)}

    def model_config(self) -> ModelConfig:
        return ModelConfig(
            task=Task.CLASSIFY, input_width=self.net.input_width, input_height=self.net.input_height, resize=RESIZE
        )


def set_classifier_classes(text: str, source: str, classes: int, size: int | None = None) -> str:
    """The classifier cfg with its last [convolutional] (the one that scores the classes) set to `classes` filters
    and [net] width and height set when a size is given; the rest stays as written."""
    config = parse_cfg(text, source)
    convolutions = [section for section in config.layers if section.kind == "convolutional"]
    if not convolutions or any(s.kind in ("yolo", "region") for s in config.layers):
        raise ForkliftError(f"{source}: not a classifier cfg (convolutions ending in [avgpool] and [softmax])")
    edits: dict[int, str] = {}
    inserts: dict[int, list[str]] = {}
    if size is not None:
        set_net_size(config.net, size, edits, inserts)
    set_option(convolutions[-1], "filters", str(classes), edits, inserts)
    return apply_edits(text, edits, inserts)
