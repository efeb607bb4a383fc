"""A tabular model's settings (forklift.json's ``"tabular"`` key) and the encoding of its input rows.

A tabular model directory holds ``model.onnx`` (the graph that predicts: float32 ``X`` [N, width] to
``prediction`` [N, classes] class scores, or [N, 1] values), the estimator's own file and forklift.json. The
settings name each input feature and its kind: a number (NaN or ``null`` is a missing value, which tree models
take), or a category whose values become one-hot columns. Training and serving encode rows with the same
function here, so a served model reads a row exactly as its training read the table.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from itertools import chain
from typing import Any

import numpy as np

from forklift.errors import ForkliftError

TABULAR_KEY = "tabular"
GRAPH_FILE = "model.onnx"
INPUT = "X"
PREDICTION = "prediction"
Scalar = str | int | float | bool
FLOAT32_MAX = float(np.finfo(np.float32).max)
log = logging.getLogger(__name__)
NUMBER_TYPES = {int, float, type(None)}  # what JSON gives for a number or a null (bool is a type of its own)


class FeatureKind(StrEnum):
    NUMBER = "number"
    CATEGORY = "category"


@dataclass(frozen=True)
class Feature:
    """One input column: a number, or a category whose known values each get a one-hot column."""

    name: str
    kind: FeatureKind = FeatureKind.NUMBER
    categories: tuple[str, ...] = ()

    @cached_property
    def width(self) -> int:
        return len(self.categories) if self.kind is FeatureKind.CATEGORY else 1


def input_columns(features: Sequence[Feature]) -> tuple[str, ...]:
    """The graph's input columns in order: a number's name, then ``name=value`` for each known value of a category
    (its one-hot columns)."""
    return tuple(
        chain.from_iterable(
            (f"{f.name}={value}" for value in f.categories) if f.kind is FeatureKind.CATEGORY else (f.name,)
            for f in features
        )
    )


@dataclass(frozen=True)
class TabularSettings:
    """What forklift.json says of a tabular model: its estimator, classes (none for a regressor), features, and
    whether its scores are probabilities and it takes missing values; the metrics measured when it was fitted."""

    estimator: str
    features: tuple[Feature, ...]
    classes: tuple[Scalar, ...] = ()
    probabilities: bool = False
    missing_values: bool = False
    target: str = ""  # the column the model was fitted to predict
    metrics: dict[str, float] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)  # the estimator's options given (--param), else defaults
    libsvm_zero_based: bool | None = None  # the index base of the libsvm file it was fitted on (None: a table)

    @property
    def classification(self) -> bool:
        return bool(self.classes)

    @cached_property
    def width(self) -> int:
        """The number of columns the graph takes (categories one-hot)."""
        return sum(feature.width for feature in self.features)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(feature.name for feature in self.features)

    @cached_property
    def columns(self) -> tuple[str, ...]:
        return input_columns(self.features)

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """Each feature's first column in the graph's input."""
        return tuple(int(o) for o in np.cumsum([0, *(feature.width for feature in self.features)])[:-1])

    @cached_property
    def number_features(self) -> tuple[int, ...]:
        """The indices of the number features among the features."""
        return tuple(i for i, feature in enumerate(self.features) if feature.kind is FeatureKind.NUMBER)

    @cached_property
    def number_columns(self) -> np.ndarray:
        """The graph's input columns of the number features, in the features' order."""
        return np.array([self.offsets[i] for i in self.number_features], dtype=np.intp)

    def to_json(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "features": [
                {"name": f.name, "kind": f.kind.value, **({"categories": list(f.categories)} if f.categories else {})}
                for f in self.features
            ],
            "classes": list(self.classes),
            "probabilities": self.probabilities,
            "missing_values": self.missing_values,
            "target": self.target,
            "metrics": self.metrics,
            "parameters": self.parameters,
            **({} if self.libsvm_zero_based is None else {"libsvm_zero_based": self.libsvm_zero_based}),
        }

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> TabularSettings:
        """The settings from forklift.json's ``"tabular"`` value; a malformed one is one line naming ``where``."""
        try:
            features = tuple(
                Feature(str(f["name"]), FeatureKind(f.get("kind", "number")), tuple(map(str, f.get("categories", ()))))
                for f in data["features"]
            )
            return cls(
                estimator=str(data["estimator"]),
                features=features,
                classes=tuple(data.get("classes", ())),
                probabilities=bool(data.get("probabilities", False)),
                missing_values=bool(data.get("missing_values", False)),
                target=str(data.get("target", "")),
                metrics={str(k): float(v) for k, v in data.get("metrics", {}).items()},
                parameters=dict(data.get("parameters", {})),
                libsvm_zero_based=None if data.get("libsvm_zero_based") is None else bool(data["libsvm_zero_based"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ForkliftError(f"{where}: the {TABULAR_KEY!r} settings are malformed ({exc!r})") from exc


def encode_records(settings: TabularSettings, records: Sequence[Any]) -> np.ndarray:
    """Rows given as JSON gives them (objects by feature name, or arrays in the features' order) as the graph's
    float32 input; a missing or extra feature, or a value of the wrong kind, is one line naming the row and the
    feature."""
    names = settings.names
    table = [_record_values(names, record, index) for index, record in enumerate(records)]
    numbers = settings.number_features
    number_rows = table if len(numbers) == len(names) else [[values[i] for i in numbers] for values in table]
    if not set(map(type, chain.from_iterable(number_rows))) <= NUMBER_TYPES:  # one pass over every value
        row, j = next((r, j) for r, values in enumerate(number_rows) for j, v in enumerate(values)
                      if type(v) not in NUMBER_TYPES)  # fmt: skip
        value = number_rows[row][j]  # JSON's numbers and nulls only: a string or a bool is refused by name
        as_sent = json.dumps(value, default=repr)  # `true`, as the request wrote it, not Python's True
        raise ForkliftError(f"row {row}: feature {names[numbers[j]]!r}: {as_sent} is not a number")
    grid = np.array(number_rows, dtype=np.float64).reshape(len(table), -1)
    categories = {
        feature.name: [values[i] for values in table]
        for i, feature in enumerate(settings.features)
        if feature.kind is FeatureKind.CATEGORY
    }
    return _encoded(settings, grid, categories, prefix="", first_row=0, refuse_unknown=True)


def _record_values(names: tuple[str, ...], record: Any, index: int) -> list[Any]:
    """One JSON row's values in the features' order; a missing or extra feature is one line naming it."""
    if isinstance(record, Mapping):
        if record.keys() != set(names):
            missing = [name for name in names if name not in record]
            extra = [key for key in record if key not in names]
            problem = f"missing feature {missing[0]!r}" if missing else f"unknown feature {extra[0]!r}"
            if missing and extra:  # a misspelt name: both halves help
                problem += f", and {extra[0]!r} is not one"
            raise ForkliftError(f"row {index}: {problem} (features: {', '.join(names)})")
        return list(map(record.__getitem__, names))
    if isinstance(record, Sequence) and not isinstance(record, str):
        if len(record) != len(names):
            raise ForkliftError(f"row {index}: {len(record)} values for {len(names)} features ({', '.join(names)})")
        return list(record)
    raise ForkliftError(f"row {index}: a row is an object of features or an array of values, not {record!r}")


def encode_columns(
    settings: TabularSettings,
    columns: Mapping[str, np.ndarray],
    *,
    where: str = "",
    first_row: int = 0,
    refuse_unknown: bool = True,
) -> np.ndarray:
    """A whole table's columns (numbers as floats with NaN for missing, categories as strings or None) as the
    graph's input: the same encoding as :func:`encode_records`, a column at a time. A bad value's error starts
    with ``where`` (a file) and counts rows from ``first_row`` (1 for a file's rows, 0 for a JSON array's). A
    category value the model never saw is refused (a request's typo), or with ``refuse_unknown=False`` (a table's
    rare value, as scikit-learn's ``handle_unknown="ignore"``) sets none of its feature's columns, said once per
    feature on the log."""
    prefix = f"{where}: " if where else ""
    rows = len(next(iter(columns.values()))) if columns else 0
    block = np.zeros((rows, len(settings.number_features)))
    for j, feature in enumerate(f for f in settings.features if f.kind is FeatureKind.NUMBER):
        block[:, j] = _numbers(columns[feature.name], feature, prefix=prefix, first_row=first_row)
    categories = {f.name: columns[f.name] for f in settings.features if f.kind is FeatureKind.CATEGORY}
    return _encoded(settings, block, categories, prefix=prefix, first_row=first_row, refuse_unknown=refuse_unknown)


def _encoded(
    settings: TabularSettings,
    block: np.ndarray,
    categories: Mapping[str, Sequence[Any] | np.ndarray],
    *,
    prefix: str,
    first_row: int,
    refuse_unknown: bool,
) -> np.ndarray:
    """The graph's input from the number features as one float64 block (a request's rows pay for one conversion,
    not one per feature) and the category features' columns, one-hot."""
    missing_message = "is empty or null, and this model takes no missing values"
    encoded = np.zeros((len(block), settings.width), dtype=np.float32)
    if not settings.missing_values and np.isnan(block).any():
        row, j = (int(i) for i in np.argwhere(np.isnan(block))[0])
        name = settings.names[settings.number_features[j]]
        raise ForkliftError(f"{prefix}row {row + first_row}: feature {name!r} {missing_message}")
    too_big = ~(np.abs(np.nan_to_num(block)) <= FLOAT32_MAX)  # the graph's float32 would make it infinite
    if too_big.any():  # a request's or a file's: served, predicted and measured alike
        row, j = (int(i) for i in np.argwhere(too_big)[0])
        name = settings.names[settings.number_features[j]]
        value = float(block[row, j])
        where = f"{prefix}row {row + first_row}: feature {name!r}"
        raise ForkliftError(f"{where}: {value!r} is not a finite float32 number")
    encoded[:, settings.number_columns] = block
    for feature, column in zip(settings.features, settings.offsets, strict=True):
        if feature.kind is not FeatureKind.CATEGORY:
            continue
        text = category_text(categories[feature.name])
        known = np.isin(text, np.array(feature.categories, dtype=object))
        absent = np.array([v is None for v in text], dtype=bool)
        unknown = ~known & ~absent
        if unknown.any() and refuse_unknown:
            row = int(np.flatnonzero(unknown)[0])
            known_values = ", ".join(repr(value) for value in feature.categories[:8])
            more = ", ..." if len(feature.categories) > 8 else ""
            raise ForkliftError(
                f"{prefix}row {row + first_row}: feature {feature.name!r}: unknown category {text[row]!r} "
                f"(the model knows {known_values}{more})"
            )
        if unknown.any():
            unseen = Counter(text[unknown])
            shown = ", ".join(repr(value) for value, _ in unseen.most_common(3)) + (", ..." if len(unseen) > 3 else "")
            count = int(unknown.sum())
            rows, they = ("1 row holds a value", "it sets") if count == 1 else (f"{count} rows hold values", "they set")
            log.warning(
                "%sfeature %r: %s the model never saw (%s): %s none of its columns",
                prefix, feature.name, rows, shown, they,
            )  # fmt: skip
        if absent.any() and not settings.missing_values:
            row = int(np.flatnonzero(absent)[0])
            raise ForkliftError(f"{prefix}row {row + first_row}: feature {feature.name!r} {missing_message}")
        index = {category: i for i, category in enumerate(feature.categories)}
        one_hot = encoded[:, column : column + feature.width]
        rows_known = np.flatnonzero(known)
        one_hot[rows_known, [index[t] for t in text[rows_known]]] = 1.0
        one_hot[absent] = np.nan
    return encoded


def _numbers(values: np.ndarray, feature: Feature, *, prefix: str, first_row: int) -> np.ndarray:
    """A number feature's column as float64 (NaN missing); a cell that is not a number is one line naming it."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        for row, value in enumerate(values):
            try:
                float(value if value is not None else "nan")
            except (TypeError, ValueError):
                raise ForkliftError(
                    f"{prefix}row {row + first_row}: feature {feature.name!r}: {value!r} is not a number"
                ) from None
        raise


def category_text(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """A category feature's values as text, None for a missing one: a null, or a NaN (a table's column that is
    empty in every row is read as numbers, all NaN)."""
    return np.array([None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in values],
                    dtype=object)  # fmt: skip
