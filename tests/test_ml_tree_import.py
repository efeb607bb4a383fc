"""``import_model`` against the tools that wrote the models: XGBoost boosters (JSON and UBJSON) and LightGBM text
models, trained by those libraries on data with missing values, predict here what the libraries predict; the
float32 thresholds agree with LightGBM's float64 ones at the float32 values next to each threshold; what cannot be
imported is one line saying why."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np
import pytest
import xgboost

from forklift.ml import BoostingMachineClassifier, BoostingMachineRegressor

ROWS, FEATURES = 2000, 6
TOLERANCE = 1e-5


def data(task: str, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """float32 features (what the graph reads), a tenth of them NaN; targets for ``task``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    signal = X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=ROWS)
    X[rng.random(X.shape) < 0.1] = np.nan
    if task == "binary":
        return X, (signal > 0).astype(np.float64)
    if task == "multiclass":
        return X, np.digitize(signal, [-0.5, 0.5]).astype(np.float64)
    if task == "poisson":
        return X, rng.poisson(np.exp(0.5 * np.clip(signal, -3, 3))).astype(np.float64)
    return X, signal


XGBOOST_OBJECTIVES = {
    "binary:logistic": ("binary", {}),
    "multi:softprob": ("multiclass", {"num_class": 3}),
    "reg:squarederror": ("regression", {}),
    "count:poisson": ("poisson", {}),
}


@pytest.mark.parametrize("suffix", [".json", ".ubj"])
@pytest.mark.parametrize("objective", list(XGBOOST_OBJECTIVES))
def test_xgboost_model_predicts_what_xgboost_predicts(tmp_path: Path, objective: str, suffix: str) -> None:
    task, extra = XGBOOST_OBJECTIVES[objective]
    X, y = data(task)
    parameters = {"objective": objective, "max_depth": 4, "learning_rate": 0.3, "nthread": 1, **extra}
    booster = xgboost.train(parameters, xgboost.DMatrix(X, label=y), num_boost_round=8)
    path = tmp_path / f"model{suffix}"
    booster.save_model(str(path))
    expected = booster.predict(xgboost.DMatrix(X))
    if task in ("binary", "multiclass"):
        model: Any = BoostingMachineClassifier().import_model(path, "xgb_json")
        predicted = model.predict_proba(X)
        expected = np.column_stack([1 - expected, expected]) if task == "binary" else expected
        np.testing.assert_array_equal(model.classes_, np.arange(predicted.shape[1]))
    else:
        model = BoostingMachineRegressor().import_model(path, "xgb_json")
        predicted = model.predict(X)
    assert predicted.shape == expected.shape
    np.testing.assert_allclose(predicted, expected, rtol=0, atol=TOLERANCE)


LIGHTGBM_MODELS = {
    "binary": ("binary", {"objective": "binary"}),
    "binary_sigmoid": ("binary", {"objective": "binary", "sigmoid": 2.0}),
    "multiclass": ("multiclass", {"objective": "multiclass", "num_class": 3}),
    "regression": ("regression", {"objective": "regression"}),
    "poisson": ("poisson", {"objective": "poisson"}),
    "rf": ("regression", {"objective": "regression", "boosting": "rf", "bagging_fraction": 0.6, "bagging_freq": 1}),
}


def lightgbm_model(tmp_path: Path, name: str, parameters: dict[str, Any], X: np.ndarray, y: np.ndarray) -> Path:
    """A few rounds of LightGBM on ``X``, saved in its text format as ``name``.txt."""
    settings = {"num_leaves": 15, "learning_rate": 0.3, "num_threads": 1, "verbose": -1, "seed": 0} | parameters
    booster = lightgbm.train(settings, lightgbm.Dataset(X, label=y), num_boost_round=8)
    path = tmp_path / f"{name}.txt"
    booster.save_model(str(path))
    return path


def threshold_neighbours(path: Path, X: np.ndarray) -> np.ndarray:
    """Rows whose split feature is the float32 nearest each (finite in float32) threshold or a neighbour of it:
    where a threshold rounded the wrong way would send a row to the other side."""
    rows = []
    for info in lightgbm.Booster(model_file=str(path)).dump_model()["tree_info"]:
        nodes = [info["tree_structure"]]
        for node in nodes:
            if "split_feature" not in node:
                continue
            nodes += [node["left_child"], node["right_child"]]
            if abs(node["threshold"]) > float(np.finfo(np.float32).max):  # "not NaN": every value goes one way
                continue
            nearest = np.float32(node["threshold"])
            for value in (
                np.nextafter(nearest, np.float32(-np.inf)),
                nearest,
                np.nextafter(nearest, np.float32(np.inf)),
            ):
                row = X[len(rows) % len(X)].copy()
                row[node["split_feature"]] = value
                rows.append(row)
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("name", list(LIGHTGBM_MODELS))
def test_lightgbm_model_predicts_what_lightgbm_predicts(tmp_path: Path, name: str) -> None:
    task, parameters = LIGHTGBM_MODELS[name]
    X, y = data(task, seed=1)
    path = lightgbm_model(tmp_path, name, parameters, X, y)
    X = np.concatenate([X, threshold_neighbours(path, X)])
    expected = lightgbm.Booster(model_file=str(path)).predict(X)
    if task in ("binary", "multiclass"):
        model: Any = BoostingMachineClassifier().import_model(path, "lightgbm")
        predicted = model.predict_proba(X)
        expected = np.column_stack([1 - expected, expected]) if task == "binary" else expected
    else:
        model = BoostingMachineRegressor().import_model(path, "lightgbm")
        predicted = model.predict(X)
    assert predicted.shape == expected.shape
    np.testing.assert_allclose(predicted, expected, rtol=0, atol=TOLERANCE)


ZERO_BAND = float(np.float32(1e-35))  # LightGBM's kZeroThreshold, the float 1e-35f
STUMP_THRESHOLDS = [-0.5, -ZERO_BAND, -1e-36, 0.0, 1e-36, ZERO_BAND, 0.3]


def stump_values() -> np.ndarray:
    """Values of feature 0 on every side of the stump's thresholds and of the zero band, NaN included."""
    edges = np.array([*STUMP_THRESHOLDS, 1e-40, -1e-40, 2.0, -2.0], dtype=np.float32)
    around = [np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, np.float32(-np.inf))]
    return np.concatenate([edges, *around, [0.0, -0.0, np.nan]]).astype(np.float32)


# decision_type's bits: 2 = default left; missing type in bits 2-3 (0 None, 4 Zero, 8 NaN)
@pytest.mark.parametrize("decision_type", [0, 2, 4, 6, 8, 10])
def test_lightgbm_missing_types_send_values_where_lightgbm_does(tmp_path: Path, decision_type: int) -> None:
    """A one-split tree, rewritten to each missing type and threshold: the import predicts what LightGBM does, or
    (zeros sent across values that go the other way: zero_as_missing) refuses in one line."""
    X = np.random.default_rng(6).normal(size=(200, 2)).astype(np.float32)
    settings = {"objective": "regression", "num_leaves": 2, "num_threads": 1, "verbose": -1, "min_data_in_leaf": 5}
    trained = lightgbm_model(tmp_path, "stump", settings, X, (X[:, 0] > 0).astype(np.float64))
    rows = np.zeros((len(stump_values()), 2), dtype=np.float32)
    rows[:, 0] = stump_values()
    for threshold in STUMP_THRESHOLDS:
        lines = [line for line in trained.read_text().splitlines() if not line.startswith("tree_sizes=")]
        lines = [f"threshold={threshold!r}" if line.startswith("threshold=") else line for line in lines]
        lines = [f"decision_type={decision_type}" if line.startswith("decision_type=") else line for line in lines]
        path = tmp_path / f"stump_{decision_type}_{threshold}.txt"
        path.write_text("\n".join(lines) + "\n")
        zero_left = bool(decision_type & 2)
        if decision_type & 4 and (threshold < -ZERO_BAND if zero_left else threshold > ZERO_BAND):
            assert_one_line_error("zero_as_missing", BoostingMachineRegressor(), path, "lightgbm")
            continue
        model = BoostingMachineRegressor().import_model(path, "lightgbm")
        expected = lightgbm.Booster(model_file=str(path)).predict(rows)
        np.testing.assert_allclose(model.predict(rows), expected, rtol=0, atol=TOLERANCE, err_msg=str(threshold))


def test_lightgbm_gains_are_the_feature_importances(tmp_path: Path) -> None:
    X, y = data("regression", seed=3)
    path = lightgbm_model(tmp_path, "regression", {"objective": "regression"}, X, y)
    gains = lightgbm.Booster(model_file=str(path)).feature_importance(importance_type="gain")
    model = BoostingMachineRegressor().import_model(path, "lightgbm")
    np.testing.assert_allclose(model.feature_importances_, gains / gains.sum(), rtol=1e-6)


def test_lightgbm_trees_of_one_leaf(tmp_path: Path) -> None:
    X, _ = data("regression", seed=7)
    path = lightgbm_model(tmp_path, "constant", {"objective": "regression"}, X, np.full(ROWS, 2.5))
    model = BoostingMachineRegressor().import_model(path, "lightgbm")
    assert all(len(tree.feature) == 1 for tree in model.ensemble_.trees)
    np.testing.assert_allclose(model.predict(X), lightgbm.Booster(model_file=str(path)).predict(X), atol=TOLERANCE)


def assert_one_line_error(match: str, model: Any, path: Path, input_type: str) -> None:
    with pytest.raises(ValueError, match=match) as raised:
        model.import_model(path, input_type)
    assert "\n" not in str(raised.value)


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error("no such file", BoostingMachineClassifier(), tmp_path / "absent.json", "xgb_json")


def test_wrong_input_type_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "model.txt"
    path.write_text("tree\n")
    assert_one_line_error(
        "input_type='csv': expected one of xgb_json, lightgbm, onnx", BoostingMachineRegressor(), path, "csv"
    )


def test_unreadable_lightgbm_file_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.txt"
    path.write_text("not a model\n")
    assert_one_line_error("not a LightGBM model", BoostingMachineRegressor(), path, "lightgbm")
    assert "[LightGBM]" not in capfd.readouterr().err  # LightGBM's own "[Fatal]" line would say it twice


def test_unreadable_xgboost_file_is_one_line_without_xgboosts_source_lines(tmp_path: Path) -> None:
    path = tmp_path / "table.json"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError) as raised:
        BoostingMachineClassifier().import_model(path, "xgb_json")
    said = str(raised.value)
    assert said.startswith(f"{path}: not an XGBoost model (JSON or UBJSON) XGBoost can read: ") and "\n" not in said
    assert ".cc:" not in said and "Check failed" not in said


def categorical_data() -> tuple[np.ndarray, np.ndarray]:
    """Feature 0 holds categories 0..7 whose target no single threshold separates."""
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.integers(0, 8, ROWS), rng.normal(size=ROWS)]).astype(np.float32)
    return X, np.isin(X[:, 0], [1, 4, 6]) + 0.1 * X[:, 1]


def test_lightgbm_categorical_split_is_refused(tmp_path: Path) -> None:
    X, y = categorical_data()
    settings = {"objective": "regression", "num_threads": 1, "verbose": -1, "max_cat_to_onehot": 1}
    booster = lightgbm.train(settings, lightgbm.Dataset(X, label=y, categorical_feature=[0]), num_boost_round=2)
    path = tmp_path / "categorical.txt"
    booster.save_model(str(path))
    assert_one_line_error(
        f"^{re.escape(str(path))}: .*categorical splits", BoostingMachineRegressor(), path, "lightgbm"
    )


def test_xgboost_categorical_split_is_refused(tmp_path: Path) -> None:
    X, y = categorical_data()
    matrix = xgboost.DMatrix(X, label=y, feature_types=["c", "q"], enable_categorical=True)
    booster = xgboost.train({"tree_method": "hist", "max_cat_to_onehot": 1, "nthread": 1}, matrix, num_boost_round=2)
    path = tmp_path / "categorical.ubj"
    booster.save_model(str(path))
    assert_one_line_error(
        f"^{re.escape(str(path))}: .*categorical splits", BoostingMachineRegressor(), path, "xgb_json"
    )


def test_lightgbm_linear_trees_are_refused(tmp_path: Path) -> None:
    X, y = data("regression", seed=5)
    path = lightgbm_model(tmp_path, "linear", {"objective": "regression", "linear_tree": True}, X, y)
    assert_one_line_error("linear trees", BoostingMachineRegressor(), path, "lightgbm")


def test_regression_model_into_a_classifier_is_refused(tmp_path: Path) -> None:
    X, y = data("regression")
    booster = xgboost.train({"objective": "reg:squarederror", "nthread": 1}, xgboost.DMatrix(X, label=y), 2)
    path = tmp_path / "regression.json"
    booster.save_model(str(path))
    assert_one_line_error("a regression model", BoostingMachineClassifier(), path, "xgb_json")
