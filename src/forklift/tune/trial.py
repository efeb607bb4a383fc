"""One trial of a search: a `forklift train` run with the settings Optuna drew, its value and its folder.

The trial reports the metric each time the trainer validates, so that the pruner can stop it early; its value is
the metric of the model directory it wrote (the best validated epoch, evaluated as `forklift eval` does). A trial
that `--minutes` cut short ends pruned, not complete: its value is not what its settings would reach. Its
training output goes to OUT/logs/trial-NNNN.log, so that parallel trials do not mix their lines.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import optuna

from forklift.errors import ForkliftError
from forklift.train.settings import RunOptions, TrainSettings
from forklift.train.trainer import train
from forklift.tune.space import Dimension, draw_settings
from forklift.tune.storage import mark_owner


@dataclass(frozen=True)
class Search:
    """What every worker of a search needs; plain values only, since workers are spawned processes."""

    settings: TrainSettings  # what every trial shares: the data, the network (cfg, model or arch), epochs, img...
    out: Path
    metric: str
    dimensions: tuple[Dimension, ...]
    deadline: float | None = None  # time.time() after which no trial starts and a running one stops

    def folder(self, number: int) -> Path:
        return self.out / "trials" / f"{number:04d}"

    def log(self, number: int) -> Path:
        return self.out / "logs" / f"trial-{number:04d}.log"


def run_trial(search: Search, device: str, trial: optuna.Trial) -> float:
    """Train with the trial's settings; the model directory's metric on val."""
    mark_owner(trial)
    trial.set_user_attr("cpus", sorted(os.sched_getaffinity(0)))
    settings = search.settings.with_options(**draw_settings(list(search.dimensions), trial))
    folder, log = search.folder(trial.number), search.log(trial.number)
    wanted = settings.epochs
    trial.set_user_attr("folder", str(folder))
    log.parent.mkdir(parents=True, exist_ok=True)

    def report(epoch: int, metrics: dict[str, float | None]) -> None:
        value = metrics.get(search.metric)
        if value is None:
            return
        trial.report(value, epoch)
        trial.set_user_attr("epochs", epoch)
        # after the last epoch nothing is left to save: the trial completes, and the sampler learns its value
        if epoch < wanted and trial.should_prune():
            raise optuna.TrialPruned(f"epoch {epoch}: {search.metric} {value:.4f}")

    budget = None if search.deadline is None else max(1.0, search.deadline - time.time())
    try:
        with (
            log.open("w", encoding="utf-8") as handle,
            contextlib.redirect_stdout(handle),
            contextlib.redirect_stderr(handle),
        ):
            train(
                settings,
                folder,
                RunOptions(device=device, time_budget_s=budget, on_validated=report),
            )
    except optuna.TrialPruned:
        shutil.rmtree(folder, ignore_errors=True)  # a pruned trial's weights are of no use
        raise
    except ForkliftError as exc:
        trial.set_user_attr("error", str(exc))
        raise
    ran = _epochs_run(folder)
    trial.set_user_attr("epochs", ran)
    if ran < wanted:  # --minutes ran out inside it: its value is not what its settings would reach
        shutil.rmtree(folder, ignore_errors=True)
        raise optuna.TrialPruned(f"--minutes ran out after epoch {ran} of {wanted}")
    return model_metric(folder, search.metric)


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
