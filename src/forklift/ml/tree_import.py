"""Tree models other tools wrote, read as a :class:`TreeEnsemble`: XGBoost (JSON or UBJSON, ``"xgb_json"``) and
LightGBM (its text format, ``"lightgbm"``), as snapml's ``import_model`` names them."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from forklift.ml.tree_ensemble import Link, TreeEnsemble
from forklift.ml.tree_xgboost import read_model_file

IMPORT_TYPES = ("xgb_json", "lightgbm")


class Task(enum.Enum):
    CLASSIFICATION = "classification"
    REGRESSION = "regression"


@dataclass(frozen=True)
class ImportedModel:
    ensemble: TreeEnsemble
    task: Task
    n_classes: int  # 0 for regression


def read_model(path: Path, input_type: str) -> ImportedModel:
    """The model in ``path``, of ``input_type`` (one of IMPORT_TYPES), or one line saying what is wrong."""
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if input_type == "xgb_json":
        ensemble, objective = read_model_file(path)
        classification = objective.startswith(("binary:", "multi:"))
    elif input_type == "lightgbm":
        from forklift.ml.tree_lightgbm import read_lightgbm_file

        ensemble, classification = read_lightgbm_file(path)
    else:
        raise ValueError(f"input_type={input_type!r}: expected one of {', '.join(IMPORT_TYPES)}")
    if not classification:
        return ImportedModel(ensemble, Task.REGRESSION, 0)
    if ensemble.link not in (Link.LOGISTIC, Link.SOFTMAX):
        raise ValueError(f"{path}: a classifier whose outputs are not probabilities (raw margins) is not imported")
    return ImportedModel(ensemble, Task.CLASSIFICATION, 2 if ensemble.two_classes else ensemble.n_outputs)
