"""A search over a forklift.ml model's parameters (`forklift tune --ml MODEL`): each trial fits the model on the
training table with the parameters Optuna drew and writes its model directory as `forklift ml fit` does; its value
is a metric of the validation table (`--test`).

The space names the estimator's own parameters (snapml's), each drawn as its default is: real or whole numbers,
else as written (`max_features=sqrt,0.5`, `max_depth=2..12`). A boosting machine reports the metric every few
rounds, at the same rounds in every trial so that the pruner compares like with like; the other models fit in one
step and are not pruned. Fits run on the worker's CPUs (its CPU set with `--parallel`).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.study import StudyDirection
from sklearn.base import BaseEstimator, clone

from forklift.errors import ForkliftError
from forklift.ml.boosting import RoundHook
from forklift.ml.estimators import Estimator
from forklift.ml.model_directory import MODELS, check_tables, fit_directory
from forklift.ml.tables import Table, read_table, read_test_table
from forklift.tune import CLASSIFIER_METRICS, MINIMISED, REGRESSOR_METRICS
from forklift.tune.space import Dimension, Kind, Setting, parse_space
from forklift.tune.trial import Steps, StepUnit, TimeUp, report
from forklift.vocabulary import TabularTask

REPORTS = 20  # reports of a trial that boosts the most rounds the space allows
COMBINATIONS = 256  # the most combinations of the other parameters' ends a value of the space is checked with
NOT_DRAWN = ("n_jobs",)  # the worker's CPU set decides it
DEFAULT_SPACES: dict[str, tuple[str, ...]] = {  # snapml's parameters, in ranges that suit most tables
    "logistic": ("regularizer=1e-4..1e2:log",),
    "svm": ("regularizer=1e-4..1e2:log",),
    "ridge": ("regularizer=1e-4..1e2:log",),
    "tree": ("max_depth=2..16", "min_samples_leaf=1..32:log", "max_features=sqrt,log2,0.5,1.0"),
    "forest": (
        "n_estimators=10..200:log",
        "max_depth=2..16",
        "min_samples_leaf=1..16:log",
        "max_features=sqrt,log2,0.5,1.0",
    ),
    "boosting": (
        "num_round=20..300:log",
        "learning_rate=0.01..0.3:log",
        "max_depth=2..10",
        "subsample=0.5..1",
        "colsample_bytree=0.5..1",
        "lambda_l2=1e-3..10:log",
    ),
}


@dataclass(frozen=True)
class TabularJob:
    """Fits of `model` on the `data` table, measured on the `test` table by `metric`."""

    model: str  # a `forklift ml fit --model` choice
    data: Path
    test: Path
    target: str
    task: TabularTask
    metric: str
    seed: int  # every fit's random_state, unless the space draws it
    rounds: int  # the most rounds a trial boosts; 1 for a model that fits in one step

    @property
    def direction(self) -> StudyDirection:
        return StudyDirection.MINIMIZE if self.metric in MINIMISED else StudyDirection.MAXIMIZE

    @property
    def steps(self) -> Steps:
        return Steps(StepUnit.ROUND, every=max(1, self.rounds // REPORTS), last=self.rounds)

    def inputs(self) -> dict[str, str]:
        return {"data": str(self.data.resolve()), "test": str(self.test.resolve()), "model": self.model}

    def draw(self, trial: optuna.Trial, dimensions: tuple[Dimension, ...]) -> dict[str, Any]:
        return {d.name: d.draw(trial) for d in dimensions}

    def run(
        self,
        trial: optuna.Trial,
        drawn: dict[str, Any],
        folder: Path,
        *,
        device: str,
        deadline: float | None,
    ) -> float:
        params = {"random_state": self.seed} | drawn
        train, test = read_tables(self.data, self.test, self.target)

        def measured(rounds: int, metrics: dict[str, float]) -> None:
            if deadline is not None and time.time() > deadline:
                raise TimeUp(f"--minutes ran out after round {rounds}")
            report(trial, metrics[self.metric], rounds, last=self.rounds)

        fitted = fit_directory(
            train,
            folder,
            model=self.model,
            task=self.task,
            params=params,
            threads=-1,  # the CPUs this worker may use
            test=test,
            on_rounds=RoundHook(self.steps.every, measured),
        )
        return fitted.test[self.metric]


def tabular_search(
    *,
    model: str,
    data: Path,
    test: Path,
    target: str | None,
    task: TabularTask | None,
    metric: str | None,
    specs: Sequence[str],
    seed: int,
) -> tuple[TabularJob, tuple[Dimension, ...]]:
    """The job and the space of a search of `model` (`--ml`), or one line saying what does not fit: a parameter the
    estimator does not have, a metric it is not measured by."""
    known = tuple(dict.fromkeys((*CLASSIFIER_METRICS, *REGRESSOR_METRICS)))
    if metric is not None and metric not in known:  # a detector's metric: said before the tables are read
        raise ForkliftError(f"--metric {metric}: a forklift.ml model is measured by one of {', '.join(known)}")
    train, validation = read_tables(data, test, target)
    assert train.target is not None and validation.target is not None  # a CSV's or a libsvm file's is always read
    estimator, settings = check_tables(train, validation, model=model, task=task)
    classification = settings.classification
    scored = CLASSIFIER_METRICS if settings.probabilities else tuple(m for m in CLASSIFIER_METRICS if m != "log_loss")
    names = scored if classification else REGRESSOR_METRICS
    chosen = metric or names[0]
    if chosen not in names:
        raise ForkliftError(f"--metric {chosen}: {type(estimator).__name__} is measured by {', '.join(names)}")
    if chosen == "auc" and (absent := set(train.target.tolist()) - set(validation.target.tolist())):
        raise ForkliftError(f"--metric auc: {test} has no row of class {sorted(absent, key=str)[0]!r}")
    dimensions = tuple(parse_space(specs or DEFAULT_SPACES[model], parameter_settings(estimator)))
    check_space(estimator, dimensions, n_features=settings.width)
    rounds = _most_rounds(dimensions, estimator) if MODELS[model].rounds else 1
    job = TabularJob(
        model=model,
        data=data,
        test=test,
        target=train.target_name,
        task=TabularTask.CLASSIFY if classification else TabularTask.REGRESS,
        metric=chosen,
        seed=seed,
        rounds=rounds,
    )
    return job, dimensions


@functools.lru_cache(maxsize=1)
def read_tables(data: Path, test: Path, target: str | None) -> tuple[Table, Table]:
    """The training and the validation table, read once in each process (a worker runs many trials)."""
    train = read_table(data, target=target)
    return train, read_test_table(test, train)


def parameter_settings(estimator: BaseEstimator) -> dict[str, Setting]:
    """The estimator's parameters a space may draw, each taking what its default is: a real or a whole number,
    else values as written (None, text, true/false)."""
    settings = {}
    for name, default in sorted(estimator.get_params().items()):
        if name in NOT_DRAWN:
            continue
        number = isinstance(default, int | float) and not isinstance(default, bool)
        settings[name] = Setting(Kind.VALUE if not number else Kind.WHOLE if isinstance(default, int) else Kind.REAL)
    return settings


def check_space(estimator: Estimator, dimensions: Sequence[Dimension], *, n_features: int) -> None:
    """Refuse a value of the space that no trial could fit with on a table of ``n_features`` columns, before a
    trial starts: each end of a range and each listed value is checked with the other parameters at their ends and
    listed values, and refused only where no such combination is valid (``min_max_depth=4..8`` is fine beside
    ``max_max_depth=8..12``)."""
    ends = {d.name: _ends(d) for d in dimensions}
    for dimension in dimensions:
        others = [[(name, value) for value in values] for name, values in ends.items() if name != dimension.name]
        for value in ends[dimension.name]:
            errors: list[ValueError] = []
            for combination in itertools.islice(itertools.product(*others), COMBINATIONS):
                try:
                    candidate = clone(estimator).set_params(**dict(combination), **{dimension.name: value})
                    candidate.check_parameters()
                    candidate.check_width(n_features)
                    break
                except ValueError as exc:
                    errors.append(exc)
            else:
                raise ForkliftError(f"--space {dimension.name}: {errors[0]}")


def _ends(dimension: Dimension) -> tuple[Any, ...]:
    """A range's two ends (whole numbers where it draws them) or the listed values."""
    if dimension.choices is not None:
        return dimension.choices
    assert dimension.low is not None and dimension.high is not None
    if dimension.step is not None:
        return int(dimension.low), int(dimension.high)
    return dimension.low, dimension.high


def _most_rounds(dimensions: Sequence[Dimension], estimator: Any) -> int:
    """The most rounds a trial may boost: the space's num_round, else the estimator's."""
    rounds = next((d for d in dimensions if d.name == "num_round"), None)
    if rounds is None:
        return int(estimator.num_round)
    if rounds.choices is not None:
        return int(max(rounds.choices))
    assert rounds.high is not None
    return int(rounds.high)
