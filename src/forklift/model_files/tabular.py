"""A tabular model's settings (forklift.json's ``"tabular"`` key) and the encoding of its input rows.

A tabular model directory holds ``model.onnx`` (the graph that predicts: float32 ``X`` [N, width] to
``prediction`` [N, classes] class scores, or [N, 1] values), the estimator's own file and forklift.json. The
settings name each input feature and its kind: a number (NaN or ``null`` is a missing value, which tree models
take), or a category whose values become one-hot columns. Training and serving encode rows with the same
function here, so a served model reads a row exactly as its training read the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from forklift.errors import ForkliftError

TABULAR_KEY = "tabular"
GRAPH_FILE = "model.onnx"
INPUT = "X"
PREDICTION = "prediction"
Scalar = str | int | float | bool
FLOAT32_MAX = float(np.finfo(np.float32).max)
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

    @property
    def width(self) -> int:
        return len(self.categories) if self.kind is FeatureKind.CATEGORY else 1


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

    @property
    def classification(self) -> bool:
        return bool(self.classes)

    @property
    def width(self) -> int:
        """The number of columns the graph takes (categories one-hot)."""
        return sum(feature.width for feature in self.features)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(feature.name for feature in self.features)

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
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ForkliftError(f"{where}: the {TABULAR_KEY!r} settings are malformed ({exc!r})") from exc


def encode_records(settings: TabularSettings, records: Sequence[Any]) -> np.ndarray:
    """Rows given as JSON gives them (objects by feature name, or arrays in the features' order) as the graph's
    float32 input; a missing or extra feature, or a value of the wrong kind, is one line naming the row and the
    feature."""
    names = settings.names
    table = [_record_values(names, record, index) for index, record in enumerate(records)]
    numbers = [i for i, feature in enumerate(settings.features) if feature.kind is FeatureKind.NUMBER]
    for index, values in enumerate(table):  # JSON's numbers and nulls only: a string or a bool is refused by name
        if {type(values[i]) for i in numbers} - NUMBER_TYPES:
            bad = next(i for i in numbers if type(values[i]) not in NUMBER_TYPES)
            raise ForkliftError(f"row {index}: feature {names[bad]!r}: {values[bad]!r} is not a number")
    grid = np.array([[values[i] for i in numbers] for values in table], dtype=np.float64).reshape(len(table), -1)
    too_big = ~(np.abs(np.nan_to_num(grid)) <= FLOAT32_MAX)  # the graph's float32 would make it infinite
    if too_big.any():
        row, column = (int(i) for i in np.argwhere(too_big)[0])
        value = table[row][numbers[column]]
        raise ForkliftError(f"row {row}: feature {names[numbers[column]]!r}: {value!r} is not a finite float32 number")
    columns: dict[str, np.ndarray] = {names[i]: grid[:, j] for j, i in enumerate(numbers)}
    for i, feature in enumerate(settings.features):
        if feature.kind is FeatureKind.CATEGORY:
            columns[feature.name] = np.array([None if v[i] is None else str(v[i]) for v in table], dtype=object)
    return encode_columns(settings, columns)


def _record_values(names: tuple[str, ...], record: Any, index: int) -> list[Any]:
    """One JSON row's values in the features' order; a missing or extra feature is one line naming it."""
    if isinstance(record, Mapping):
        if len(record) != len(names) or any(name not in record for name in names):
            missing = [name for name in names if name not in record]
            if missing:
                raise ForkliftError(f"row {index}: missing feature {missing[0]!r}")
            extra = [key for key in record if key not in names]
            raise ForkliftError(f"row {index}: unknown feature {extra[0]!r} (features: {', '.join(names)})")
        return [record[name] for name in names]
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
    rare value, as scikit-learn's ``handle_unknown="ignore"``) sets none of its feature's columns."""
    prefix = f"{where}: " if where else ""
    rows = len(next(iter(columns.values()))) if columns else 0
    missing_message = "is empty or null, and this model takes no missing values"
    encoded = np.zeros((rows, settings.width), dtype=np.float32)
    offsets = np.cumsum([0, *(feature.width for feature in settings.features)])[:-1]
    numbers = [(f, int(o)) for f, o in zip(settings.features, offsets, strict=True) if f.kind is FeatureKind.NUMBER]
    if numbers:  # the number features as one block: a request's rows pay for one conversion, not one per feature
        block = np.zeros((rows, len(numbers)))
        for j, (feature, _) in enumerate(numbers):
            block[:, j] = _numbers(columns[feature.name], feature, prefix=prefix, first_row=first_row)
        if not settings.missing_values and np.isnan(block).any():
            row, j = (int(i) for i in np.argwhere(np.isnan(block))[0])
            raise ForkliftError(f"{prefix}row {row + first_row}: feature {numbers[j][0].name!r} {missing_message}")
        encoded[:, [offset for _, offset in numbers]] = block
    for feature, column in zip(settings.features, offsets, strict=True):
        if feature.kind is not FeatureKind.CATEGORY:
            continue
        text = np.array([None if v is None else str(v) for v in columns[feature.name]], dtype=object)
        known = np.isin(text, np.array(feature.categories, dtype=object))
        absent = np.array([v is None for v in text], dtype=bool)
        unknown = ~known & ~absent
        if unknown.any() and refuse_unknown:
            row = int(np.flatnonzero(unknown)[0])
            raise ForkliftError(
                f"{prefix}row {row + first_row}: feature {feature.name!r}: unknown category {text[row]!r}"
            )
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
