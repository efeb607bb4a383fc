"""``import_model(path, "onnx")`` against the tools that wrote the graphs: scikit-learn's forests and boosting
converted by skl2onnx, XGBoost and LightGBM converted by onnxmltools, and forklift's own exports predict here what
their makers predict; a graph that is more than a tree ensemble, or that forklift would read otherwise than ONNX
Runtime runs it, is one line saying why."""

from __future__ import annotations

import functools
import json
import re
import warnings
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np
import onnx
import pandas as pd
import pypmml  # PMML4S, on Java (.ci/run installs a JRE where none is)
import pytest
import scipy.sparse as sp
import xgboost
from onnxmltools import convert_lightgbm, convert_xgboost
from onnxmltools.convert.common.data_types import FloatTensorType
from skl2onnx import to_onnx
from skl2onnx.common.data_types import DoubleTensorType
from sklearn import ensemble as sk_ensemble
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import forklift.ml as fm
from forklift.ml import tree_onnx
from forklift.ml.tree_ensemble import Link

ROWS, FEATURES = 600, 5
TOLERANCE = 1e-5


def data(*, missing: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """float32 features, a binary target, three string classes and a regression target."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    signal = X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=ROWS)
    labels = np.array(["low", "mid", "high"])[np.digitize(signal, [-0.5, 0.5])]
    if missing:
        X[rng.random(X.shape) < 0.1] = np.nan
    return X, (signal > 0).astype(np.int64), labels, signal


def saved(tmp_path: Path, name: str, graph: onnx.ModelProto) -> Path:
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(graph.SerializeToString())
    return path


SKLEARN = {
    "forest, two classes": (lambda: sk_ensemble.RandomForestClassifier(n_estimators=8, max_depth=5), 1),
    "forest, string classes": (lambda: sk_ensemble.RandomForestClassifier(n_estimators=8, max_depth=5), 2),
    "forest, regression": (lambda: sk_ensemble.RandomForestRegressor(n_estimators=8, max_depth=5), 3),
    "boosting, two classes": (lambda: sk_ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3), 1),
    "boosting, string classes": (lambda: sk_ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3), 2),
}
OURS = {
    sk_ensemble.RandomForestClassifier: fm.RandomForestClassifier,
    sk_ensemble.RandomForestRegressor: fm.RandomForestRegressor,
    sk_ensemble.GradientBoostingClassifier: fm.BoostingMachineClassifier,
}


@pytest.mark.parametrize("name", list(SKLEARN))
def test_skl2onnx_graph_predicts_what_scikit_learn_predicts(tmp_path: Path, name: str) -> None:
    make, target = SKLEARN[name]
    X, *targets = data()
    estimator = make().set_params(random_state=0).fit(X, targets[target - 1])
    path = saved(tmp_path, "sklearn", to_onnx(estimator, X[:1]))
    model: Any = OURS[type(estimator)]().import_model(path, "onnx")
    if hasattr(estimator, "predict_proba"):
        np.testing.assert_array_equal(model.classes_, estimator.classes_)  # the file's labels, strings included
        np.testing.assert_allclose(model.predict_proba(X), estimator.predict_proba(X), rtol=0, atol=TOLERANCE)
        np.testing.assert_array_equal(model.predict(X), estimator.predict(X))
    else:
        np.testing.assert_allclose(model.predict(X), estimator.predict(X), rtol=1e-6, atol=TOLERANCE)


CONVERTED = {
    "XGBoost, two classes": (lambda: xgboost.XGBClassifier(n_estimators=10, max_depth=3), 1, convert_xgboost),
    "XGBoost, three classes": (lambda: xgboost.XGBClassifier(n_estimators=10, max_depth=3), 2, convert_xgboost),
    "XGBoost, regression": (lambda: xgboost.XGBRegressor(n_estimators=10, max_depth=3), 3, convert_xgboost),
    "LightGBM, two classes": (lambda: lightgbm.LGBMClassifier(n_estimators=10, verbose=-1), 1, convert_lightgbm),
    "LightGBM, three classes": (lambda: lightgbm.LGBMClassifier(n_estimators=10, verbose=-1), 2, convert_lightgbm),
    "LightGBM, Poisson": (
        lambda: lightgbm.LGBMRegressor(n_estimators=10, objective="poisson", verbose=-1),
        4,
        convert_lightgbm,
    ),
    "LightGBM, two classes, no ZipMap": (  # the probabilities go through a Mul by 1.0
        lambda: lightgbm.LGBMClassifier(n_estimators=10, verbose=-1),
        1,
        functools.partial(convert_lightgbm, zipmap=False),
    ),
    "XGBoost, Poisson": (  # Exp, then a Mul by the base score
        lambda: xgboost.XGBRegressor(n_estimators=10, max_depth=3, objective="count:poisson"),
        4,
        convert_xgboost,
    ),
}


@pytest.mark.parametrize("name", list(CONVERTED))
def test_onnxmltools_graph_predicts_what_the_library_predicts(tmp_path: Path, name: str) -> None:
    make, target, convert = CONVERTED[name]
    X, binary, labels, signal = data(missing=True)
    y = {1: binary, 2: np.unique(labels, return_inverse=True)[1], 3: signal, 4: np.exp(np.clip(signal, -3, 3))}[target]
    estimator = make().set_params(random_state=0, n_jobs=1).fit(X, y)
    path = saved(
        tmp_path, "converted", convert(estimator, initial_types=[("input", FloatTensorType([None, FEATURES]))])
    )
    if hasattr(estimator, "predict_proba"):
        model: Any = fm.BoostingMachineClassifier().import_model(path, "onnx")
        np.testing.assert_allclose(model.predict_proba(X), estimator.predict_proba(X), rtol=0, atol=TOLERANCE)
    else:
        model = fm.BoostingMachineRegressor().import_model(path, "onnx")
        np.testing.assert_allclose(model.predict(X), estimator.predict(X), rtol=1e-5, atol=TOLERANCE)


RIDGE = "boosting with ridge rounds"
FORKLIFT = {
    "decision tree, three classes": (lambda: fm.DecisionTreeClassifier(max_depth=4), 2),
    "forest, two classes": (lambda: fm.RandomForestClassifier(n_estimators=6, max_depth=4, random_state=0), 1),
    "forest, regression": (lambda: fm.RandomForestRegressor(n_estimators=6, max_depth=4, random_state=0), 3),
    "boosting, two classes": (lambda: fm.BoostingMachineClassifier(num_round=10, random_state=0), 1),
    "boosting, three classes": (lambda: fm.BoostingMachineClassifier(num_round=10, random_state=0), 2),
    RIDGE: (
        lambda: fm.BoostingMachineClassifier(num_round=20, tree_select_probability=0.5, random_state=1),
        1,
    ),
    "boosting, regression": (lambda: fm.BoostingMachineRegressor(num_round=10, random_state=0), 3),
}


ROUND_TRIPS = [(name, kind) for name in FORKLIFT for kind in ("onnx", "pmml") if (name, kind) != (RIDGE, "pmml")]


@pytest.mark.parametrize(("name", "kind"), ROUND_TRIPS)
def test_forklift_export_imports_as_the_same_model(tmp_path: Path, name: str, kind: str) -> None:
    """Written as ONNX or PMML (ridge rounds are ONNX only) and read back: the same predictions, to the bit."""
    make, target = FORKLIFT[name]
    X, *targets = data(missing=name != RIDGE)  # ridge rounds read every feature
    fitted = make().fit(X, targets[target - 1])
    path = tmp_path / f"exported.{kind}"
    fitted.export_model(path, kind)
    model: Any = type(fitted)().import_model(path, kind)
    if hasattr(fitted, "predict_proba"):
        np.testing.assert_array_equal(model.classes_, fitted.classes_)  # string labels too
        np.testing.assert_array_equal(model.predict_proba(X), fitted.predict_proba(X))
    np.testing.assert_array_equal(model.predict(X), fitted.predict(X))


def assert_one_line_error(match: str, model: Any, path: Path, kind: str = "onnx") -> None:
    with pytest.raises(ValueError, match=match) as raised:
        model.import_model(path, kind)
    assert "\n" not in str(raised.value)


def test_a_file_that_is_not_onnx_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_text("not a graph\n")
    assert_one_line_error(f"^{re.escape(str(path))}: not an ONNX model", fm.RandomForestClassifier(), path)


def test_a_linear_models_graph_holds_no_trees(tmp_path: Path) -> None:
    X, y, *_ = data()
    path = tmp_path / "linear.onnx"
    fm.LogisticRegression().fit(X, y).export_model(path, "onnx")
    assert_one_line_error("holds 0 tree ensemble nodes", fm.RandomForestClassifier(), path)


def test_a_graph_that_scales_its_input_first_is_refused(tmp_path: Path) -> None:
    X, y, *_ = data()
    pipeline = make_pipeline(StandardScaler(), sk_ensemble.RandomForestClassifier(n_estimators=3)).fit(X, y)
    path = saved(tmp_path, "pipeline", to_onnx(pipeline, X[:1]))
    assert_one_line_error("computes more than its trees \\(a Scaler node\\)", fm.RandomForestClassifier(), path)


def test_category_splits_are_refused(tmp_path: Path) -> None:
    X, y, *_ = data()
    graph = to_onnx(sk_ensemble.RandomForestClassifier(n_estimators=2, max_depth=2).fit(X, y), X[:1])
    trees = next(node for node in graph.graph.node if node.op_type == "TreeEnsembleClassifier")
    modes = next(attribute for attribute in trees.attribute if attribute.name == "nodes_modes")
    modes.strings[0] = b"BRANCH_EQ"
    assert_one_line_error("BRANCH_EQ splits", fm.RandomForestClassifier(), saved(tmp_path, "categories", graph))


def test_a_regressor_into_a_classifier_is_refused(tmp_path: Path) -> None:
    X, _, _, signal = data()
    path = saved(
        tmp_path, "regressor", to_onnx(sk_ensemble.RandomForestRegressor(n_estimators=2).fit(X, signal), X[:1])
    )
    assert_one_line_error("a regression model", fm.RandomForestClassifier(), path)


def test_a_graph_read_otherwise_than_onnx_runtime_runs_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check on ONNX Runtime, given a reading that is wrong: the Exp node after a Poisson model's trees missed."""
    X, _, _, signal = data()
    converted = convert_lightgbm(
        lightgbm.LGBMRegressor(n_estimators=5, objective="poisson", verbose=-1).fit(X, np.exp(np.clip(signal, -3, 3))),
        initial_types=[("input", FloatTensorType([None, FEATURES]))],
    )
    path = saved(tmp_path, "poisson", converted)
    assert fm.BoostingMachineRegressor().import_model(path, "onnx").ensemble_.link is Link.EXP  # read right
    monkeypatch.setattr(tree_onnx, "_link", lambda *_, **__: Link.IDENTITY)
    assert_one_line_error(
        "reads these trees otherwise than ONNX Runtime runs them", fm.BoostingMachineRegressor(), path
    )


# PMML in the shapes other tools write (JPMML's among them): a forest averaging classification trees whose leaves
# count records, a split whose first child tests ">" or ">=", the other "True"; a boosted chain publishing a sum
# (rescaled by Targets, read through a cast of the field) for a logit RegressionModel; a regression tree. PMML4S
# (pypmml) scores each as the reference, rows at each threshold's float32 neighbours and missing values included.
FIELDS = (
    '<DataField name="f1" optype="continuous" dataType="double"/>'
    '<DataField name="f2" optype="continuous" dataType="double"/>'
)
SCHEMA = (
    '<MiningSchema><MiningField name="y" usageType="target"/><MiningField name="f1"/><MiningField name="f2"/>'
    "</MiningSchema>"
)
INPUTS = '<MiningSchema><MiningField name="f1"/><MiningField name="f2"/></MiningSchema>'


def pmml(target: str, model: str) -> str:
    return (
        '<?xml version="1.0"?><PMML xmlns="http://www.dmg.org/PMML-4_3" version="4.3"><Header/>'
        f"<DataDictionary>{target}{FIELDS}</DataDictionary>{model}</PMML>"
    )


def leaf(node_id: int, predicate: str, counts: dict[str, float], *, shares: bool = False) -> str:
    """A leaf counting records per class, or giving their probabilities (beside a record count they overrule)."""
    given = [
        f'recordCount="1" probability="{count}"' if shares else f'recordCount="{count}"' for count in counts.values()
    ]
    entries = zip(counts, given, strict=True)
    shares_ = "".join(f'<ScoreDistribution value="{label}" {attributes}/>' for label, attributes in entries)
    return f'<Node id="{node_id}">{predicate}{shares_}</Node>'


def simple(field: str, operator: str, value: float) -> str:
    return f'<SimplePredicate field="{field}" operator="{operator}" value="{value}"/>'


THREE_CLASSES = (
    '<DataField name="y" optype="categorical" dataType="string">'
    '<Value value="a"/><Value value="b"/><Value value="c"/></DataField>'
)
FOREST = pmml(
    THREE_CLASSES,
    '<MiningModel functionName="classification">'
    + SCHEMA
    + '<Output><OutputField name="p_a" feature="probability" value="a"/>'
    '<OutputField name="p_b" feature="probability" value="b"/>'
    '<OutputField name="p_c" feature="probability" value="c"/></Output><Segmentation multipleModelMethod="average">'
    '<Segment id="1"><True/><TreeModel functionName="classification" missingValueStrategy="defaultChild">'
    + INPUTS
    + '<Node id="0" defaultChild="2"><True/>'
    + leaf(1, simple("f1", "lessOrEqual", 0.1), {"a": 30, "b": 10, "c": 0})
    + '<Node id="2">'
    + simple("f1", "greaterThan", 0.1)
    + leaf(3, simple("f2", "lessThan", -1.5), {"a": 5, "b": 0, "c": 5})
    + leaf(4, "<True/>", {"a": 0, "b": 20, "c": 20})
    + "</Node></Node></TreeModel></Segment>"
    '<Segment id="2"><True/><TreeModel functionName="classification">'
    + INPUTS
    + '<Node id="0"><True/>'
    + leaf(1, simple("f2", "greaterOrEqual", 0.3), {"a": 0.2, "b": 0.3, "c": 0.5}, shares=True)
    + leaf(2, "<True/>", {"a": 0.9, "b": 0.1, "c": 0.0}, shares=True)
    + "</Node></TreeModel></Segment></Segmentation></MiningModel>",
)
TWO_CLASSES = (
    '<DataField name="y" optype="categorical" dataType="integer"><Value value="0"/><Value value="1"/></DataField>'
)
BOOSTED_TREE = (
    '<Segment id="{id}"><True/><TreeModel functionName="regression" missingValueStrategy="defaultChild">'
    + INPUTS
    + '<Node id="0" defaultChild="{missing}"><True/><Node id="1" defaultChild="4">'
    '<SimplePredicate field="float(f1)" operator="lessThan" value="{cut}"/><Node id="3" score="-0.4">'
    '<SimplePredicate field="f2" operator="lessThan" value="-0.2"/></Node><Node id="4" score="0.1"><True/></Node>'
    '</Node><Node id="2" score="{right}"><SimplePredicate field="float(f1)" operator="greaterOrEqual" value="{cut}"/>'
    "</Node></Node></TreeModel></Segment>"
)
BOOSTED = pmml(
    TWO_CLASSES,
    '<TransformationDictionary><DerivedField name="float(f1)" optype="continuous" dataType="float">'
    '<FieldRef field="f1"/></DerivedField></TransformationDictionary>'
    '<MiningModel functionName="classification">'
    + SCHEMA
    + '<Output><OutputField name="p_0" feature="probability" value="0"/>'
    '<OutputField name="p_1" feature="probability" value="1"/></Output>'
    '<Segmentation multipleModelMethod="modelChain"><Segment id="1"><True/><MiningModel functionName="regression">'
    + INPUTS
    + '<Output><OutputField name="xgbValue" feature="predictedValue" isFinalResult="false"/></Output>'
    '<Targets><Target rescaleConstant="-0.25"/></Targets><Segmentation multipleModelMethod="sum">'
    + BOOSTED_TREE.format(id=1, missing=1, cut=0.5, right=0.8)
    + BOOSTED_TREE.format(id=2, missing=2, cut=-0.125, right=-0.3)
    + '</Segmentation></MiningModel></Segment><Segment id="2"><True/><RegressionModel functionName="classification" '
    'normalizationMethod="logit"><MiningSchema><MiningField name="y" usageType="target"/><MiningField name="xgbValue"/>'
    '</MiningSchema><RegressionTable intercept="0.0" targetCategory="1">'
    '<NumericPredictor name="xgbValue" coefficient="1.0"/>'
    '</RegressionTable><RegressionTable intercept="0.0" targetCategory="0"/></RegressionModel></Segment>'
    "</Segmentation></MiningModel>",
)
REGRESSION_TREE = pmml(
    '<DataField name="y" optype="continuous" dataType="double"/>',
    '<TreeModel functionName="regression">'
    + SCHEMA
    + '<Output><OutputField name="value" feature="predictedValue"/></Output><Node id="0"><True/>'
    '<Node id="1" score="2.5">'
    + simple("f2", "greaterThan", 0.1)
    + '</Node><Node id="2"><True/><Node id="3" score="-1.0">'
    + simple("f1", "lessThan", 1e-3)
    + '</Node><Node id="4" score="0.5"><True/></Node></Node></Node></TreeModel>',
)


def probe_rows(cuts: list[float]) -> np.ndarray:
    """float32 rows whose features are each cut's nearest float32s and their neighbours, a few others, or missing."""
    nearest = np.array(cuts, dtype=np.float32)
    values = np.concatenate(
        [
            nearest,
            np.nextafter(nearest, np.float32(-np.inf)),
            np.nextafter(nearest, np.float32(np.inf)),
            [-3, 3, np.nan],
        ]
    ).astype(np.float32)
    return np.array([[a, b] for a in values for b in values], dtype=np.float32)


def pmml4s(path: Path, X: np.ndarray) -> dict[str, np.ndarray]:
    rows = [[None if np.isnan(value) else float(value) for value in row] for row in X]
    result = json.loads(pypmml.Model.load(str(path)).predict(json.dumps({"columns": ["f1", "f2"], "data": rows})))
    return {name: np.array([row[index] for row in result["data"]]) for index, name in enumerate(result["columns"])}


@pytest.mark.slow  # PMML4S starts a JVM
def test_pmml_in_other_tools_shapes_predicts_what_pmml4s_scores(tmp_path: Path) -> None:
    X = probe_rows([0.1, -1.5, 0.3, 0.5, -0.125, -0.2, 1e-3])
    for name, document, make in [
        ("forest", FOREST, fm.RandomForestClassifier),
        ("boosted", BOOSTED, fm.BoostingMachineClassifier),
        ("regression", REGRESSION_TREE, fm.DecisionTreeRegressor),
    ]:
        path = tmp_path / f"{name}.pmml"
        path.write_text(document)
        model: Any = make().import_model(path, "pmml")
        scored = pmml4s(path, X)
        if name == "regression":
            np.testing.assert_allclose(model.predict(X), scored["value"].astype(float), rtol=0, atol=1e-6)
            continue
        labels = [str(label) for label in model.classes_]
        assert labels == (["a", "b", "c"] if name == "forest" else ["0", "1"])
        expected = np.column_stack([scored[f"p_{label}"].astype(float) for label in labels])
        np.testing.assert_allclose(model.predict_proba(X), expected, rtol=0, atol=1e-6)


def test_a_missing_value_takes_the_default_child_before_a_true_sibling(tmp_path: Path) -> None:
    """PMML's defaultChild strategy: a predicate that cannot be told for a missing value sends the row to the
    defaultChild, here the first child, though its sibling's predicate is True (PMML4S takes the True sibling
    instead, so it is not the reference here: the specification is)."""
    path = tmp_path / "default.pmml"
    path.write_text(BOOSTED)
    split = '<Node id="2" score="0.8"><SimplePredicate field="float(f1)" operator="greaterOrEqual" value="0.5"/>'
    assert split in BOOSTED
    path.write_text(BOOSTED.replace(split, '<Node id="2" score="0.8"><True/>'))
    model: Any = fm.BoostingMachineClassifier().import_model(path, "pmml")
    below = 0.1 - 0.3 - 0.25  # first tree: its first child, where f2 = 0 scores 0.1; second: its -0.3; the base
    np.testing.assert_allclose(model.predict_proba(np.array([[np.nan, 0.0]]))[0, 1], 1 / (1 + np.exp(-below)))


def test_pmml_that_is_not_a_tree_model_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "model.pmml"
    path.write_text(
        pmml(
            '<DataField name="y" optype="continuous" dataType="double"/>',
            '<RegressionModel functionName="regression"/>',
        )
    )
    assert_one_line_error("holds RegressionModel: expected one tree model", fm.DecisionTreeRegressor(), path, "pmml")
    path.write_text("<PMML><unclosed></PMML>")
    assert_one_line_error("not a PMML document \\(XML: mismatched tag", fm.DecisionTreeRegressor(), path, "pmml")
    path.write_text(REGRESSION_TREE.replace('operator="lessThan"', 'operator="equal"'))
    assert_one_line_error(
        "node 3: SimplePredicate equal: read are thresholds", fm.DecisionTreeRegressor(), path, "pmml"
    )


def test_an_import_forgets_the_feature_names_of_a_fit_before_it(tmp_path: Path) -> None:
    """A model fitted on a DataFrame, then given another model's trees: the old columns' names are not this
    model's (numpy rows predict without scikit-learn's warning that the fit had names)."""
    path = tmp_path / "regression.pmml"
    path.write_text(REGRESSION_TREE)
    X = np.nan_to_num(probe_rows([0.1, 1e-3]))
    model: Any = fm.DecisionTreeRegressor().fit(pd.DataFrame(X, columns=["a", "b"]), X[:, 0])
    model.import_model(path, "pmml")
    assert not hasattr(model, "feature_names_in_")
    booster: Any = fm.BoostingMachineRegressor(num_round=3).fit(X, X[:, 0]).import_model(path, "pmml")
    assert not hasattr(booster, "n_rounds_")  # the fit's rounds, not the imported model's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.predict(X)


def test_the_opset_5_tree_ensemble_is_refused_saying_how_to_convert(tmp_path: Path) -> None:
    node = onnx.helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml")
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 2])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [None, 1])],
    )
    path = saved(tmp_path, "opset5", onnx.helper.make_model(graph))
    assert_one_line_error("ai.onnx.ml opset 5.*target_opset", fm.RandomForestRegressor(), path)


def test_sparse_rows_read_as_the_model_read_them(tmp_path: Path) -> None:
    """scikit-learn's trees read a sparse matrix's absent entries as zeros, XGBoost's (forklift's own) as missing:
    an imported model reads them as the tool that fitted it did."""
    X, y, *_ = data()
    X[np.random.default_rng(1).random(X.shape) < 0.5] = 0.0
    sparse = sp.csr_matrix(X)
    estimator = sk_ensemble.RandomForestClassifier(n_estimators=5, max_depth=5, random_state=0).fit(sparse, y)
    path = saved(tmp_path, "sparse", to_onnx(estimator, X[:1]))
    model: Any = fm.RandomForestClassifier().import_model(path, "onnx")
    np.testing.assert_allclose(model.predict_proba(sparse), estimator.predict_proba(sparse), rtol=0, atol=TOLERANCE)
    ours = fm.RandomForestClassifier(n_estimators=5, max_depth=5, random_state=0).fit(sparse, y)
    for kind in ("onnx", "pmml"):
        ours.export_model(tmp_path / f"ours.{kind}", kind)
        back: Any = fm.RandomForestClassifier().import_model(tmp_path / f"ours.{kind}", kind)
        np.testing.assert_array_equal(back.predict_proba(sparse), ours.predict_proba(sparse))


def test_a_graph_onnx_runtime_cannot_load_is_one_line(tmp_path: Path) -> None:
    X, _, _, signal = data()
    estimator = sk_ensemble.RandomForestRegressor(n_estimators=2).fit(X, signal)
    graph = to_onnx(estimator, initial_types=[("X", DoubleTensorType([None, FEATURES]))])  # double leaves
    assert_one_line_error(
        "ONNX Runtime cannot load this graph: ", fm.RandomForestRegressor(), saved(tmp_path, "d", graph)
    )


def test_an_empty_file_and_a_folder_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty.onnx").touch()
    assert_one_line_error(
        "empty.onnx: not an ONNX model \\(no graph in it\\)", fm.RandomForestRegressor(), tmp_path / "empty.onnx"
    )
    assert_one_line_error(
        f"^{re.escape(str(tmp_path))}: a folder, not a model file", fm.RandomForestRegressor(), tmp_path
    )


def tree_pmml(node: str, *, strategy: str = "", replacement: str = "") -> str:
    """A regression tree on f1 and f2 whose root splits as ``node`` says (its children: 1.0 and 2.0)."""
    return pmml(
        '<DataField name="y" optype="continuous" dataType="double"/>',
        f'<TreeModel functionName="regression" {strategy}><MiningSchema><MiningField name="y" usageType="target"/>'
        f'<MiningField name="f1" {replacement}/><MiningField name="f2"/></MiningSchema>'
        '<Output><OutputField name="value" feature="predictedValue"/></Output>'
        f'<Node id="0" score="0.0"><True/>{node}</Node></TreeModel>',
    )


BELOW_ONE = simple("f1", "lessOrEqual", 1.0)
ABOVE_ONE = simple("f1", "greaterThan", 1.0)


@pytest.mark.slow  # PMML4S starts a JVM
def test_missing_values_in_pmml_go_where_pmml4s_sends_them(tmp_path: Path) -> None:
    """isMissing in an ``or``, and a field's missingValueReplacement, against PMML4S."""
    documents = {
        "or": tree_pmml(
            '<Node id="1" score="1.0"><CompoundPredicate booleanOperator="or">'
            '<SimplePredicate field="f1" operator="isMissing"/>' + ABOVE_ONE + "</CompoundPredicate></Node>"
            '<Node id="2" score="2.0">' + BELOW_ONE + "</Node>"
        ),
        "replacement": tree_pmml(
            f'<Node id="1" score="1.0">{BELOW_ONE}</Node><Node id="2" score="2.0">{ABOVE_ONE}</Node>',
            strategy='missingValueStrategy="defaultChild"',
            replacement='missingValueReplacement="5"',
        ).replace('<Node id="0" score="0.0">', '<Node id="0" score="0.0" defaultChild="1">'),
    }
    X = probe_rows([1.0])
    for name, document in documents.items():
        path = tmp_path / f"{name}.pmml"
        path.write_text(document)
        model: Any = fm.DecisionTreeRegressor().import_model(path, "pmml")
        np.testing.assert_allclose(model.predict(X), pmml4s(path, X)["value"].astype(float), rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    ("document", "said"),
    [
        (
            tree_pmml(
                '<Node id="1" score="1.0"><CompoundPredicate booleanOperator="and">'
                + BELOW_ONE
                + simple("f2", "lessThan", 1.0)
                + '</CompoundPredicate></Node><Node id="2" score="2.0"><True/></Node>'
            ),
            "node 1: CompoundPredicate and: read are thresholds",
        ),
        (
            tree_pmml(
                f'<Node id="1" score="1.0">{BELOW_ONE}</Node><Node id="2" score="2.0">{ABOVE_ONE}</Node>',
                strategy='missingValueStrategy="lastPrediction"',
            ),
            "missingValueStrategy='lastPrediction': read are none, defaultChild, nullPrediction",
        ),
        (
            tree_pmml(
                f'<Node id="1" score="1.0">{BELOW_ONE}</Node><Node id="2" score="2.0">{ABOVE_ONE}</Node>',
                strategy='noTrueChildStrategy="returnLastPrediction"',
            ),
            "node 0: a missing value there scores the node itself",
        ),
    ],
    ids=["and", "lastPrediction", "returnLastPrediction"],
)
def test_pmml_that_would_predict_otherwise_is_refused(tmp_path: Path, document: str, said: str) -> None:
    path = tmp_path / "model.pmml"
    path.write_text(document)
    assert_one_line_error(said, fm.DecisionTreeRegressor(), path, "pmml")
