"""What a training run is trained with, saved in every checkpoint so that `--resume` continues with exactly it.

A new run takes each setting given and the default for the rest. A resumed run takes the checkpoint's settings;
a setting given again must agree with them, or the run is refused with one line naming the option and both
values (typing `--img 416` on a run started at `--img 320` would otherwise silently train on at another size).
The device, data-loading workers, time budget and large model support are how a run is executed, not what it
trains, so they are chosen anew at each start and are not recorded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from forklift.errors import ForkliftError

PATH_SETTINGS = (
    "data",
    "cfg",
    "model",
    "weights",
    "style_image",
    "loss_net_weights",
)  # saved and compared resolved: a resume from elsewhere agrees


@dataclass(frozen=True)
class TrainSettings:
    """The options that decide what a run trains; None where the source decides (the cfg's input size)."""

    data: Path | None = None
    cfg: Path | None = None
    model: Path | None = None
    arch: str | None = None
    epochs: int = 30
    batch: int = 16
    img: int | None = None
    lr: float = 0.001
    optimizer: str = "adamw"  # a forklift.vocabulary.Optimizer word
    momentum: float = 0.9  # for the optimisers that have one (momentum, rmsprop)
    weight_decay: float = 5e-4  # on conv and linear weights only
    seed: int = 0
    val_every: int = 1
    mosaic: bool = False
    aug_scale: float = 0.25  # augmentation strengths (forklift.train.loader.Augmentation): zoom in 1 +- this,
    aug_shift: float = 0.1  # shift up to this share of the input each way,
    aug_hsv: float = 1.0  # and HSV gains times this
    amp: bool | None = None  # None: on for CUDA only
    weights: Path | None = None  # two-stage detectors: a torchvision backbone or detector weights file
    anchor_sizes: tuple[int, ...] | None = None  # two-stage detectors: one anchor size per FPN level
    proposals: int | None = None  # two-stage detectors: proposals (candidates) kept per image at test time
    task: str | None = None  # "style" trains a style network on a folder of images; None: the data set's task
    style_image: Path | None = None  # style networks: the image whose style to learn
    loss_net_weights: Path | None = None  # style networks: VGG16's ImageNet weights (the perceptual loss)
    content_weight: float | None = None  # style networks: weight of the content loss (None: 1e5)
    style_weight: float | None = None  # style networks: weight of the style loss (None: 1e10)
    sync_bn: bool = False  # data-parallel runs: batch norm statistics over all ranks' batches
    lr_scaling: str = "auto"  # data-parallel runs: how --lr follows the global batch (forklift.train.lr_scaling)

    @staticmethod
    def option_names() -> tuple[str, ...]:
        return tuple(f.name for f in fields(TrainSettings))

    def to_json(self) -> dict[str, Any]:
        return {key: str(value.resolve()) if isinstance(value, Path) else value for key, value in asdict(self).items()}

    @staticmethod
    def from_json(saved: dict[str, Any]) -> TrainSettings:
        known = {key: value for key, value in saved.items() if key in TrainSettings.option_names()}
        for key in PATH_SETTINGS:
            if known.get(key) is not None:
                known[key] = Path(known[key])
        if known.get("anchor_sizes") is not None:
            known["anchor_sizes"] = tuple(known["anchor_sizes"])
        return TrainSettings(**known)


def new_settings(given: dict[str, Any]) -> TrainSettings:
    """A fresh run's settings: the given options (None: not given) over the defaults."""
    return replace(TrainSettings(), **_given(given))


def resumed_settings(saved: TrainSettings, given: dict[str, Any], checkpoint: Path) -> TrainSettings:
    """The checkpoint's settings; an option given that says otherwise is refused, naming both values."""
    for key, value in _given(given).items():
        recorded = getattr(saved, key)
        if _comparable(value) != _comparable(recorded):
            option = "--" + key.replace("_", "-")
            raise ForkliftError(
                f"{option} {_shown(value)}: {checkpoint} was trained with {option} {_shown(recorded)}; "
                f"drop the option to resume with the checkpoint's, or train into a new directory"
            )
    return saved


def _given(given: dict[str, Any]) -> dict[str, Any]:
    """The options that were given (not None), paths as typed (errors name them so)."""
    unknown = set(given) - set(TrainSettings.option_names())
    if unknown:
        raise TypeError(f"not training settings: {', '.join(sorted(unknown))}")
    return {key: _typed(key, value) for key, value in given.items() if value is not None}


def _typed(key: str, value: Any) -> Any:
    """Paths as Path, sequences as tuples: so that a given option compares equal to the recorded one."""
    if key in PATH_SETTINGS:
        return Path(value)
    return tuple(value) if isinstance(value, list) else value


def _comparable(value: object) -> object:
    return value.resolve() if isinstance(value, Path) else value


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return "(not given)" if value is None else str(value)
