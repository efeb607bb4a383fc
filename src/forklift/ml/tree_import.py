"""Tree models other tools wrote, read as a :class:`TreeEnsemble`: XGBoost (JSON or UBJSON, ``"xgb_json"``),
LightGBM (its text format, ``"lightgbm"``), ONNX tree ensembles (``"onnx"``) and PMML tree models (``"pmml"``), as
snapml's ``import_model`` names them."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from forklift.ml.tree_ensemble import Link, ReadTrees, TreeEnsemble
from forklift.ml.tree_onnx import read_onnx_file
from forklift.ml.tree_pmml_read import read_pmml_file
from forklift.ml.tree_xgboost import read_model_file

IMPORT_TYPES = ("xgb_json", "lightgbm", "onnx", "pmml")


class Task(enum.Enum):
    CLASSIFICATION = "classification"
    REGRESSION = "regression"


@dataclass(frozen=True)
class ImportedModel:
    ensemble: TreeEnsemble
    task: Task
    n_classes: int  # 0 for regression
    labels: np.ndarray | None = None  # the classes' labels where the file names them
    feature_names: tuple[str, ...] = ()  # the features' names where the file names them


def read_model(path: Path, input_type: str) -> ImportedModel:
    """The model in ``path``, of ``input_type`` (one of IMPORT_TYPES), or one line saying what is wrong."""
    if input_type not in IMPORT_TYPES:
        raise ValueError(f"input_type={input_type!r}: expected one of {', '.join(IMPORT_TYPES)}")
    if path.is_dir():
        raise ValueError(f"{path}: a folder, not a model file")
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    read = _reader(input_type)(path)
    ensemble, names = read.ensemble, read.feature_names
    if not read.classification:
        return ImportedModel(ensemble, Task.REGRESSION, 0, feature_names=names)
    if ensemble.link not in (Link.LOGISTIC, Link.SOFTMAX) and input_type not in ("onnx", "pmml"):  # class shares
        raise ValueError(f"{path}: a classifier whose outputs are not probabilities (raw margins) is not imported")
    n_classes = 2 if ensemble.two_classes else ensemble.n_outputs
    return ImportedModel(ensemble, Task.CLASSIFICATION, n_classes, read.labels, names)


def _reader(input_type: str) -> Callable[[Path], ReadTrees]:
    if input_type == "lightgbm":
        from forklift.ml.tree_lightgbm import read_lightgbm_file

        return read_lightgbm_file
    return {"xgb_json": read_model_file, "onnx": read_onnx_file, "pmml": read_pmml_file}[input_type]
