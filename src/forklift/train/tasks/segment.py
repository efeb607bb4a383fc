"""Semantic segmentation training: a torchvision segmentation architecture (fresh weights) with a per-pixel
cross-entropy loss, mIoU and pixel accuracy on val.

Inputs are stretched to the input size and normalised with ImageNet's mean and std, as `SegmentPredictor` does
with what `write_segment_model_dir` puts in forklift.json, so the net sees at training what it sees when served;
masks follow their image with nearest neighbour, and pixels outside the image after augmentation are ignored.
Validation runs the net in memory on the same inputs and maps its label map back to each mask's size the way
the predictor does, so the per-epoch mIoU is the one `forklift eval` gives for the exported model directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from forklift.data.dataset import Dataset, ImageRecord
from forklift.data.masks import load_mask
from forklift.errors import ForkliftError
from forklift.evaluation.segmentation import confusion_matrix, metrics_from_confusion
from forklift.nets.matching import load_matching
from forklift.nets.segmenters import ARCHITECTURES, build_segmenter
from forklift.runtime.segment import to_original
from forklift.runtime.segment_export import IMAGENET_MEAN, IMAGENET_SCALE, write_segment_model_dir
from forklift.train.loader import (
    DEFAULT_AUGMENTATION,
    Augmentation,
    AugmentedImages,
    hsv_jitter,
    random_scale_shift,
)
from forklift.train.tasks.base import NetworkSource, TrainingTask
from forklift.vision.masks import IGNORE
from forklift.vision.resize import LETTERBOX_FILL, Placement, stretch
from forklift.vocabulary import Task

DEFAULT_ARCH = "lraspp_mobilenet_v3_large"  # learns the generated shapes fastest on a CPU (README, Segmentation)
DEFAULT_SIZE = 256
VAL_BATCH = 8
MEAN = np.array(IMAGENET_MEAN, np.float32)
SCALE = np.array(IMAGENET_SCALE, np.float32)


def normalise(fitted: np.ndarray) -> torch.Tensor:
    """An RGB uint8 HxWx3 image at the input size -> [3, H, W] float, (pixel - mean) * scale as the predictor
    computes it (float32, same order), so that training, validation and the exported model agree."""
    tensor = (fitted.astype(np.float32) - MEAN) * SCALE
    return torch.from_numpy(np.ascontiguousarray(tensor.transpose(2, 0, 1)))


class SegmentationImages(AugmentedImages):
    """(image [3, H, W] normalised, label map [H, W] int64 with IGNORE) for each record; with `augment`, scaled
    and shifted (the mask through the same warp, its new border ignored), flipped and HSV-jittered."""

    def sample(self, index: int, rng: np.random.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        size = (self.width, self.height)
        fitted, _ = stretch(self.decoded(index), self.width, self.height)
        labels = cv2.resize(load_mask(self.dataset, self.records[index]), size, interpolation=cv2.INTER_NEAREST_EXACT)
        if rng is not None:
            matrix = random_scale_shift(self.width, self.height, rng, self.augmentation)
            fitted = cv2.warpAffine(fitted, matrix, size, borderValue=(LETTERBOX_FILL,) * 3)
            labels = cv2.warpAffine(labels, matrix, size, flags=cv2.INTER_NEAREST, borderValue=IGNORE)
            if rng.random() < 0.5:
                fitted, labels = fitted[:, ::-1], labels[:, ::-1]
            fitted = hsv_jitter(fitted, rng, self.augmentation.hsv)
        return normalise(fitted), torch.from_numpy(np.ascontiguousarray(labels)).long()


class SegmentationTask(TrainingTask):
    kind = Task.SEGMENT
    loss_terms = ("loss",)
    metric_names = ("miou", "pixel_accuracy")

    def __init__(
        self, dataset: Dataset, source: NetworkSource, *, seed: int, augmentation: Augmentation = DEFAULT_AUGMENTATION
    ) -> None:
        super().__init__(dataset, seed=seed, augmentation=augmentation)
        if source.cfg is not None or source.model is not None:
            given = f"--cfg {source.cfg}" if source.cfg is not None else f"--model {source.model}"
            raise ForkliftError(
                f"{given}: segmentation trains a torchvision architecture (fresh, or from --weights); "
                f"give --arch NAME ({', '.join(ARCHITECTURES)})"
            )
        self.name = source.arch or DEFAULT_ARCH
        self.size = source.img or DEFAULT_SIZE
        self.net = build_segmenter(self.name, classes=len(dataset.classes), seed=seed)
        if source.weights is not None:  # COCO's segmenter (its 21-class heads stay fresh) or ImageNet's backbone
            load_matching(self.net, source.weights, self.name)

    def images(self, records: list[ImageRecord], augment: bool) -> SegmentationImages:
        return self.augmented(SegmentationImages, records, (self.size, self.size), augment=augment)

    def collate(self, batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack([image for image, _ in batch]), torch.stack([labels for _, labels in batch])

    def loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Cross-entropy over the pixels that are not ignored (zero, not NaN, when a batch has none)."""
        if len(inputs) == 1:  # BatchNorm after global pooling (DeepLabV3's ASPP) needs two values per channel
            inputs, targets = inputs.repeat(2, 1, 1, 1), targets.repeat(2, 1, 1)
        logits = self.net(inputs)["out"].float()
        total = F.cross_entropy(logits, targets, ignore_index=IGNORE, reduction="sum")
        return {"loss": total / (targets != IGNORE).sum().clamp(min=1)}

    def write_model_dir(self, out: Path, onnx: bool = True) -> None:
        """The ONNX model directory; `onnx` is not consulted, since ONNX is the only form a segment model has
        (validation during training does not write one: see `validate`)."""
        write_segment_model_dir(self.net, out, self.classes, (self.size, self.size), name=self.name)

    def validate(self, records: list[ImageRecord], scratch: Path) -> dict[str, float | None]:
        """mIoU and pixel accuracy on the (checked) val records, computed in memory with the predictor's steps
        (stretch, normalise, argmax, back to the mask's size by nearest neighbour): no export each epoch."""
        training = self.net.training
        self.net.eval()
        confusion = np.zeros((len(self.classes) + 1,) * 2, np.int64)
        try:
            for record, labels in self._predicted(records):
                confusion += confusion_matrix(load_mask(self.dataset, record), labels, len(self.classes))
        finally:
            self.net.train(training)
        return self.metrics(metrics_from_confusion(confusion, self.classes))

    def _predicted(self, records: list[ImageRecord]) -> Iterator[tuple[ImageRecord, np.ndarray]]:
        """Each record with the net's label map over its original image."""
        device = next(self.net.parameters()).device
        for start in range(0, len(records), VAL_BATCH):
            batch = records[start : start + VAL_BATCH]
            fitted: list[tuple[np.ndarray, Placement]] = [
                stretch(self.dataset.decoded(r), self.size, self.size) for r in batch
            ]
            inputs = torch.stack([normalise(pixels) for pixels, _ in fitted]).to(device)
            with torch.no_grad():
                labels = self.net(inputs)["out"].argmax(dim=1).to(torch.uint8).cpu().numpy()
            for record, label_map, (_, placement) in zip(batch, labels, fitted, strict=True):
                yield record, to_original(label_map, placement, self.size, self.size)
