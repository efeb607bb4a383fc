"""One trial of a search, whatever it runs: the job (a training run, `forklift.tune.training`, or a fit of a table,
`forklift.tune.tabular`) with the settings Optuna draws, in the trial's own folder, its output in its own log
(OUT/logs/trial-NNNN.log, so that parallel trials do not mix their lines).

A job reports its metric after some of its steps (epochs, boosting rounds) so that the pruner can stop a hopeless
trial; a pruned trial's folder is removed, a failed one records why. A trial drawn with the settings of a complete
one takes its value without running (each run of the same settings is the same run: the seed is the search's).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from forklift.errors import ForkliftError
from forklift.tune.space import Dimension
from forklift.tune.storage import mark_owner

TIMED_OUT = "timed_out"  # a trial's user attribute: why it stopped, when --minutes stopped it
SAME_AS = "same_as"  # a trial's user attribute: the complete trial whose settings (and so value) it had


class TimeUp(optuna.TrialPruned):
    """A trial stopped by --minutes: pruned (its value is not what its settings reach), and said so."""


class StepUnit(StrEnum):
    """What a job's step is, as the report names it."""

    EPOCH = "epoch"
    ROUND = "round"


@dataclass(frozen=True)
class Steps:
    """When a job reports: every `every` units, up to `last` at most (the pruners' horizon)."""

    unit: StepUnit
    every: int
    last: int


class Job(Protocol):
    """What each trial of a search runs and how it is measured."""

    @property
    def metric(self) -> str: ...

    @property
    def direction(self) -> StudyDirection: ...

    @property
    def steps(self) -> Steps: ...

    def inputs(self) -> dict[str, str]:
        """What the study must keep measuring on: resuming it on other data is refused."""
        ...

    def draw(self, trial: optuna.Trial, dimensions: tuple[Dimension, ...]) -> dict[str, Any]:
        """The trial's settings, drawn from the space."""
        ...

    def run(
        self,
        trial: optuna.Trial,
        drawn: dict[str, Any],
        folder: Path,
        *,
        device: str,
        deadline: float | None,
    ) -> float:
        """Write the model directory of the `drawn` settings in `folder` on `device` (reporting the metric through
        `report`), and return its metric; after `deadline` (time.time()) a running trial ends pruned."""
        ...


@dataclass(frozen=True)
class Search:
    """What every worker of a search needs; plain values only, since workers are spawned processes."""

    job: Job
    out: Path
    dimensions: tuple[Dimension, ...]
    deadline: float | None = None  # time.time() after which no trial starts and a running one stops

    def folder(self, number: int) -> Path:
        return self.out / "trials" / f"{number:04d}"

    def log(self, number: int) -> Path:
        return self.out / "logs" / f"trial-{number:04d}.log"


def run_trial(search: Search, device: str, trial: optuna.Trial) -> float:
    """Run the job with the trial's settings; its metric. Settings a complete trial had already (a sampler may draw
    them again on a small space, or in a resumed search) are not run again: the trial takes that trial's value."""
    mark_owner(trial)
    trial.set_user_attr("cpus", sorted(os.sched_getaffinity(0)))
    drawn = search.job.draw(trial, search.dimensions)
    twin = same_settings(trial)
    if twin is not None and twin.value is not None:
        trial.set_user_attr(SAME_AS, twin.number)
        return twin.value
    folder, log = search.folder(trial.number), search.log(trial.number)
    trial.set_user_attr("folder", str(folder))
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with (
            log.open("w", encoding="utf-8") as handle,
            contextlib.redirect_stdout(handle),
            contextlib.redirect_stderr(handle),
        ):
            return search.job.run(trial, drawn, folder, device=device, deadline=search.deadline)
    except optuna.TrialPruned as exc:
        if isinstance(exc, TimeUp):
            trial.set_user_attr(TIMED_OUT, str(exc))
        shutil.rmtree(folder, ignore_errors=True)  # a pruned trial's model is of no use
        raise
    except ForkliftError as exc:
        trial.set_user_attr("error", str(exc))
        raise


def same_settings(trial: optuna.Trial) -> FrozenTrial | None:
    """The first complete trial of the study with the settings drawn for `trial`."""
    complete = trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return next((t for t in complete if t.number != trial.number and t.params == trial.params), None)


def report(trial: optuna.Trial, value: float, step: int, *, last: int) -> None:
    """Give the pruner the metric after `step`; it may stop the trial, but not after its `last` step: then nothing
    is left to save, so the trial completes and the sampler learns its value."""
    trial.report(value, step)
    if step < last and trial.should_prune():
        raise optuna.TrialPruned(f"step {step}: {value:.4g}")
