"""A tree model another tool wrote (XGBoost, LightGBM, ONNX, PMML), as a model directory: what ``forklift ml
import`` writes, which serves, predicts and is measured like one ``forklift ml fit`` wrote."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from forklift.errors import ForkliftError
from forklift.ml.boosting import BoostingMachineClassifier, BoostingMachineRegressor
from forklift.ml.model_directory import write_directory
from forklift.ml.tables import plain
from forklift.ml.tree_import import IMPORT_TYPES, Task, read_model
from forklift.model_files.tabular import Feature, TabularSettings

SUFFIXES = {".json": "xgb_json", ".ubj": "xgb_json", ".txt": "lightgbm", ".onnx": "onnx", ".pmml": "pmml"}


def import_directory(
    path: Path, out: Path, *, input_type: str | None = None, features: Sequence[str] = (), target: str = ""
) -> TabularSettings:
    """Read the model in ``path`` (its type by its suffix unless ``input_type`` says) and write it to ``out``. Its
    features are ``features``, else the names the file gives them, else ``f0``, ``f1`` ... (as a libsvm file's);
    ``target`` names the column it predicts, for ``eval``."""
    kind = input_type or SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ForkliftError(f"{path}: its suffix does not say what it holds; give --type ({', '.join(IMPORT_TYPES)})")
    try:
        imported = read_model(path, kind)
    except ValueError as exc:
        raise ForkliftError(str(exc)) from exc
    classification = imported.task is Task.CLASSIFICATION
    estimator = (BoostingMachineClassifier() if classification else BoostingMachineRegressor()).take_imported(
        imported, source=str(path)
    )
    width = imported.ensemble.n_features
    names = tuple(features) or imported.feature_names or tuple(f"f{index}" for index in range(width))
    if len(names) != width:
        raise ForkliftError(f"--features gives {len(names)} names; the model in {path} reads {width} features")
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise ForkliftError(f"--features names {repeated[0]!r} twice; each feature needs a name of its own")
    settings = TabularSettings(
        estimator=type(estimator).__name__,
        features=tuple(Feature(name) for name in names),
        classes=tuple(plain(label) for label in estimator.classes_) if classification else (),
        probabilities=classification,
        missing_values=imported.ensemble.fourier is None,  # ridge rounds read every feature
        target=target,
    )
    write_directory(estimator, settings, out)
    return settings
