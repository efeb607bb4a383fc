"""What a training run is trained with, saved in every checkpoint so that `--resume` continues with exactly it.

A new run takes each setting given and the default for the rest. A resumed run takes the checkpoint's settings;
a setting given again must agree with them, or the run is refused with one line naming the option and both
values (typing `--img 416` on a run started at `--img 320` would otherwise silently train on at another size).
The device, data-loading workers, time budget and large model support (`RunOptions`) are how a run is executed,
not what it trains, so they are chosen anew at each start and are not recorded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forklift.errors import ForkliftError
from forklift.vocabulary import Optimizer, word

if TYPE_CHECKING:
    from forklift.lms import Settings as LmsSettings

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
    weights: Path | None = None  # torchvision architectures: the net's or its backbone's weights file
    anchor_sizes: tuple[int, ...] | None = None  # two-stage detectors: one anchor size per FPN level
    proposals: int | None = None  # two-stage detectors: proposals (candidates) kept per image at test time
    roi_samples: int | None = None  # Faster R-CNN: proposals per image its box head learns from (None: 512)
    task: str | None = None  # "style" trains a style network on a folder of images; None: the data set's task
    style_image: Path | None = None  # style networks: the image whose style to learn
    loss_net_weights: Path | None = None  # style networks: VGG16's ImageNet weights (the perceptual loss)
    content_weight: float | None = None  # style networks: weight of the content loss (None: 1e5)
    style_weight: float | None = None  # style networks: weight of the style loss (None: 1e10)
    sync_bn: bool = False  # data-parallel runs: batch norm statistics over all ranks' batches
    lr_scaling: str = "auto"  # data-parallel runs: how --lr follows the global batch (forklift.train.lr_scaling)
    # the settings a person gave (the rest are defaults): a resumed run checks these against its checkpoint
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @staticmethod
    def option_names() -> tuple[str, ...]:
        return tuple(f.name for f in fields(TrainSettings) if f.name != "given")

    @staticmethod
    def of(**options: Any) -> TrainSettings:
        """A run's settings from the options given (None: not given, so the default applies)."""
        chosen = _given(options)
        return replace(TrainSettings(), **chosen, given=frozenset(chosen))

    def with_options(self, **options: Any) -> TrainSettings:
        """These settings with more options given (a search's trial: its drawn values over the search's own)."""
        chosen = _given(options)
        return replace(self, **chosen, given=self.given | frozenset(chosen))

    def to_json(self) -> dict[str, Any]:
        saved = {key: getattr(self, key) for key in self.option_names()}
        return {key: str(value.resolve()) if isinstance(value, Path) else value for key, value in saved.items()}

    @staticmethod
    def from_json(saved: dict[str, Any]) -> TrainSettings:
        known = {key: value for key, value in saved.items() if key in TrainSettings.option_names()}
        for key in PATH_SETTINGS:
            if known.get(key) is not None:
                known[key] = Path(known[key])
        if known.get("anchor_sizes") is not None:
            known["anchor_sizes"] = tuple(known["anchor_sizes"])
        return TrainSettings(**known)


@dataclass(frozen=True)
class RunOptions:
    """How a run is executed, chosen anew at each start and not recorded (`TrainSettings` is what it trains)."""

    device: str = "cpu"  # cpu, cuda or cuda:N
    resume: bool = False  # continue OUT's run from its last checkpoint
    workers: int = 0  # data-loading processes (0: in the loop)
    time_budget_s: float | None = None  # stop before an epoch that would end past this, judged by the one before
    lms: LmsSettings | None = None  # large model support around each epoch's steps (`forklift.lms.Options`)
    # called after each measured epoch is saved (a search reports and prunes there; what it raises ends the run)
    on_validated: Callable[[int, dict[str, float | None]], None] | None = None


def option_of(setting: str) -> str:
    """The command-line option of a setting (`style_image` -> `--style-image`)."""
    return "--" + setting.replace("_", "-")


PATH_OPTIONS = tuple(option_of(setting) for setting in PATH_SETTINGS)  # files and folders a run reads


def as_options(settings: TrainSettings) -> list[str]:
    """The settings given, as `forklift train` takes them: for a run started as a process of its own."""
    parts: list[str] = []
    for key in TrainSettings.option_names():
        if key not in settings.given:
            continue
        value, option = getattr(settings, key), option_of(key)
        if isinstance(value, bool):
            parts += [option] if value else ["--no-amp"] if key == "amp" else []
        elif isinstance(value, tuple):
            parts += [option, ",".join(map(str, value))]
        else:
            parts += [option, str(value)]
    return parts


def resumed_settings(saved: TrainSettings, given: TrainSettings, checkpoint: Path) -> TrainSettings:
    """The checkpoint's settings; an option given that says otherwise is refused, naming both values."""
    for key in sorted(given.given):
        value, recorded = getattr(given, key), getattr(saved, key)
        if _comparable(value) != _comparable(recorded):
            option = option_of(key)
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


def check_values(settings: TrainSettings) -> None:
    """One line for a setting of the optimiser, schedule or augmentation that cannot work."""
    word(Optimizer, settings.optimizer, where="--optimizer")
    if settings.img is not None and settings.img % 32:
        raise ForkliftError(f"--img {settings.img}: must be a multiple of 32 (the networks' largest stride)")
    if settings.val_every < 1:
        raise ForkliftError(f"--val-every {settings.val_every}: must be at least 1")
    if not 0 < settings.lr < math.inf:
        raise ForkliftError(f"--lr {settings.lr}: must be a finite number above 0")
    if not 0 <= settings.momentum < 1:
        raise ForkliftError(f"--momentum {settings.momentum}: must be from 0 up to (not including) 1")
    if not 0 <= settings.weight_decay < math.inf:
        raise ForkliftError(f"--weight-decay {settings.weight_decay}: must be a finite number of 0 or more")
    if not 0 <= settings.aug_scale < 1:
        raise ForkliftError(f"--aug-scale {settings.aug_scale}: must be from 0 up to (not including) 1")
    if not 0 <= settings.aug_shift <= 0.5:
        raise ForkliftError(f"--aug-shift {settings.aug_shift}: must be from 0 to 0.5 (of the input each way)")
    if not 0 <= settings.aug_hsv < math.inf:
        raise ForkliftError(f"--aug-hsv {settings.aug_hsv}: must be a finite number of 0 or more")
