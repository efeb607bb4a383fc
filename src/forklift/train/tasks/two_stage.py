"""Detection training "optimized for accuracy": a torchvision two-stage detector (Faster R-CNN, and its one-stage
kin RetinaNet and FCOS) from `forklift.nets.two_stage`, trained with torchvision's own losses.

The inputs are the YOLO path's (`DetectionImages`: letterboxed squares, the same augmentation), their targets
turned into torchvision's dicts; the net normalises and never resizes again. Validation runs the net in memory on
the letterboxed val images, maps its boxes back to each image's pixels with the letterbox's placement and measures
them with `detection_metrics`, so no export is needed each epoch. The model directory is
`write_two_stage_model_dir`'s; fine-tuning starts from one (`--model`), keeping its heads only for the same classes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import nn
from torchvision.models import detection

from forklift.data.dataset import Dataset, ImageRecord
from forklift.errors import ForkliftError
from forklift.evaluation.detection import detection_metrics
from forklift.model_files.model_dir import open_model_dir
from forklift.model_files.two_stage_settings import TwoStageSettings
from forklift.nets.class_outputs import CLASS_HEADS, carry_class_outputs
from forklift.nets.two_stage import ARCHITECTURES, build_two_stage, load_two_stage
from forklift.runtime.two_stage_export import write_two_stage_model_dir
from forklift.train.loader import DEFAULT_AUGMENTATION, Augmentation, DetectionImages, as_input
from forklift.train.tasks.base import NetworkSource, TrainingTask, copy_matching_weights, say_heads
from forklift.vision.resize import letterbox
from forklift.vision.results import Detection
from forklift.vocabulary import ModelFormat, Task

DEFAULT_SIZE = 320
VAL_BATCH = 4
# torchvision's loss names by family, shortened ("loss_" dropped) for metrics.csv, the total first
LOSS_TERMS = {
    "fasterrcnn": ("loss", "classifier", "box_reg", "objectness", "rpn_box_reg"),
    "retinanet": ("loss", "classification", "bbox_regression"),
    "fcos": ("loss", "classification", "bbox_regression", "bbox_ctrness"),
}

Targets = list[dict[str, torch.Tensor]]


@dataclass(frozen=True)
class TwoStageOptions:
    """The training options only two-stage detectors take; None: not given."""

    anchor_sizes: tuple[int, ...] | None = None  # one per FPN level
    proposals: int | None = None  # RPN proposals kept at test time
    roi_samples: int | None = None  # Faster R-CNN: proposals per image the box head learns from (None: 512)

    def given(self) -> list[str]:
        """The names of the options that were given, for refusing them where they do not apply."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


NO_OPTIONS = TwoStageOptions()


def is_two_stage(source: NetworkSource) -> bool:
    """Whether `source` names a two-stage architecture or a model directory `write_two_stage_model_dir` wrote."""
    if source.arch is not None:
        return source.arch in ARCHITECTURES
    if source.model is None:
        return False
    try:
        return open_model_dir(source.model).format == ModelFormat.TWO_STAGE
    except ForkliftError:  # not a model directory: the Darknet path says why
        return False


def _set_roi_samples(net: nn.Module, count: int) -> None:
    """The proposals per image Faster R-CNN's box head computes its loss on: torchvision's 512 suit COCO's many
    objects, while on images with a few objects most are background and their RoI pooling backward dominates a CPU
    step (docs/training.md has the figures). Training only: the net answers the same."""
    if not isinstance(net, detection.FasterRCNN):
        raise ForkliftError(
            f"--roi-samples: only Faster R-CNN samples proposals for its box head, not {type(net).__name__}"
        )
    net.roi_heads.fg_bg_sampler.batch_size_per_image = count


class TwoStageTask(TrainingTask):
    kind = Task.DETECT
    metric_names = ("map50", "map")

    def __init__(
        self,
        dataset: Dataset,
        source: NetworkSource,
        *,
        seed: int,
        augmentation: Augmentation = DEFAULT_AUGMENTATION,
        options: TwoStageOptions = NO_OPTIONS,
    ) -> None:
        super().__init__(dataset, seed=seed, augmentation=augmentation)
        weights, anchor_sizes, proposals = source.weights, options.anchor_sizes, options.proposals
        if source.cfg is not None:
            raise ForkliftError(f"--cfg {source.cfg}: a two-stage --arch is built by torchvision, not from a cfg")
        if source.model is not None and weights is not None:
            raise ForkliftError(f"--weights {weights}: give it or --model, not both (--model brings its weights)")
        classes = len(dataset.classes)
        if source.model is None:
            assert source.arch is not None  # make_task chose this task for a two-stage --arch
            self.settings = TwoStageSettings(
                source.arch, classes, source.img or DEFAULT_SIZE, anchor_sizes=anchor_sizes, proposals=proposals
            )
            self.net: nn.Module = build_two_stage(self.settings, seed=seed, weights=weights)
        else:
            start, started, labels = load_two_stage(source.model)
            self.settings = TwoStageSettings(
                started.arch,
                classes,
                source.img or started.image_size,
                anchor_sizes=anchor_sizes or started.anchor_sizes,
                proposals=proposals or started.proposals,
            )
            self.net = build_two_stage(self.settings, seed=seed)
            if labels == dataset.classes:
                copy_matching_weights(start, self.net)
            else:
                self._start_classes_by_name(start, labels)
        if options.roi_samples is not None:
            _set_roi_samples(self.net, options.roi_samples)
        self.name = self.settings.arch
        self.size = self.settings.image_size
        self.loss_terms = LOSS_TERMS[self.name.split("_")[0]]

    def _start_classes_by_name(self, start: nn.Module, labels: list[str]) -> None:
        """The starting net's weights, its class outputs matched to the data set's classes by name (the others
        keep fresh weights, and are said to be new)."""
        copy_matching_weights(start, self.net, skip=CLASS_HEADS)
        sources = [0, *(labels.index(name) + 1 if name in labels else None for name in self.classes)]
        own = self.net.state_dict()
        heads = carry_class_outputs(start.state_dict(), own, sources, total=len(labels) + 1)
        self.net.load_state_dict({**own, **heads})
        say_heads([name for name in self.classes if name not in labels], self.classes)

    def images(self, records: list[ImageRecord], augment: bool) -> DetectionImages:
        size = (self.size, self.size)
        return self.augmented(DetectionImages, records, size, augment=augment)

    def collate(self, batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, Targets]:
        """Stacked images, and per image torchvision's target: boxes x1, y1, x2, y2 in input pixels (shape [0, 4]
        for none) and 1-based labels (0 is torchvision's background), from DetectionImages' class, cx, cy, w, h."""
        targets = []
        for _, rows in batch:
            centre, extent = rows[:, 1:3] * self.size, rows[:, 3:5] * self.size
            boxes = torch.cat([centre - extent / 2, centre + extent / 2], dim=1)
            targets.append({"boxes": boxes, "labels": rows[:, 0].long() + 1})
        return torch.stack([image for image, _ in batch]), targets

    def loss(self, inputs: torch.Tensor, targets: Targets) -> dict[str, torch.Tensor]:
        """torchvision's loss terms (the net in training mode computes them) and their sum."""
        moved = [{key: value.to(inputs.device) for key, value in target.items()} for target in targets]
        terms = {key.removeprefix("loss_"): value for key, value in self.net(list(inputs), moved).items()}
        return {"loss": sum(terms.values(), torch.zeros((), device=inputs.device)), **terms}

    def write_model_dir(self, out: Path, onnx: bool = True) -> None:
        """The ONNX model directory with the weights beside it; `onnx` is not consulted, since validation does not
        write a model directory (see `validate`)."""
        write_two_stage_model_dir(self.net, out, self.classes, self.settings)

    def validate(self, records: list[ImageRecord], scratch: Path) -> dict[str, float | None]:
        """mAP@.5 and mAP@[.5:.95] on the (checked) val records, from the net in memory: letterboxed as in
        training, boxes mapped back to each image's pixels, measured by pycocotools."""
        training = self.net.training
        self.net.eval()
        try:
            found = list(self._detections(records))
        finally:
            self.net.train(training)
        return self.metrics(detection_metrics(records, found, self.classes))

    def _detections(self, records: list[ImageRecord]) -> Iterator[list[Detection]]:
        """Each record's detections in pixels of its original image."""
        device = next(self.net.parameters()).device
        for start in range(0, len(records), VAL_BATCH):
            batch = records[start : start + VAL_BATCH]
            fitted = [letterbox(self.dataset.decoded(r), self.size, self.size) for r in batch]
            with torch.no_grad():
                answers = self.net([as_input(pixels).to(device) for pixels, _ in fitted])
            for answer, (_, placement) in zip(answers, fitted, strict=True):
                boxes = placement.to_original(answer["boxes"].cpu().double().numpy())
                labels, scores = answer["labels"].tolist(), answer["scores"].tolist()
                yield [
                    Detection.from_corners(box, self.classes[label - 1], score)
                    for box, label, score in zip(boxes, labels, scores, strict=True)
                ]
