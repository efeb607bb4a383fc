"""forklift.ml's tree models exported as PMML and scored by PMML4S (pypmml, on Java): the same probabilities,
classes and values as the models predict, rows with missing values included. The features are on a grid of 0.1
(float32), so rows fall on the thresholds and ``<`` against ``<=`` is tested too."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pypmml  # PMML4S, on Java: .ci/run installs a JRE where none is (a missing one fails here, never skips)
import pytest
from sklearn.datasets import make_classification

from forklift.ml import (
    BoostingMachineClassifier,
    BoostingMachineRegressor,
    DecisionTreeClassifier,
    RandomForestRegressor,
)
from forklift.ml.tree_ensemble import Comparison, TreeEnsemble
from forklift.ml.tree_pmml import label_text, write_pmml

TOLERANCE = 1e-5


def grid_data() -> tuple[np.ndarray, np.ndarray]:
    """1000 rows of 6 features on a grid of 0.1 (doubles: 0.2 is not a float32, and a PMML engine compares doubles
    where forklift compares float32s), 10% missing; labels of 3 classes."""
    X, y = make_classification(
        n_samples=1000, n_features=6, n_informative=4, n_classes=3, n_clusters_per_class=1, random_state=0
    )
    X = np.round(X, 1)
    X[np.random.default_rng(0).random(X.shape) < 0.1] = np.nan
    return X, y


def scored(path: Path, X: np.ndarray) -> dict[str, np.ndarray]:
    """PMML4S's output fields for the rows of ``X``, a NaN sent as null (missing): the JSON "split" form that pypmml
    makes of a DataFrame, without needing pandas."""
    rows = [[None if math.isnan(value) else value for value in row] for row in X.tolist()]
    request = json.dumps({"columns": [f"x{index}" for index in range(X.shape[1])], "data": rows})
    result = json.loads(pypmml.Model.load(str(path)).predict(request))
    return {name: np.array([row[index] for row in result["data"]]) for index, name in enumerate(result["columns"])}


def check_classifier(fields: dict[str, np.ndarray], model: Any, X: np.ndarray) -> None:
    """Probabilities within the tolerance, and the same class wherever the top two are not tied."""
    expected = model.predict_proba(X)
    got = np.column_stack([fields[f"probability_{label_text(label)}"] for label in model.classes_])
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)
    top_two = np.sort(expected, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > TOLERANCE
    np.testing.assert_array_equal(fields["predicted_y"][clear].astype(str), model.predict(X)[clear].astype(str))


X_GRID, Y_GRID = grid_data()
LABELS_2 = np.array(["no", "yes"])[(Y_GRID == 0).astype(int)]


@pytest.mark.parametrize(
    ("model", "y"),
    [
        (DecisionTreeClassifier(max_depth=6), LABELS_2),
        (DecisionTreeClassifier(max_depth=6), Y_GRID),
        (BoostingMachineClassifier(num_round=10, max_depth=3), LABELS_2),
        (BoostingMachineClassifier(num_round=10, max_depth=3), Y_GRID),
    ],
    ids=["tree-2-classes", "tree-3-classes", "boosting-2-classes", "boosting-3-classes"],
)
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_pmml4s_scores_a_classifier_as_it_predicts(model: Any, y: np.ndarray, tmp_path: Path) -> None:
    model.fit(X_GRID, y)
    model.export_model(tmp_path / "model.pmml")  # PMML is the default, as in snapml
    check_classifier(scored(tmp_path / "model.pmml", X_GRID), model, X_GRID)


def test_boolean_classes_go_out_as_pmml_booleans_and_come_back_as_booleans(tmp_path: Path) -> None:
    """Fitted on True and False, the model's PMML target is PMML's boolean: PMML4S scores it so, and imported back
    the classes are booleans again (they came back as the words 'False' and 'True', so nothing predicted equalled
    y)."""
    y = Y_GRID == 0
    model = BoostingMachineClassifier(num_round=10, max_depth=3).fit(X_GRID, y)
    model.export_model(tmp_path / "model.pmml")
    check_classifier(scored(tmp_path / "model.pmml", X_GRID), model, X_GRID)
    back = BoostingMachineClassifier().import_model(str(tmp_path / "model.pmml"), "pmml")
    assert back.classes_.dtype == bool and (back.predict(X_GRID) == model.predict(X_GRID)).all()


@pytest.mark.parametrize(
    ("model", "y"),
    [
        (RandomForestRegressor(n_estimators=5, max_depth=5, random_state=0), np.nan_to_num(X_GRID[:, 0]) + Y_GRID),
        (BoostingMachineRegressor(num_round=10, max_depth=3, objective="poisson"), Y_GRID * 2.0),
    ],
    ids=["forest", "boosting-poisson"],
)
def test_pmml4s_scores_a_regressor_as_it_predicts(model: Any, y: np.ndarray, tmp_path: Path) -> None:
    model.fit(X_GRID, y)
    model.export_model(tmp_path / "model.pmml", output_type="pmml")
    got = scored(tmp_path / "model.pmml", X_GRID)["predicted_y"]
    np.testing.assert_allclose(got, model.predict(X_GRID), atol=TOLERANCE, rtol=0)


def test_less_or_equal_splits_score_as_the_ensemble_predicts(tmp_path: Path) -> None:
    """LightGBM's ``<=`` splits, on the thresholds the grid's rows fall on."""
    model = BoostingMachineClassifier(num_round=10, max_depth=3).fit(X_GRID, Y_GRID)
    grown = model.ensemble_
    ensemble = TreeEnsemble(
        trees=grown.trees,
        n_features=grown.n_features,
        base=grown.base,
        link=grown.link,
        comparison=Comparison.LESS_OR_EQUAL,
    )
    expected = ensemble.predict(X_GRID)[1]
    assert np.abs(expected - model.predict_proba(X_GRID)).max() > 0.01  # rows on a threshold change branch
    write_pmml(ensemble, tmp_path / "model.pmml", classes=[0, 1, 2])
    fields = scored(tmp_path / "model.pmml", X_GRID)
    got = np.column_stack([fields[f"probability_{label}"] for label in range(3)])
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)


def test_an_unknown_output_type_is_one_line_naming_it(tmp_path: Path) -> None:
    model = DecisionTreeClassifier(max_depth=2).fit(X_GRID, Y_GRID)
    with pytest.raises(ValueError, match=r"output_type='csv'.*'pmml' or 'onnx'") as error:
        model.export_model(tmp_path / "model.csv", output_type="csv")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "model.csv").exists()


@pytest.mark.parametrize(
    ("name", "output_type", "message"),
    [
        ("model.onnx", "pmml", "model.onnx is named as ONNX, but output_type='pmml' writes PMML: name it model.pmml"),
        ("model.xml", "onnx", "model.xml is named as PMML, but output_type='onnx' writes ONNX: name it model.onnx"),
    ],
)
def test_a_name_that_says_another_format_is_refused(tmp_path: Path, name: str, output_type: str, message: str) -> None:
    model = DecisionTreeClassifier(max_depth=2).fit(X_GRID, Y_GRID)
    with pytest.raises(ValueError, match=re.escape(message)):
        model.export_model(tmp_path / name, output_type=output_type)
    assert not (tmp_path / name).exists()
