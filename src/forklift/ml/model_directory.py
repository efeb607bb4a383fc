"""`forklift ml fit`'s model directory: a forklift.ml estimator fitted on a table and written as ``model.onnx`` (the
graph that predicts, which `forklift serve` and `forklift ml predict` run), ``model.pkl`` (the estimator itself,
for Python: a pickle, so open only your own) and forklift.json (task ``tabular``, the features, classes and the
metrics measured at fit)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

import forklift.ml
from forklift.errors import ForkliftError
from forklift.ml.boosting import RoundHook
from forklift.ml.column_scaling import ColumnScaling
from forklift.ml.estimators import Estimator
from forklift.ml.metrics import ClassifierScores, RegressorScores, classifier_scores, regressor_scores
from forklift.ml.tables import Table, encode_table, infer_features, plain
from forklift.model_files.model_config import ModelConfig, save_config
from forklift.model_files.tabular import GRAPH_FILE, TABULAR_KEY, TabularSettings
from forklift.vocabulary import TabularTask, Task

ESTIMATOR_FILE = "model.pkl"


@dataclass(frozen=True)
class ModelKind:
    """One ``--model`` choice: the names of its classifier and regressor in forklift.ml (None where there is none),
    loaded when one is made: a tree's fit need not import the linear models' torch (1.3 s)."""

    classifier: str | None
    regressor: str | None
    trees: bool  # takes missing values (unless boosting with ridge rounds)
    rounds: bool = False  # fits round by round (``num_round``), showing the model so far to ``fit(on_rounds=...)``
    linear: bool = False  # fits an intercept unless told not to, on standardised numbers (forklift.ml.column_scaling)

    def estimator_class(self, *, classification: bool) -> type[Estimator]:
        name = self.classifier if classification else self.regressor
        assert name is not None  # is_classification chose a task the model does
        chosen: type[Estimator] = getattr(forklift.ml, name)
        return chosen


MODELS = {
    "logistic": ModelKind("LogisticRegression", None, trees=False, linear=True),
    "svm": ModelKind("SupportVectorMachine", None, trees=False, linear=True),
    "ridge": ModelKind(None, "LinearRegression", trees=False, linear=True),
    "tree": ModelKind("DecisionTreeClassifier", "DecisionTreeRegressor", trees=True),
    "forest": ModelKind("RandomForestClassifier", "RandomForestRegressor", trees=True),
    "boosting": ModelKind("BoostingMachineClassifier", "BoostingMachineRegressor", trees=True, rounds=True),
}
CLASSES_FOR_GUESS = 20  # a target of whole numbers with at most this many values is read as classes
# Where a table's model differs from snapml's defaults: a linear model of a table's columns wants an intercept.
LINEAR_DEFAULTS: dict[str, Any] = {"fit_intercept": True}


@dataclass(frozen=True)
class FitReport:
    settings: TabularSettings
    train: dict[str, float]
    test: dict[str, float]


def is_classification(model: str, train: Table, task: TabularTask | None) -> bool:
    """Classes or values: ``--task`` when given, else what the model does, else what the target looks like.

    A model that only classifies refuses a target that looks like values (a fraction, or more whole numbers than
    classes usually are) rather than fit each value as a class of its own.
    """
    kind = MODELS[model]
    if task is not None:
        wanted = task is TabularTask.CLASSIFY
        if (kind.classifier if wanted else kind.regressor) is None:
            raise ForkliftError(f"--task {task}: --model {model} does not {task}")
        return wanted
    assert train.target is not None
    target = train.target
    classes = target.dtype == object or target.dtype == bool
    if target.dtype == object:
        _refuse_a_word_among_values(train)
    if not classes:
        known = target[np.isfinite(target)]  # an empty cell is _target's to name
        classes = _look_like_classes(known)
    if kind.regressor is None and not classes:
        *others, last = [name for name, other in MODELS.items() if other.regressor is not None]
        regressors = f"{', '.join(others)} or {last}"
        raise ForkliftError(
            f"{train.source}: the target {train.target_name!r} holds values ({len(np.unique(known))} distinct, "
            f"e.g. {plain(known[0])!r}), not classes: --model {model} classifies; for values use --model "
            f"{regressors}, or give --task classify to read each value as a class"
        )
    if kind.regressor is None or kind.classifier is None:
        return kind.classifier is not None
    return classes


def _look_like_classes(numbers: np.ndarray) -> bool:
    """Whether a target's numbers read as class labels: whole, and few of them."""
    return bool(np.all(np.equal(np.mod(numbers, 1), 0)) and len(np.unique(numbers)) <= CLASSES_FOR_GUESS)


def _refuse_a_word_among_values(train: Table) -> None:
    """A target of values (numbers, not few whole ones) with a word in it is a mistake in a row, not a classifier's
    labels: each value would become a class (hundreds of them). ``--task classify`` asks for that all the same."""
    assert train.target is not None
    cells = pd.Series(train.target)
    numbers = pd.to_numeric(cells, errors="coerce")
    words = cells.notna() & numbers.isna()
    known = numbers.dropna().to_numpy()
    if not words.any() or len(known) < len(cells) / 2:
        return
    if _look_like_classes(known):
        return  # few whole numbers and a word: labels, such as 0, 1 and "unknown"
    row = int(np.flatnonzero(words.to_numpy())[0])
    raise ForkliftError(
        f"{train.source}: row {row + 1}: the target {train.target_name!r} holds {cells.iloc[row]!r} among "
        f"{len(np.unique(known))} distinct numbers: correct the row, or give --task classify to read each value as a "
        "class"
    )


def make_estimator(model: str, *, classification: bool, params: dict[str, Any], threads: int) -> Estimator:
    """The estimator of ``--model`` with ``--param`` values; an unknown parameter is one line listing the known, a
    value out of its parameter's range one line naming it."""
    chosen = MODELS[model].estimator_class(classification=classification)
    estimator = chosen(n_jobs=threads)
    known = estimator.get_params()
    unknown = [key for key in params if key not in known]
    if unknown:
        name = chosen.__name__
        raise ForkliftError(f"--param {unknown[0]}: {name} has no such parameter ({', '.join(sorted(known))})")
    estimator.set_params(**params)
    try:
        estimator.check_parameters()
    except ValueError as exc:
        raise ForkliftError(str(exc)) from exc
    return estimator


def check_params(model: str, *, task: TabularTask | None, params: dict[str, Any], threads: int) -> None:
    """Refuse ``--param`` values before a table is read, as :func:`make_estimator` would: those no estimator of
    ``model`` for ``task`` takes (the task not given: neither its classifier nor its regressor)."""
    kind = MODELS[model]
    tasks = [
        wanted
        for wanted, name in ((True, kind.classifier), (False, kind.regressor))
        if name is not None and (task is None or wanted is (task is TabularTask.CLASSIFY))
    ]
    refusals = []
    for classification in tasks:
        try:
            make_estimator(model, classification=classification, params=_with_defaults(model, params), threads=threads)
            return
        except ForkliftError as exc:
            refusals.append(exc)
    if refusals:
        raise refusals[0]


def _with_defaults(model: str, params: dict[str, Any]) -> dict[str, Any]:
    """``--param`` values over forklift's defaults for a table's ``model``."""
    return (LINEAR_DEFAULTS if MODELS[model].linear else {}) | params


def fit_directory(
    train: Table,
    out: Path,
    *,
    model: str,
    task: TabularTask | None,
    params: dict[str, Any],
    threads: int,
    test: Table | None = None,
    stage: Callable[[str], None] = lambda _: None,
    on_rounds: RoundHook[dict[str, float]] | None = None,
) -> FitReport:
    """Fit ``--model`` on ``train`` and write the model directory ``out``; measure on train and ``test``.
    ``on_rounds`` gets the test table's metrics of the model so far while a model that fits round by round fits
    (other models fit in one step and never call it)."""
    estimator, settings, y = _prepared(train, model=model, task=task, params=params, threads=threads)
    classification = settings.classification
    stage("encoding")
    X = encode_table(settings, train)
    measured = None if test is None else _encoded_test(test, settings, classification=classification)
    watch = None
    if on_rounds is not None and measured is not None and MODELS[model].rounds:
        watch = _measuring(on_rounds, measured, settings)
    stage("fitting")
    scaling = _scaling(estimator, X, settings) if MODELS[model].linear else None
    try:
        if scaling is not None:
            estimator.fit(scaling.apply(X), y)
            scaling.fold(estimator)
        else:
            estimator.fit(X, y) if watch is None else estimator.fit(X, y, on_rounds=watch)
    except ValueError as exc:  # scikit-learn's and forklift.ml's checks of options and data: one line each
        message = str(exc).strip().splitlines()[0]
        named = message if message.startswith(settings.estimator) else f"{settings.estimator}: {message}"
        raise ForkliftError(named) from exc
    stage("measuring")
    measured_train = measure(estimator, X, y, settings)
    measured_test = {} if measured is None else measure(estimator, *measured, settings)
    metrics = {f"train_{k}": v for k, v in measured_train.items()} | {f"test_{k}": v for k, v in measured_test.items()}
    settings = replace(settings, metrics=metrics)
    stage("writing")
    write_directory(estimator, settings, out)
    return FitReport(settings, measured_train, measured_test)


def check_tables(
    train: Table, test: Table, *, model: str, task: TabularTask | None
) -> tuple[Estimator, TabularSettings]:
    """Refuse what :func:`fit_directory` would refuse of the two tables (a bad target, a test table without a
    feature or with a class the training table lacks) before a search starts trials that would each fail on it;
    the estimator with its defaults and the model's settings, as a fit would make them."""
    estimator, settings, _ = _prepared(train, model=model, task=task, params={}, threads=1)
    _encoded_test(test, settings, classification=settings.classification)
    return estimator, settings


def _prepared(
    train: Table, *, model: str, task: TabularTask | None, params: dict[str, Any], threads: int
) -> tuple[Estimator, TabularSettings, np.ndarray]:
    """The estimator to fit, the model's settings (features, classes) and the target, from the training table."""
    if train.target is None:
        raise ForkliftError(f"{train.source}: no target column")
    classification = is_classification(model, train, task)
    y = _target(train, classification=classification)
    if classification and len(np.unique(y)) < 2:
        raise ForkliftError(
            f"{train.source}: the target {train.target_name!r} holds one class ({plain(y[0])!r}) in every row; a "
            "classifier learns from two or more"
        )
    params = _with_defaults(model, params)
    estimator = make_estimator(model, classification=classification, params=params, threads=threads)
    settings = TabularSettings(
        estimator=type(estimator).__name__,
        features=infer_features(train),
        classes=tuple(plain(c) for c in np.unique(y)) if classification else (),
        probabilities=hasattr(estimator, "predict_proba"),
        # a ridge round reads every feature, so a boosting machine that may draw one takes no missing values
        missing_values=MODELS[model].trees and estimator.get_params().get("tree_select_probability", 1.0) >= 1,
        target=train.target_name,
        parameters=dict(params),
        libsvm_zero_based=train.zero_based,
    )
    return estimator, settings, y


def _scaling(estimator: BaseEstimator, X: np.ndarray, settings: TabularSettings) -> ColumnScaling | None:
    """How a linear model's number columns are standardised for its fit (centred where it fits an intercept to take
    the centring back); None where the scaling could not be folded into its coefficients: rows normalised to unit
    length or the RBF feature map."""
    params = estimator.get_params()
    if params["normalize"] or params["kernel"] != "linear":
        return None
    return ColumnScaling.of(X, settings.number_columns, center=bool(params["fit_intercept"]))


def _measuring(
    on_rounds: RoundHook[dict[str, float]], test: tuple[np.ndarray, np.ndarray], settings: TabularSettings
) -> RoundHook[BaseEstimator]:
    """The estimator's hook: ``on_rounds`` with the test table's metrics of the model so far."""
    return RoundHook(on_rounds.every, lambda rounds, model: on_rounds.call(rounds, measure(model, *test, settings)))


def _encoded_test(test: Table, settings: TabularSettings, *, classification: bool) -> tuple[np.ndarray, np.ndarray]:
    """The test table as the model reads it; a missing feature or a class the training table lacks is one line."""
    missing = [name for name in settings.names if name not in test.columns]
    if missing:
        raise ForkliftError(f"{test.source}: no column {missing[0]!r}, a feature of the training table")
    y = _target(test, classification=classification)
    if classification:
        values = y.tolist()
        unknown = [row for row, value in enumerate(values) if value not in settings.classes]
        if unknown:
            row = unknown[0]
            value = values[row]
            raise ForkliftError(f"{test.source}: row {row + 1}: {value!r} is not a class of the training table")
    return encode_table(settings, test), y


def _target(table: Table, *, classification: bool) -> np.ndarray:
    """The table's target as the estimator takes it; an empty cell is one line naming the file and row."""
    values = table.target
    if values is None:
        raise ForkliftError(f"{table.source}: no target column")
    empty = np.array([v is None or (isinstance(v, float) and not np.isfinite(v)) for v in values.tolist()])
    if empty.any():
        row = int(np.flatnonzero(empty)[0])
        raise ForkliftError(f"{table.source}: row {row + 1}: the target {table.target_name!r} is empty or not finite")
    if classification:
        return np.array([plain(v) for v in values], dtype=object if values.dtype == object else values.dtype)
    numbers = pd.to_numeric(pd.Series(values), errors="coerce")
    if numbers.isna().any():  # the empty cells were refused above: these are words
        row = int(np.flatnonzero(numbers.isna().to_numpy())[0])
        raise ForkliftError(
            f"{table.source}: row {row + 1}: the target {table.target_name!r} holds {plain(values[row])!r}, not a "
            "number: a regressor predicts numbers"
        )
    return numbers.to_numpy(dtype=np.float64)


def measure(estimator: BaseEstimator, X: np.ndarray, y: np.ndarray, settings: TabularSettings) -> dict[str, float]:
    """Accuracy, AUC and log-loss (where there are probabilities) for classes; RMSE, MAE and R² for values."""
    if not settings.classification:
        scores: ClassifierScores | RegressorScores = regressor_scores(y, estimator.predict(X))
    else:
        classes = estimator.classes_
        # the predicted class is the highest scored: one pass of the model, not two
        ranked = estimator.predict_proba(X) if settings.probabilities else estimator.decision_function(X)
        if ranked.ndim == 1:  # two classes' decision values: the second class's score
            ranked = np.column_stack([-ranked, ranked])
        predicted = classes[ranked.argmax(axis=1)]
        scores = classifier_scores(y, predicted, ranked, labels=list(classes), probabilities=settings.probabilities)
    return {name: value for name, value in asdict(scores).items() if value is not None}


def write_directory(estimator: BaseEstimator, settings: TabularSettings, out: Path) -> None:
    """The graph, the estimator's pickle and forklift.json, in ``out`` (made if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    estimator.export_model(out / GRAPH_FILE, output_type="onnx")
    with (out / ESTIMATOR_FILE).open("wb") as stream:
        pickle.dump(estimator, stream)
    save_config(out, ModelConfig(task=Task.TABULAR, extra={TABULAR_KEY: settings.to_json()}))
