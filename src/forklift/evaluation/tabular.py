"""How good a tabular model (`forklift ml fit`'s) is on a table: its graph answers the table's rows through
`TabularModel` (ONNX Runtime, torch-free) and the answers are measured against the target column
(`tabular_metrics`); with `out`, the report (`tabular_report`) is written as eval.json and PNG pictures.

`forklift eval MODEL_DIR --data TABLE` calls `evaluate_table`; image models go through `evaluate`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from forklift.errors import ForkliftError
from forklift.evaluation.tabular_metrics import TableClassifierMetrics, classifier_metrics
from forklift.evaluation.tabular_report import write_table_report
from forklift.ml.metrics import RegressorScores, regressor_scores
from forklift.ml.tables import SVMLIGHT_SUFFIXES, TABLE_SUFFIXES, encode_table, plain, read_features
from forklift.model_files.model_dir import holds_tabular_model, open_model_dir
from forklift.model_files.tabular import Scalar
from forklift.runtime.tabular import TabularModel
from forklift.vocabulary import Task


@dataclass(frozen=True)
class TableEvalResult:
    """What `evaluate_table` measured, on what, and which files it wrote."""

    model: str
    data: str
    estimator: str
    target: str
    classes: list[str]  # none for a regressor
    rows: int
    metrics: TableClassifierMetrics | RegressorScores
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # columns left out, values never seen, classes without a row
    task: Task = Task.TABULAR

    def to_json(self) -> dict[str, Any]:
        keys = ("model", "data", "task", "estimator", "target", "classes", "rows", "notes")
        plots = [path.name for path in self.files if path.suffix == ".png"]
        return {**{key: getattr(self, key) for key in keys}, **asdict(self.metrics), "plots": plots}


class _Heard(logging.Handler):
    """What reading and encoding the table warned of (columns left out, values the model never saw), kept for
    eval.json as well as said on stderr."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def evaluate_table(
    model_dir: Path, data: Path, *, target: str | None = None, out: Path | None = None
) -> TableEvalResult:
    """Measure the tabular model in ``model_dir`` on the table ``data``, against its column ``target`` (default:
    the one the model was fitted on); with ``out``, write eval.json and the pictures there."""
    suffixes = ", ".join(TABLE_SUFFIXES + SVMLIGHT_SUFFIXES)
    if model_dir.is_dir() and not holds_tabular_model(model_dir):
        raise ForkliftError(
            f"{data}: a table measures only tabular models ('forklift ml fit'); {model_dir} is not one: an image "
            "model is measured on a data set folder"
        )
    model = open_model_dir(model_dir)
    if data.is_dir():
        raise ForkliftError(f"{data}: a folder; {model_dir} is a tabular model, measured on a table ({suffixes})")
    tabular = TabularModel(model)
    settings = tabular.settings
    column = target or settings.target
    if not column:
        raise ForkliftError(f"{model_dir}: its forklift.json names no target column; --target names the table's")
    heard = _Heard()
    said = logging.getLogger("forklift")  # where the table's reader and the encoder warn
    said.addHandler(heard)
    try:
        table = read_features(data, settings, target=column)
        if table.target is None or table.rows == 0:
            raise ForkliftError(f"{data}: no rows to measure the model on")
        encoded = encode_table(settings, table)
    finally:
        said.removeHandler(heard)
    answer = tabular.answer(encoded)
    classes = model.labels
    notes: list[str] = heard.messages
    metrics: TableClassifierMetrics | RegressorScores
    if settings.classification:
        assert answer.scores is not None  # a classifier's graph gives class scores
        truth = _class_indices(table.target, settings.classes, where=table.source)
        metrics = classifier_metrics(truth, answer.scores, classes=classes, probabilities=settings.probabilities)
        notes += [
            f"class {name!r} has no row in the table: it has no curve, and there is no AUC over all classes"
            for k, name in enumerate(classes)
            if not np.any(truth == k)
        ]
    else:
        truth = _values(table.target, where=table.source)
        metrics = regressor_scores(truth, np.asarray(answer.predictions, dtype=np.float64))
    result = TableEvalResult(
        model.name, str(data), settings.estimator, table.target_name, classes, table.rows, metrics, notes=notes
    )
    return result if out is None else write_table_report(result, truth, answer, out)


def _class_indices(values: np.ndarray, classes: tuple[Scalar, ...], *, where: str) -> np.ndarray:
    """Each row's true class as its index among the model's classes; a value that is none of them is one line
    naming its row (counted from 1, as the table's other errors are)."""
    index = {plain(c): k for k, c in enumerate(classes)}
    found = [index.get(plain(value)) for value in values]
    for row, k in enumerate(found):
        if k is None:
            known = f"is not one of the model's classes ({', '.join(map(str, classes))})"
            shown = "is empty" if _missing(values[row]) else f"{plain(values[row])!r} {known}"
            raise ForkliftError(f"{where}: row {row + 1}: the target {shown}")
    return np.array(found, dtype=np.int64)


def _values(values: np.ndarray, *, where: str) -> np.ndarray:
    """The target of a regressor as numbers; an empty cell, text or an infinite number (1e400) is one line naming
    its row."""
    numbers = values.dtype.kind in "iuf"  # else text, booleans or missing cells among them
    bad = ~np.isfinite(values.astype(np.float64)) if numbers else np.array([not _number(value) for value in values])
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        shown = "is empty" if _missing(values[row]) else f"{plain(values[row])!r} is not a finite number"
        raise ForkliftError(f"{where}: row {row + 1}: the target {shown}")
    return values.astype(np.float64)


def _number(value: Any) -> bool:
    value = plain(value)
    if isinstance(value, str):  # a column that holds a word somewhere is read as text: its numbers are strings
        try:
            value = float(value)
        except ValueError:
            return False
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _missing(value: Any) -> bool:
    value = plain(value)
    return value is None or (isinstance(value, float) and math.isnan(value))
