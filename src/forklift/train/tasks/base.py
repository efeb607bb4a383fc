"""The base of the training tasks: what differs between detection, classification and segmentation training;
`trainer.train` runs the rest. The plug-ins (`detect`, `classify`, `segment` beside this module) subclass it, and
`forklift.train.tasks.make_task` picks one by the data set's task.

A task owns its network and knows its data (how a record becomes an input and a target), its loss, the model
directory it writes and the metric that picks the best epoch. The loop, optimiser, schedule, checkpoints,
metrics.csv, TensorBoard and the time budget are the same for all and live in `trainer.py`.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from forklift.data.dataset import Dataset, ImageRecord
from forklift.errors import ForkliftError
from forklift.model_files.darknet_cfg import cfg_text
from forklift.model_files.labels import write_labels
from forklift.model_files.model_config import ModelConfig, save_config
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.darknet import DarknetNet, build_darknet, save_weights
from forklift.train.loader import DEFAULT_AUGMENTATION, Augmentation, AugmentedImages
from forklift.train.run_log import FINE_TUNING
from forklift.vocabulary import ModelFormat, Runtime

ImagesT = TypeVar("ImagesT", bound=AugmentedImages)


@dataclass(frozen=True)
class NetworkSource:
    """Where the network comes from: a Darknet cfg (fresh weights), a model directory to fine-tune, or the name
    of a torchvision architecture, with a weights file to start it from (its own, or its backbone's: what fits
    loads); and the input size to train at (None: the source's own)."""

    cfg: Path | None = None
    model: Path | None = None
    arch: str | None = None
    img: int | None = None
    weights: Path | None = None


class TrainingTask(ABC):
    """One kind of model being trained. Subclasses set the class attributes and implement the methods."""

    kind: str  # the data set's task: detect | classify | segment | style
    loss_terms: tuple[str, ...]  # what `loss` returns, "loss" (the total, minimised) first
    metric_names: tuple[str, ...]  # what `validate` returns, the best-epoch criterion (higher is better) first
    name: str  # the stem of the model files
    net: nn.Module
    evaluated = True  # the model directory gets `forklift eval`'s report at the end of the run

    def __init__(self, dataset: Dataset, *, seed: int, augmentation: Augmentation = DEFAULT_AUGMENTATION) -> None:
        self.dataset, self.seed, self.augmentation = dataset, seed, augmentation

    @property
    def classes(self) -> list[str]:
        return self.dataset.classes

    @abstractmethod
    def images(self, records: list[ImageRecord], augment: bool) -> AugmentedImages:
        """The records as (input, target) pairs; with `augment`, drawn anew by (seed, epoch, image) each epoch.
        The trainer sets the returned set's `epoch` before each epoch."""

    @abstractmethod
    def collate(self, batch: list[tuple[torch.Tensor, Any]]) -> tuple[torch.Tensor, Any]:
        """A list of pairs -> (inputs, targets) of one batch."""

    @abstractmethod
    def loss(self, inputs: torch.Tensor, targets: Any) -> dict[str, torch.Tensor]:
        """The loss terms named by `loss_terms` for one batch (network in training mode)."""

    @abstractmethod
    def write_model_dir(self, out: Path, onnx: bool = True) -> None:
        """OUT as a model directory `forklift predict` and `serve` use; the ONNX export only when asked, since
        validation during training reads the files with the torch runtime."""

    def augmented(
        self, kind: type[ImagesT], records: list[ImageRecord], size: tuple[int, int], *, augment: bool
    ) -> ImagesT:
        """`kind` (the task's AugmentedImages) over `records` at `size`, with the run's seed and augmentation."""
        return kind(self.dataset, records, size, augment=augment, seed=self.seed, augmentation=self.augmentation)

    def parameter_groups(self, *, weight_decay: float) -> list[dict]:
        """Weight decay on the weights of convolutions and linear layers only, not on biases or norm parameters."""
        decay: list[nn.Parameter] = []
        other: list[nn.Parameter] = []
        for module in self.net.modules():
            for name, parameter in module.named_parameters(recurse=False):
                wanted = name == "weight" and isinstance(module, nn.Conv2d | nn.Linear)
                (decay if wanted else other).append(parameter)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]

    def metrics(self, measured: Any) -> dict[str, float | None]:
        """`metric_names` out of what `forklift.evaluation.evaluate` measured."""
        return {name: getattr(measured, name) for name in self.metric_names}

    def validate(self, records: list[ImageRecord], scratch: Path) -> dict[str, float | None]:
        """The metrics of the network as it is now on the (checked) val records: written to `scratch` without ONNX
        and measured with the torch runtime, so that what is measured is what a user gets from the files."""
        from forklift.evaluation.evaluate import measure

        if scratch.exists():
            shutil.rmtree(scratch)
        scratch.mkdir(parents=True)
        training = self.net.training
        self.write_model_dir(scratch, onnx=False)
        try:
            return self.metrics(measure(open_model_dir(scratch), self.dataset, records, runtime=Runtime.TORCH))
        finally:
            self.net.train(training)


class DarknetTask(TrainingTask):
    """A task whose network is a Darknet cfg: the model directory is the cfg, weights, names, forklift.json
    (`model_config`) and the ONNX export."""

    cfg_text: str
    net: DarknetNet

    @abstractmethod
    def model_config(self) -> ModelConfig:
        """What forklift.json says about the model: its task, input size, resize mode, thresholds."""

    def write_model_dir(self, out: Path, onnx: bool = True) -> None:
        from forklift.runtime.onnx_export import export_darknet

        (out / f"{self.name}.cfg").write_text(self.cfg_text, encoding="utf-8")
        save_weights(self.net, out / f"{self.name}.weights")
        write_labels(out / f"{self.name}.names", self.classes)
        save_config(out, self.model_config())
        if onnx:
            export_darknet(open_model_dir(out), out / f"{self.name}.onnx")


def copy_matching_weights(start: nn.Module, net: nn.Module, skip: tuple[str, ...] = ()) -> None:
    """Copy the starting net's tensors into `net` where name and shape agree, except names starting with `skip`."""
    target = net.state_dict()
    fitting = {
        k: v
        for k, v in start.state_dict().items()
        if k in target and target[k].shape == v.shape and not k.startswith(skip)
    }
    net.load_state_dict({**target, **fitting})


def copy_head_by_name(
    start: nn.Conv2d, head: nn.Conv2d, start_labels: list[str], classes: list[str], *, per_group: int
) -> list[str]:
    """Copy a head convolution's output rows from the starting net, matching classes by name: each group of
    outputs (a YOLO anchor: `per_group` box and objectness rows, then one row per class; a classifier: the class
    rows) takes the starting rows of the same meaning, whatever the classes' order. Returns the classes the
    starting net did not know, whose rows keep their fresh weights."""
    old_width, new_width = per_group + len(start_labels), per_group + len(classes)
    groups = head.out_channels // new_width
    if start.out_channels != groups * old_width or start.weight.shape[1:] != head.weight.shape[1:]:
        return list(classes)  # another head altogether: nothing of it carries over
    rows = [(g * old_width + k, g * new_width + k) for g in range(groups) for k in range(per_group)]
    for j, name in enumerate(classes):
        if name in start_labels:
            i = start_labels.index(name)
            rows += [(g * old_width + per_group + i, g * new_width + per_group + j) for g in range(groups)]
    with torch.no_grad():
        for old, new in rows:
            head.weight[new] = start.weight[old]
            if head.bias is not None and start.bias is not None:
                head.bias[new] = start.bias[old]
    return [name for name in classes if name not in start_labels]


def say_heads(fresh: list[str], classes: list[str]) -> None:
    """One line on what fine-tuning kept of the starting heads."""
    if fresh:
        print(f"{FINE_TUNING}{len(classes) - len(fresh)} of {len(classes)} classes keep the model's head weights "
              f"(matched by name); new, from fresh weights: {', '.join(fresh)}", flush=True)  # fmt: skip


CfgRewrite = Callable[[str, str, int, int | None], str]  # (text, source, classes, size) -> text


def darknet_source(
    source: NetworkSource, classes: list[str], rewrite: CfgRewrite, detector: bool
) -> tuple[str, str, DarknetNet | None, list[str]]:
    """(name, the cfg text rewritten for this data set, net whose weights to start from or None, its labels),
    from a cfg or from a Darknet model directory of the wanted kind (detector or classifier)."""
    wanted = "a detector" if detector else "a classifier"
    if source.arch is not None:
        raise ForkliftError(f"--arch {source.arch}: this task trains Darknet cfgs; give --cfg or --model")
    if source.cfg is not None and source.model is None:
        cfg = Path(source.cfg)
        if not cfg.is_file():
            raise ForkliftError(f"{cfg}: no such cfg file")
        return cfg.stem, rewrite(cfg_text(cfg), str(cfg), len(classes), source.img), None, []
    if source.model is None or source.cfg is not None:
        raise ForkliftError("give exactly one of --cfg CFG (train from scratch) or --model MODEL_DIR (fine-tune)")
    directory = open_model_dir(source.model)
    if directory.format != ModelFormat.DARKNET:
        raise ForkliftError(f"{source.model}: fine-tuning needs a Darknet model directory, not {directory.format}")
    cfg = directory.files["cfg"]
    start = build_darknet(cfg, directory.files["weights"])
    if start.is_detector != detector:
        raise ForkliftError(f"{source.model}: not {wanted}, which this data set needs to start from")
    text = rewrite(cfg_text(cfg), str(cfg), len(classes), source.img)
    return cfg.stem, text, start, directory.labels
