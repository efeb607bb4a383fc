"""forklift.ml: fast linear models and trees for tabular and sparse data behind scikit-learn's API (snapml's names)."""

from forklift.extras import Extra, install_hint, missing_module

try:
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
except ModuleNotFoundError as exc:  # installed without the [ml] extra: say so rather than which module is missing
    module = missing_module(exc)
    if module is None:
        raise
    raise ModuleNotFoundError(install_hint(module, needed_by="forklift.ml", extra=Extra.ML), name=exc.name) from exc

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
