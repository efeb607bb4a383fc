"""A search over training settings: each trial is a `forklift train` run with the settings Optuna drew over the
search's own.

The trial reports the metric each time the trainer validates, so that the pruner can stop it early; its value is
the metric of the model directory it wrote (the best validated epoch, evaluated as `forklift eval` does). A trial
that `--minutes` cut short ends pruned, not complete: its value is not what its settings would reach.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.study import StudyDirection

from forklift.errors import ForkliftError
from forklift.train.optimizers import USES_MOMENTUM
from forklift.train.settings import RunOptions, TrainSettings, check_values
from forklift.train.trainer import train
from forklift.tune.space import Dimension, Kind, Setting, parse_space
from forklift.tune.trial import Steps, StepUnit, TimeUp, report
from forklift.vocabulary import Optimizer, Task, words

REAL = Setting(Kind.REAL)
SETTINGS: dict[str, Setting] = {  # what a space may draw: training settings, as `forklift train` takes them
    "lr": REAL,
    "momentum": REAL,
    "weight_decay": REAL,
    "aug_scale": REAL,
    "aug_shift": REAL,
    "aug_hsv": REAL,
    "batch": Setting(Kind.WHOLE, least=1),
    "epochs": Setting(Kind.WHOLE, least=1),
    "img": Setting(Kind.WHOLE, least=32, step=32),
    "optimizer": Setting(Kind.WORD, words=words(Optimizer)),
    "mosaic": Setting(Kind.WORD, words=("on", "off")),
}
DEFAULTS: dict[Task, tuple[str, ...]] = {  # spaces that make sense with no --space at all
    Task.DETECT: ("lr=1e-4..1e-2:log", "optimizer=adamw,momentum", "momentum=0.8..0.98", "batch=8,16"),
    Task.CLASSIFY: ("lr=1e-4..1e-2:log", "optimizer=adamw,momentum,rmsprop", "momentum=0.8..0.98", "batch=16,32"),
    Task.SEGMENT: ("lr=1e-4..1e-2:log", "optimizer=adamw,adam", "weight_decay=1e-5..1e-2:log", "batch=4,8"),
}


@dataclass(frozen=True)
class TrainingJob:
    """Training runs with `settings` (the data, the network, epochs, img...: what every trial shares), measured by
    a val metric of the data set's task (mAP, top-1, mIoU: more is better)."""

    settings: TrainSettings
    metric: str

    @property
    def direction(self) -> StudyDirection:
        return StudyDirection.MAXIMIZE

    @property
    def steps(self) -> Steps:
        return Steps(StepUnit.EPOCH, every=self.settings.val_every, last=self.settings.epochs)

    def inputs(self) -> dict[str, str]:
        assert self.settings.data is not None  # the CLI requires --data
        given = sorted(name for name in self.settings.given if name != "data")
        values = {name: getattr(self.settings, name) for name in given}
        fixed = " ".join(f"{name}={v.resolve() if isinstance(v, Path) else v}" for name, v in values.items())
        return {"data": str(self.settings.data.resolve()), "settings": fixed or "(the defaults)"}

    def draw(self, trial: optuna.Trial, dimensions: tuple[Dimension, ...]) -> dict[str, Any]:
        return draw_settings(dimensions, trial)

    def run(
        self,
        trial: optuna.Trial,
        drawn: dict[str, Any],
        folder: Path,
        *,
        device: str,
        deadline: float | None,
    ) -> float:
        settings = self.settings.with_options(**drawn)
        wanted = settings.epochs

        def validated(epoch: int, metrics: dict[str, float | None]) -> None:
            value = metrics.get(self.metric)
            if value is not None:
                trial.set_user_attr("epochs", epoch)
                report(trial, value, epoch, last=wanted)

        budget = None if deadline is None else max(1.0, deadline - time.time())
        train(settings, folder, RunOptions(device=device, time_budget_s=budget, on_validated=validated))
        ran = _epochs_run(folder)
        trial.set_user_attr("epochs", ran)
        if ran < wanted:  # --minutes ran out inside it: its value is not what its settings would reach
            raise TimeUp(f"--minutes ran out after epoch {ran} of {wanted}")
        return model_metric(folder, self.metric)


def training_space(specs: Sequence[str], task: Task) -> list[Dimension]:
    """The dimensions of `--space` options, or the task's defaults; momentum needs an optimiser that uses it."""
    dimensions = parse_space(specs or DEFAULTS[task], SETTINGS)
    optimisers = next((d.choices or () for d in dimensions if d.name == "optimizer"), ())
    if any(d.name == "momentum" for d in dimensions) and not set(optimisers) & set(USES_MOMENTUM):
        raise ForkliftError("--space momentum: needs an optimizer with momentum in the space (momentum, rmsprop)")
    for dimension in dimensions:  # a value `forklift train` refuses would fail every trial that draws it
        if SETTINGS[dimension.name].kind is Kind.WORD:
            continue
        for value in dimension.choices if dimension.choices is not None else (dimension.low, dimension.high):
            try:
                check_values(replace(TrainSettings(), **{dimension.name: value}))
            except ForkliftError as exc:
                raise ForkliftError(f"--space {dimension.name}: {exc}") from exc
    return dimensions


def draw_settings(dimensions: Sequence[Dimension], trial: Any) -> dict[str, Any]:
    """A trial's training settings: each dimension drawn, momentum only where the optimiser uses it."""
    settings: dict[str, Any] = {}
    for dimension in sorted(dimensions, key=lambda d: d.name == "momentum"):  # the optimiser first
        if dimension.name == "momentum" and settings.get("optimizer", Optimizer.ADAMW) not in USES_MOMENTUM:
            continue
        settings[dimension.name] = dimension.draw(trial)
    if "mosaic" in settings:
        settings["mosaic"] = settings["mosaic"] == "on"
    return settings


def model_metric(folder: Path, metric: str) -> float:
    """The metric of the trial's model directory on val, from the eval.json training wrote."""
    path = folder / "eval" / "eval.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get(metric)
    except (OSError, ValueError) as exc:
        raise ForkliftError(f"{path}: no evaluation to read ({exc}); does the data set have val images?") from exc
    if value is None:
        raise ForkliftError(f"{path}: has no {metric}")
    return float(value)


def _epochs_run(folder: Path) -> int:
    with (folder / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        return sum(1 for _ in csv.DictReader(handle))
