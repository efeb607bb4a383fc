"""forklift.ml: fast linear models and trees for tabular and sparse data behind scikit-learn's API (snapml's names).

The estimators load on first use (``from forklift.ml import LogisticRegression``), so that the table readers and
model-directory helpers beside them import without torch or XGBoost; a missing [ml] extra is named then.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from forklift.extras import Extra, install_hint, missing_module

if TYPE_CHECKING:
    from forklift.ml.boosting import BoostingMachineClassifier, BoostingMachineRegressor
    from forklift.ml.cocoa import load_svmlight_part
    from forklift.ml.linear import LinearRegression, LogisticRegression, SupportVectorMachine
    from forklift.ml.svmlight import load_svmlight_file
    from forklift.ml.trees import (
        DecisionTreeClassifier,
        DecisionTreeRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )

HOMES = {
    "BoostingMachineClassifier": "forklift.ml.boosting",
    "BoostingMachineRegressor": "forklift.ml.boosting",
    "DecisionTreeClassifier": "forklift.ml.trees",
    "DecisionTreeRegressor": "forklift.ml.trees",
    "LinearRegression": "forklift.ml.linear",
    "LogisticRegression": "forklift.ml.linear",
    "RandomForestClassifier": "forklift.ml.trees",
    "RandomForestRegressor": "forklift.ml.trees",
    "SupportVectorMachine": "forklift.ml.linear",
    "load_svmlight_file": "forklift.ml.svmlight",
    "load_svmlight_part": "forklift.ml.cocoa",
}
__all__ = [
    "BoostingMachineClassifier",
    "BoostingMachineRegressor",
    "DecisionTreeClassifier",
    "DecisionTreeRegressor",
    "LinearRegression",
    "LogisticRegression",
    "RandomForestClassifier",
    "RandomForestRegressor",
    "SupportVectorMachine",
    "load_svmlight_file",
    "load_svmlight_part",
]


def __getattr__(name: str) -> Any:
    home = HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'forklift.ml' has no attribute {name!r}")
    try:
        module = importlib.import_module(home)
    except ModuleNotFoundError as exc:  # installed without the [ml] extra: say so rather than which module is missing
        missing = missing_module(exc)
        if missing is None:
            raise
        raise ModuleNotFoundError(
            install_hint(missing, needed_by="forklift.ml", extra=Extra.ML), name=exc.name
        ) from exc
    return getattr(module, name)
