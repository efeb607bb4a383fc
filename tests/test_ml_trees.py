"""forklift.ml's trees and boosting machines against their references: scikit-learn's decision trees where both
are exact (data whose values fit the histogram's bins), XGBoost's own training for boosting, scikit-learn's forest
for quality; the ONNX export through a fresh ONNX Runtime session; missing values; scikit-learn's tools and
``check_estimator``; bad input as one clear error each."""

from __future__ import annotations

import math
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pandas as pd
import pytest
import scipy.sparse as sp
import xgboost
from sklearn import ensemble as sk_ensemble
from sklearn import tree as sk_tree
from sklearn.base import clone
from sklearn.datasets import load_iris, make_classification, make_regression
from sklearn.metrics import log_loss, roc_auc_score
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

from forklift.ml import (
    BoostingMachineClassifier,
    BoostingMachineRegressor,
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    LinearRegression,
    LogisticRegression,
    RandomForestClassifier,
    RandomForestRegressor,
    SupportVectorMachine,
    column_bundles,
    trees,
)
from forklift.ml.column_bundles import ColumnBundles


def binned_classification(classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Values on a grid of 0.1 (fewer distinct values a feature than the 256 bins): histogram splits are exact."""
    X, y = make_classification(
        n_samples=4000, n_features=8, n_informative=5, n_classes=classes, n_clusters_per_class=1, random_state=seed
    )
    return np.round(X, 1), y


def with_missing(X: np.ndarray, seed: int, share: float = 0.1) -> np.ndarray:
    X = X.copy()
    X[np.random.default_rng(seed).random(X.shape) < share] = np.nan
    return X


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_decision_tree_classifier_is_scikit_learns_gini_tree(classes: int, seed: int) -> None:
    X, y = binned_classification(classes, seed)
    ours = DecisionTreeClassifier(max_depth=4).fit(X, y)
    theirs = sk_tree.DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), atol=1e-6)
    # the same split gains (Gini decreases); a split between features of equal gain may go either way
    np.testing.assert_allclose(split_gain_shares(ours.ensemble_.trees[0].gain), sklearn_gain_shares(theirs), atol=1e-5)
    np.testing.assert_allclose(ours.feature_importances_, theirs.feature_importances_, atol=1e-2)
    assert ours.ensemble_.trees[0].depth == theirs.get_depth()
    assert list(ours.classes_) == list(theirs.classes_)


def split_gain_shares(gains: np.ndarray) -> np.ndarray:
    gains = np.sort(gains[gains > 0])
    return gains / gains.sum()


def sklearn_gain_shares(model: Any) -> np.ndarray:
    tree = model.tree_
    weighted = tree.weighted_n_node_samples * tree.impurity
    left, right = tree.children_left, tree.children_right
    splits = left >= 0
    gains = weighted[splits] - weighted[left[splits]] - weighted[right[splits]]
    return split_gain_shares(gains)


@pytest.mark.parametrize("depth", [3, 6])
def test_decision_tree_regressor_is_scikit_learns_squared_error_tree(depth: int) -> None:
    X, y = make_regression(n_samples=3000, n_features=6, noise=5.0, random_state=depth)
    X = np.round(X, 1)
    ours = DecisionTreeRegressor(max_depth=depth).fit(X, y)
    theirs = sk_tree.DecisionTreeRegressor(max_depth=depth).fit(X, y)
    np.testing.assert_allclose(ours.predict(X), theirs.predict(X), rtol=1e-5, atol=1e-3)
    assert ours.ensemble_.trees[0].depth == theirs.get_depth()


def test_an_unlimited_tree_grows_until_its_leaves_are_pure() -> None:
    X, y = binned_classification(3, 2)
    ours = DecisionTreeClassifier().fit(X, y)
    theirs = sk_tree.DecisionTreeClassifier(random_state=0).fit(X, y)
    assert ours.score(X, y) == theirs.score(X, y)


@pytest.mark.parametrize("leaf, weighted", [(5, False), (20, False), (1, True)])
def test_a_class_trees_every_leaf_holds_its_rows_classes(leaf: int, weighted: bool) -> None:
    """XGBoost's vector-leaf trees split into leaves lighter than min_child_weight (min_samples_leaf) and give
    them no class at all: iris rows 70, 77 and 106 had probabilities 0/0 (NaN) and were predicted class 0."""
    X, y = make_classification(3000, 10, n_informative=6, n_classes=4, random_state=leaf)
    weight = np.random.default_rng(0).uniform(0.1, 3.0, len(y)) if weighted else None
    ours = DecisionTreeClassifier(min_samples_leaf=leaf, max_depth=None if weighted else 12).fit(X, y, weight)
    theirs = sk_tree.DecisionTreeClassifier(min_samples_leaf=leaf, max_depth=12, random_state=0).fit(X, y)
    tree = ours.ensemble_.trees[0]
    np.testing.assert_allclose(tree.values[tree.leaves].sum(axis=1), 1.0, atol=1e-6)  # class shares, each leaf
    probabilities = ours.predict_proba(X)
    assert np.isfinite(probabilities).all()
    if not weighted:  # weighted, min_samples_leaf bounds a leaf's weight here (at mean 1), its rows there
        assert abs(ours.score(X, y) - theirs.score(X, y)) < 0.01, (ours.score(X, y), theirs.score(X, y))
    forest = RandomForestClassifier(n_estimators=5, min_samples_leaf=leaf, random_state=0).fit(X, y, weight)
    for grown in forest.ensemble_.trees:  # a forest's tree holds its share of the average in every leaf
        np.testing.assert_allclose(grown.values[grown.leaves].sum(axis=1), 1 / 5, atol=1e-6)
    iris = load_iris()
    on_iris = DecisionTreeClassifier(min_samples_leaf=5).fit(iris.data, iris.target)
    assert list(on_iris.predict(iris.data[[70, 77, 106]])) == [2, 2, 1]  # as scikit-learn's (it was 0, 0, 0)


def test_fewer_rows_than_a_leaf_takes_make_one_leaf_of_them_all() -> None:
    """XGBoost gave such a root no value: NaN probabilities, a regression target of 0, a forest's tree left out."""
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(20, 3)), np.arange(20) % 3
    shares = np.bincount(y) / 20
    np.testing.assert_allclose(DecisionTreeClassifier(min_samples_leaf=50).fit(X, y).predict_proba(X[:2]),
                               [shares, shares], atol=1e-6)  # fmt: skip
    two = DecisionTreeClassifier(min_samples_leaf=50).fit(X, y > 0)
    np.testing.assert_allclose(two.predict_proba(X[:1]), [[shares[0], 1 - shares[0]]], atol=1e-6)
    target = 100 + np.arange(20.0)
    assert DecisionTreeRegressor(min_samples_leaf=50).fit(X, target).predict(X[:1]) == pytest.approx([109.5])
    forest = RandomForestRegressor(n_estimators=4, min_samples_leaf=20, random_state=0).fit(X, target)
    assert forest.predict(X[:1])[0] == pytest.approx(109.5, abs=6)  # each tree a mean of its draw
    classes = RandomForestClassifier(n_estimators=4, min_samples_leaf=20, random_state=0).fit(X, y)
    for grown in classes.ensemble_.trees:
        np.testing.assert_allclose(grown.values[grown.leaves].sum(axis=1), 1 / 4, atol=1e-6)


def boosting_reference(
    X: np.ndarray, y: np.ndarray, start: np.ndarray, parameters: dict[str, Any], rounds: int
) -> xgboost.Booster:
    matrix = xgboost.DMatrix(X, label=y, base_margin=np.tile(start, (len(X), 1)).ravel())
    common = {"tree_method": "hist", "max_bin": 256, "reg_lambda": 0.0, "learning_rate": 0.1, "seed": 0}
    return xgboost.train(common | parameters, matrix, num_boost_round=rounds)


@pytest.mark.parametrize("classes", [2, 3])
def test_boosting_with_a_fixed_depth_is_xgboosts_boosting(classes: int) -> None:
    X, y = binned_classification(classes, 3)
    X = with_missing(X, 3)
    ours = BoostingMachineClassifier(num_round=20, max_depth=4).fit(X, y)
    shares = np.bincount(y) / len(y)
    if classes == 2:
        start = np.log(shares[1:] / shares[:1])
        parameters: dict[str, Any] = {"objective": "binary:logistic", "max_depth": 4}
    else:
        start = np.log(shares)
        parameters = {"objective": "multi:softprob", "num_class": 3, "max_depth": 4}
    reference = boosting_reference(X, y, start, parameters, 20)
    expected = reference.predict(xgboost.DMatrix(X, base_margin=np.tile(start, (len(X), 1)).ravel()))
    probabilities = ours.predict_proba(X)
    np.testing.assert_allclose(probabilities[:, 1] if classes == 2 else probabilities, expected, atol=1e-5)
    assert ours.n_rounds_ == 20


def test_boosting_draws_each_rounds_depth_from_its_seed() -> None:
    X, y = binned_classification(2, 4)
    model = BoostingMachineClassifier(num_round=30, min_max_depth=2, max_max_depth=5, random_state=7).fit(X, y)
    depths = [tree.depth for tree in model.ensemble_.trees]
    assert min(depths) >= 1 and max(depths) <= 5 and len(set(depths)) > 1
    again = BoostingMachineClassifier(num_round=30, min_max_depth=2, max_max_depth=5, random_state=7).fit(X, y)
    np.testing.assert_array_equal(model.predict_proba(X), again.predict_proba(X))
    other = BoostingMachineClassifier(num_round=30, min_max_depth=2, max_max_depth=5, random_state=8).fit(X, y)
    assert [tree.depth for tree in other.ensemble_.trees] != depths


def test_each_regression_objective_predicts_what_it_names() -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(6000, 3))
    signal = 1.0 + X[:, 0]
    fit = {"num_round": 100, "max_depth": 1, "learning_rate": 0.1}  # stumps: the signal is additive
    mse = BoostingMachineRegressor(objective="mse", **fit).fit(X, signal + rng.normal(scale=0.3, size=len(X)))
    assert np.abs(mse.predict(X) - signal).mean() < 0.05  # the conditional mean
    quantile_y = signal + rng.normal(scale=0.3, size=len(X))
    quantile = BoostingMachineRegressor(objective="quantile", alpha=0.9, **fit).fit(X, quantile_y)
    assert abs((quantile_y <= quantile.predict(X)).mean() - 0.9) < 0.02  # the 0.9 quantile
    counts = rng.poisson(np.exp(signal))
    poisson = BoostingMachineRegressor(objective="poisson", **fit).fit(X, counts)
    assert np.abs(np.log(poisson.predict(X)) - signal).mean() < 0.06  # the Poisson mean
    probability = 1.0 / (1.0 + np.exp(-2.0 * X[:, 0]))
    outcomes = (rng.random(len(X)) < probability).astype(float)
    cross_entropy = BoostingMachineRegressor(objective="cross_entropy", **fit).fit(X, outcomes)
    assert np.abs(cross_entropy.predict(X) - probability).mean() < 0.04  # the probability


@pytest.mark.parametrize(
    ("make", "target"),
    [
        (lambda p: BoostingMachineClassifier(num_round=20, max_depth=3, tree_select_probability=p), "binary"),
        (lambda p: BoostingMachineClassifier(num_round=20, max_depth=3, tree_select_probability=p), "classes"),
        (lambda p: BoostingMachineRegressor(num_round=20, max_depth=3, tree_select_probability=p), "values"),
        (
            lambda p: BoostingMachineRegressor(
                num_round=20, max_depth=3, objective="poisson", tree_select_probability=p
            ),
            "counts",
        ),
    ],
    ids=["binary", "3-classes", "mse", "poisson"],
)
def test_snapboosts_own_rounds_grow_the_trees_xgboost_grows(make: Any, target: str) -> None:
    """With every round a tree, forklift's mixed loop (its gradients, weights and margins) is XGBoost's boosting."""
    X, y = binned_classification(3, 14)
    weight = np.random.default_rng(14).uniform(0.5, 2.0, len(y))
    labels = {"binary": (y > 0).astype(int), "classes": y, "values": X[:, 0] * 2 + X[:, 1] ** 2}
    labels["counts"] = np.random.default_rng(15).poisson(np.exp(X[:, 0] / 2))
    own, xgboosts = (
        make(1.0 - 1e-12).fit(X, labels[target], sample_weight=weight),
        make(1.0).fit(X, labels[target], sample_weight=weight),
    )
    if hasattr(own, "predict_proba"):
        np.testing.assert_allclose(own.predict_proba(X), xgboosts.predict_proba(X), atol=1e-5)
    else:
        np.testing.assert_allclose(own.predict(X), xgboosts.predict(X), rtol=1e-5, atol=1e-5)


def test_ridge_rounds_learn_a_smooth_target_and_export_as_onnx(tmp_path: Path) -> None:
    rng = np.random.default_rng(16)
    X = rng.uniform(-2, 2, size=(3000, 2))
    y = np.sin(2 * X[:, 0]) + np.cos(X[:, 1])
    mostly_ridge = BoostingMachineRegressor(
        num_round=40, tree_select_probability=0.05, n_components=50, gamma=1.0, regularizer=1.0, learning_rate=0.5,
        random_state=2,
    ).fit(X, y)  # fmt: skip
    fourier = mostly_ridge.ensemble_.fourier
    assert fourier is not None and fourier.weights.shape[1] >= 30 * 50  # most rounds were ridge rounds
    assert mostly_ridge.score(X, y) > 0.95
    mostly_ridge.export_model(tmp_path / "ridge.onnx", output_type="onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "ridge.onnx"), providers=["CPUExecutionProvider"])
    (prediction,) = session.run(["prediction"], {"X": X.astype(np.float32)})
    np.testing.assert_allclose(prediction[:, 0], mostly_ridge.predict(X), atol=1e-5)
    with pytest.raises(ValueError, match=r"ridge rounds .* are written as ONNX only"):
        mostly_ridge.export_model(tmp_path / "ridge.pmml")
    X_missing = X.copy()
    X_missing[0, 0] = np.nan
    with pytest.raises(ValueError, match="this model has ridge rounds"):
        mostly_ridge.predict(X_missing)


def test_early_stopping_with_ridge_rounds_keeps_the_first_rounds_of_the_same_draw() -> None:
    X, y = binned_classification(2, 17)
    X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.3, random_state=0)
    options = {"max_depth": 6, "learning_rate": 0.5, "random_state": 4, "tree_select_probability": 0.6}
    stopped = BoostingMachineClassifier(num_round=200, early_stopping_rounds=5, **options)
    stopped.fit(X_train, y_train, X_val=X_val, y_val=y_val)
    assert 1 <= stopped.n_rounds_ < 200 and stopped.ensemble_.fourier is not None
    exact = BoostingMachineClassifier(num_round=stopped.n_rounds_, **options).fit(X_train, y_train)
    np.testing.assert_allclose(stopped.predict_proba(X_val), exact.predict_proba(X_val), atol=1e-6)


def test_early_stopping_keeps_the_rounds_up_to_the_best() -> None:
    X, y = binned_classification(2, 6)
    X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.3, random_state=0)
    options = {"max_depth": 6, "learning_rate": 0.5, "random_state": 1}
    stopped = BoostingMachineClassifier(num_round=200, early_stopping_rounds=5, **options)
    stopped.fit(X_train, y_train, X_val=X_val, y_val=y_val)
    assert 1 <= stopped.n_rounds_ < 200
    assert len(stopped.ensemble_.trees) == stopped.n_rounds_
    exact = BoostingMachineClassifier(num_round=stopped.n_rounds_, **options).fit(X_train, y_train)
    np.testing.assert_allclose(stopped.predict_proba(X_val), exact.predict_proba(X_val), atol=1e-6)


def test_forest_is_as_good_as_scikit_learns_and_same_seed_same_model() -> None:
    X, y = make_classification(n_samples=6000, n_features=20, n_informative=6, random_state=8)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0)
    ours = RandomForestClassifier(n_estimators=30, max_depth=8, random_state=3).fit(X_train, y_train)
    theirs = sk_ensemble.RandomForestClassifier(n_estimators=30, max_depth=8, random_state=3).fit(X_train, y_train)
    auc = roc_auc_score(y_test, ours.predict_proba(X_test)[:, 1])
    assert auc >= roc_auc_score(y_test, theirs.predict_proba(X_test)[:, 1]) - 0.01
    np.testing.assert_allclose(ours.predict_proba(X_test).sum(axis=1), 1.0, atol=1e-5)
    threads = RandomForestClassifier(n_estimators=30, max_depth=8, random_state=3, n_jobs=2).fit(X_train, y_train)
    np.testing.assert_allclose(ours.predict_proba(X_test), threads.predict_proba(X_test), atol=1e-6)
    other = RandomForestClassifier(n_estimators=30, max_depth=8, random_state=4).fit(X_train, y_train)
    assert not np.array_equal(ours.predict_proba(X_test), other.predict_proba(X_test))
    regressor = RandomForestRegressor(n_estimators=20, max_depth=6, random_state=0).fit(X_train, y_train)
    assert regressor.score(X_test, y_test) > 0.5


def test_many_rows_are_binned_by_cuts_on_a_sample_that_keeps_each_columns_extremes(monkeypatch) -> None:
    X, y = make_classification(n_samples=8000, n_features=10, n_informative=6, random_state=5)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    weight = np.random.default_rng(0).uniform(0.5, 2.0, len(y_train))

    def fitted() -> BoostingMachineClassifier:
        return BoostingMachineClassifier(num_round=30, max_depth=4).fit(X_train, y_train, sample_weight=weight)

    whole = fitted()  # 6000 rows: every row sketched
    monkeypatch.setattr(trees, "SKETCH_ROWS", 600)
    sampled = fitted()
    assert not np.allclose(sampled.predict_proba(X_test), whole.predict_proba(X_test), atol=1e-6)  # other cuts
    losses = [log_loss(y_test, model.predict_proba(X_test)) for model in (whole, sampled)]
    assert abs(losses[1] - losses[0]) < 0.01, losses
    # a value in one row of 4000, outside a sample of 600 rows: still its own side of a split
    rare = np.zeros((4000, 2))
    rare[:, 1] = np.random.default_rng(1).normal(size=4000)
    rare[2345, 0] = 7.0
    rows, _ = trees._cut_rows(rare, np.ones(4000))
    assert 7.0 not in rows[:-2, 0] and 7.0 in rows[:, 0]  # the sample missed it; the extremes hold it
    label = (rare[:, 0] > 0).astype(int)
    stump = DecisionTreeClassifier(max_depth=1).fit(rare, label)
    assert stump.predict(rare[2345:2346])[0] == 1 and (stump.predict(rare) == label).all()


def one_hot_table(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A number, a colour of 5 one-hot, a size of 3 one-hot, a lone 0/1 flag and another number (on a grid of 0.1,
    so that histogram splits are exact); the label depends on each."""
    rng = np.random.default_rng(seed)
    numbers = np.round(rng.normal(size=(3000, 2)), 1)
    colour, size, flag = rng.integers(0, 5, 3000), rng.integers(0, 3, 3000), rng.integers(0, 2, 3000)
    X = np.hstack([numbers[:, :1], np.eye(5)[colour], np.eye(3)[size], flag[:, None], numbers[:, 1:]])
    score = numbers[:, 0] + 1.5 * (colour == 2) - (colour == 4) - (size == 0) + 0.5 * flag + rng.normal(size=3000)
    return X, (score > 0.3).astype(int)


def test_a_one_hot_is_grown_on_as_one_category_and_read_back_as_splits_on_its_columns(monkeypatch) -> None:
    X, y = one_hot_table(0)
    bundles = ColumnBundles.of(X)
    assert bundles is not None
    assert [g.tolist() for g in bundles.groups] == [[1, 2, 3, 4, 5], [6, 7, 8]]
    monkeypatch.setattr(column_bundles, "CHUNK_ROWS", 7)  # the rows read in blocks find the same one-hots
    assert [g.tolist() for g in ColumnBundles.of(X).groups] == [[1, 2, 3, 4, 5], [6, 7, 8]]  # type: ignore[union-attr]
    X_broken = X.copy()
    X_broken[2999, 1] = 0.5  # in the last block: the colour's columns are no one-hot
    assert [g.tolist() for g in ColumnBundles.of(X_broken).groups] == [[6, 7, 8]]  # type: ignore[union-attr]
    monkeypatch.undo()
    assert bundles.feature_types == ["q", "c", "c", "q", "q"]  # in the columns' order; the lone flag is no one-hot
    assert len(bundles.keeping_to(X[::2]).groups) == 2  # type: ignore[union-attr]  # other rows, the same one-hots
    unseen = X.copy()
    unseen[:5, 1:6] = 0.0  # rows of a colour the columns do not hold
    assert [g.tolist() for g in bundles.keeping_to(unseen).groups] == [[6, 7, 8]]  # type: ignore[union-attr]
    # exact trees: scikit-learn's on the columns, also for rows of no colour
    ours = DecisionTreeClassifier(max_depth=5).fit(X, y)
    theirs = sk_tree.DecisionTreeClassifier(max_depth=5, random_state=0).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(unseen), theirs.predict_proba(unseen), atol=1e-6)
    np.testing.assert_allclose(ours.feature_importances_, theirs.feature_importances_, atol=1e-2)
    assert ours.ensemble_.n_features == X.shape[1]
    # grown on categories: a missing colour (which the columns never had) goes as no colour at every split
    missing = unseen[:5].copy()
    missing[:, 1:6] = np.nan
    np.testing.assert_array_equal(ours.predict_proba(missing), ours.predict_proba(unseen[:5]))
    # boosting: XGBoost's own boosting on the columns, with early stopping on rows of no colour, then on rows that
    # keep to both one-hots (sparse or dense)
    model = BoostingMachineClassifier(num_round=20, max_depth=4).fit(X, y, X_val=unseen[:500], y_val=y[:500])
    start = np.log(np.bincount(y)[1:] / np.bincount(y)[:1])
    reference = boosting_reference(X, y, start, {"objective": "binary:logistic", "max_depth": 4}, model.n_rounds_)
    expected = reference.predict(xgboost.DMatrix(unseen, base_margin=np.full(len(X), start[0])))
    np.testing.assert_allclose(model.predict_proba(unseen)[:, 1], expected, atol=1e-5)
    for X_val in (X[:500], sp.csr_matrix(X[:500])):  # a sparse X_val's absent entries are missing: no bundles
        stopped = BoostingMachineClassifier(num_round=20, max_depth=4).fit(X, y, X_val=X_val, y_val=y[:500])
        reference = boosting_reference(X, y, start, {"objective": "binary:logistic", "max_depth": 4}, stopped.n_rounds_)
        expected = reference.predict(xgboost.DMatrix(X, base_margin=np.full(len(X), start[0])))
        np.testing.assert_allclose(stopped.predict_proba(X)[:, 1], expected, atol=1e-5)


def test_a_tie_between_splits_goes_as_on_the_columns() -> None:
    """Splits of equal gain on a number and on a category's column: XGBoost takes the lower feature, so the bundled
    features keep the columns' order and the tree is XGBoost's own on the columns."""
    rng = np.random.default_rng(3)
    size, colour = rng.integers(0, 3, 400), rng.integers(0, 6, 400)
    X = np.hstack([np.eye(3)[size], rng.normal(size=(400, 2)).round(1), np.eye(6)[colour]])
    y = (X[:, 3] + (colour == 1) - (colour == 3) + 0.7 * (size == 0) + rng.normal(size=400) > 0).astype(int)
    ours = DecisionTreeClassifier(max_depth=5, min_samples_leaf=7).fit(X, y)
    parameters = {"objective": "reg:squarederror", "max_depth": 5, "min_child_weight": 7, "learning_rate": 1.0,
                  "reg_lambda": 0.0, "base_score": 0.0, "tree_method": "hist", "max_bin": 256}  # fmt: skip
    reference = xgboost.train(parameters, xgboost.DMatrix(X, label=y), num_boost_round=1)
    np.testing.assert_allclose(ours.predict_proba(X)[:, 1], reference.predict(xgboost.DMatrix(X)), atol=1e-6)


def test_missing_values_and_a_sparse_matrixs_absent_entries_are_the_same() -> None:
    X, y = binned_classification(2, 9)
    X[X == 0] = 0.5  # no explicit zeros: every absent entry of the sparse matrix below is a NaN of the dense one
    X = with_missing(X, 9, share=0.3)
    stored = sp.csr_matrix(np.nan_to_num(X, nan=0.0))
    for make in (
        lambda: DecisionTreeClassifier(max_depth=5),
        lambda: BoostingMachineClassifier(num_round=10, max_depth=3),
    ):
        dense, sparse = make().fit(X, y), make().fit(stored, y)
        np.testing.assert_allclose(dense.predict_proba(X), sparse.predict_proba(stored), atol=1e-7)
        np.testing.assert_allclose(dense.predict_proba(X), dense.predict_proba(stored), atol=1e-7)


@pytest.mark.parametrize(
    "model",
    [
        DecisionTreeClassifier(max_depth=5),
        RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0),
        BoostingMachineClassifier(num_round=15),
        BoostingMachineRegressor(num_round=15, objective="poisson"),
    ],
    ids=["tree", "forest-regressor", "boosting-3-classes", "boosting-poisson"],
)
def test_the_exported_onnx_graph_predicts_what_the_model_predicts(model: Any, tmp_path: Path) -> None:
    X, y = binned_classification(3, 10)
    X = with_missing(X, 10)
    target = np.abs(y) if isinstance(model, BoostingMachineRegressor) else y
    model.fit(X, target)
    model.export_model(tmp_path / "model.onnx", output_type="onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    (prediction,) = session.run(["prediction"], {"X": X.astype(np.float32)})
    expected = model.predict_proba(X) if hasattr(model, "predict_proba") else model.predict(X)[:, None]
    np.testing.assert_allclose(prediction, expected, atol=1e-5)


def test_scikit_learn_tools_work_with_them() -> None:
    X, y = binned_classification(2, 11)
    model = BoostingMachineClassifier(num_round=10, max_depth=3).fit(X, y)
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.predict_proba(X), model.predict_proba(X))
    assert clone(model).get_params() == model.get_params()
    search = GridSearchCV(
        make_pipeline(StandardScaler(), DecisionTreeClassifier()),
        {"decisiontreeclassifier__max_depth": [1, 4]},
        cv=2,
    ).fit(X, y)
    assert search.best_params_ == {"decisiontreeclassifier__max_depth": 4}


@pytest.mark.parametrize(
    ("make", "fit_args", "message"),
    [
        (
            lambda: DecisionTreeClassifier(),
            "one-class",
            "needs samples of at least 2 classes in y; got only one class: 0.0",
        ),
        (lambda: DecisionTreeClassifier(criterion="entropy"), "", "criterion='entropy': expected 'gini'"),
        (lambda: DecisionTreeClassifier(max_depth=0), "", "max_depth=0: expected None or an integer >= 1"),
        (lambda: RandomForestClassifier(n_estimators=0), "", "n_estimators=0: expected an integer >= 1"),
        (lambda: RandomForestClassifier(max_features=99), "", "max_features=99: expected None, 'auto'"),
        (lambda: DecisionTreeRegressor(hist_nbins=1), "", "hist_nbins=1: expected an integer in 2..65536"),
        (lambda: BoostingMachineClassifier(num_round=0), "", "num_round=0: expected an integer >= 1"),
        (
            lambda: BoostingMachineClassifier(min_max_depth=4, max_max_depth=2),
            "",
            "min_max_depth=4 is above max_max_depth=2",
        ),
        (lambda: BoostingMachineClassifier(subsample=0.0), "", "subsample=0.0: expected a number in (0, 1]"),
        (lambda: BoostingMachineClassifier(n_jobs=0), "", "n_jobs=0 is not valid"),
        (lambda: BoostingMachineClassifier(use_gpu=True), "", "use_gpu=True: no CUDA device 0 here"),
        (lambda: BoostingMachineRegressor(objective="hinge"), "", "objective='hinge': expected one of mse"),
        (lambda: BoostingMachineRegressor(objective="poisson"), "negative", "objective='poisson' needs y >= 0"),
        (lambda: BoostingMachineRegressor(objective="cross_entropy"), "", "objective='cross_entropy' needs y in"),
        (lambda: BoostingMachineClassifier(), "val-only", "give X_val and y_val together"),
        (lambda: BoostingMachineClassifier(), "unknown-class", "y_val holds 7.0, a class not in y"),
        (lambda: BoostingMachineClassifier(), "narrow-val", "X_val: X has 2 features, but BoostingMachine"),
        (lambda: BoostingMachineClassifier(tree_select_probability=0.0), "", "expected a number in (0, 1]"),
        (
            lambda: BoostingMachineClassifier(tree_select_probability=0.5, gamma=0),
            "",
            "gamma=0: expected a finite number > 0",
        ),
        (lambda: BoostingMachineClassifier(learning_rate=math.inf), "", "learning_rate=inf: expected a finite number"),
        (lambda: BoostingMachineRegressor(base_score=math.nan), "", "base_score=nan: expected None or a finite number"),
        (lambda: BoostingMachineRegressor(lambda_l2=math.inf), "", "lambda_l2=inf: expected a finite number >= 0"),
        (lambda: BoostingMachineClassifier(tree_select_probability=0.5), "missing", "which read every feature"),
        (
            lambda: DecisionTreeClassifier(),
            "infinite",
            "X[0, 0] is inf: DecisionTreeClassifier takes NaN as a missing value, but no infinite numbers",
        ),
        (lambda: RandomForestClassifier(bootstrap="no"), "", "bootstrap='no': expected True or False"),
        (lambda: BoostingMachineRegressor(verbose="yes"), "", "verbose='yes': expected True or False"),
        (lambda: BoostingMachineClassifier(), "negative-weight", "BoostingMachineClassifier: sample_weight: Negative"),
        (lambda: RandomForestRegressor(), "negative-weight", "RandomForestRegressor: sample_weight: Negative"),
        (lambda: BoostingMachineClassifier(), "short-val-weight", "sample_weight_val has 2 values for the 3 rows"),
        (lambda: DecisionTreeRegressor(), "words", "DecisionTreeRegressor: y holds text ('"),
        (lambda: DecisionTreeClassifier(), "text", "DecisionTreeClassifier: X's column 2 holds text ('blue')"),
        (lambda: DecisionTreeClassifier(), "y-nan", "DecisionTreeClassifier: y[4] is nan: y needs a label for every"),
        (lambda: BoostingMachineRegressor(), "y-inf", "BoostingMachineRegressor: y[4] is inf: y needs a finite number"),
        (lambda: BoostingMachineClassifier(class_weight="balance"), "", "class_weight='balance' is not valid"),
        (lambda: BoostingMachineClassifier(), "categorical", "BoostingMachineClassifier: X's column 'c' holds text"),
        (
            lambda: BoostingMachineRegressor(),
            "val-nan",
            "BoostingMachineRegressor: y_val[1] is nan: y_val needs a finite",
        ),
        (
            lambda: BoostingMachineClassifier(),
            "val-none",
            "BoostingMachineClassifier: y_val[0] is None: y_val needs a label",
        ),
        (lambda: DecisionTreeClassifier(), "huge", "X[2, 1] is 1e+40, beyond float32's range (the trees compare in"),
        (lambda: DecisionTreeClassifier(), "3-d", "Found array with dim 3, while dim <= 2 is required by DecisionTree"),
        (lambda: RandomForestRegressor(), "sparse-short-y", "inconsistent numbers of samples: [60, 59]"),
        (
            lambda: BoostingMachineRegressor(objective="quantile", tree_select_probability=0.5),
            "",
            "objective='quantile' grows trees only (XGBoost's quantile leaves): give tree_select_probability=1.0",
        ),
    ],
)
def test_bad_input_is_one_clear_error(make: Any, fit_args: str, message: str) -> None:
    rng = np.random.default_rng(12)
    X, y = rng.normal(size=(60, 3)), rng.integers(0, 2, 60) * 3.0  # regression targets 0 and 3
    kwargs: dict[str, Any] = {}
    if fit_args == "one-class":
        y = np.zeros(60)
    elif fit_args == "negative":
        y = y - 1
    elif fit_args == "val-only":
        kwargs = {"X_val": X}
    elif fit_args == "unknown-class":
        kwargs = {"X_val": X[:3], "y_val": np.array([0.0, 3.0, 7.0])}
    elif fit_args == "narrow-val":
        kwargs = {"X_val": X[:, :2], "y_val": y}
    elif fit_args == "infinite":
        X[0, 0] = np.inf
    elif fit_args == "missing":
        X[0, 0] = np.nan
    elif fit_args == "negative-weight":
        kwargs = {"sample_weight": np.where(np.arange(60) == 5, -1.0, 1.0)}
    elif fit_args == "short-val-weight":
        kwargs = {"X_val": X[:3], "y_val": y[:3], "sample_weight_val": np.ones(2)}
    elif fit_args == "words":
        y = np.where(y > 0, "yes", "no")
    elif fit_args == "text":  # an array of objects, a word among the numbers
        X = X.astype(object)
        X[7, 2] = "blue"
    elif fit_args == "categorical":  # pandas' categorical column of words: numpy's "Cannot cast str dtype"
        X = pd.DataFrame(X, columns=list("abc")).assign(c=pd.Categorical(np.where(y > 0, "red", "blue")))
    elif fit_args in ("y-nan", "y-inf"):
        y[4] = np.nan if fit_args == "y-nan" else np.inf
    elif fit_args == "val-nan":  # checked as y is (XGBoost's C++ said "Label contains NaN" in 12 lines)
        kwargs = {"X_val": X[:3], "y_val": np.array([0.0, np.nan, 3.0])}
    elif fit_args == "val-none":
        kwargs = {"X_val": X[:3], "y_val": np.array([None, None, None])}
    elif fit_args == "huge":  # finite, but infinite in float32
        X[2, 1] = 1e40
    elif fit_args == "sparse-short-y":  # scikit-learn's words (pandas' "Must pass 2-d input" came instead)
        X, y = sp.csr_matrix(X), y[:-1]
    elif fit_args == "3-d":  # scikit-learn's words (pandas' "Must pass 2-d input" came instead)
        X = X[:, :, None]
    with pytest.raises(ValueError) as caught:
        make().fit(X, y, **kwargs)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "make",
    [lambda: DecisionTreeClassifier(max_depth=6), lambda: RandomForestClassifier(n_estimators=5, random_state=0)],
    ids=["tree", "forest"],
)
def test_weights_scaled_by_one_number_grow_the_same_trees(make: Any) -> None:
    """min_samples_leaf counts rows, as scikit-learn's does: weights of 0.01 each grew another tree (XGBoost's
    min_child_weight bounds a leaf's summed weight), and class_weight's weights under 1 blocked splits."""
    rng = np.random.default_rng(1)
    X = rng.integers(0, 20, size=(2000, 6)).astype(float)
    y = ((X[:, 0] + 0.7 * X[:, 1] + rng.normal(size=2000) * 4) > 16).astype(int)
    answers = [make().fit(X, y, sample_weight=np.full(2000, scale)).predict_proba(X) for scale in (1.0, 0.01, 50.0)]
    np.testing.assert_array_equal(answers[1], answers[0])
    np.testing.assert_array_equal(answers[2], answers[0])
    if isinstance(make(), DecisionTreeClassifier):  # and as scikit-learn's tree grows it
        reference = sk_tree.DecisionTreeClassifier(max_depth=6).fit(X, y, sample_weight=np.full(2000, 0.01))
        np.testing.assert_allclose(answers[1], reference.predict_proba(X), atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: DecisionTreeClassifier(max_depth=3, n_jobs=1),
        lambda: BoostingMachineClassifier(num_round=5, max_depth=2, n_jobs=1),
        lambda: DecisionTreeRegressor(max_depth=3, n_jobs=1),
        lambda: LogisticRegression(n_jobs=1),
        lambda: LinearRegression(n_jobs=1),
        lambda: SupportVectorMachine(n_jobs=1),
    ],
)
def test_a_snapml_program_predicts_with_its_own_thread_count(make: Any) -> None:
    """snapml takes ``predict(X, n_jobs=...)`` (and ``predict_proba``, ``decision_function``); a program that passes
    it runs unchanged, with the same answers, and a count that is no count is refused as the fit's is."""
    X, y = binned_classification(2, 4)
    model = make().fit(X, y)
    for method in ("predict", "predict_proba", "decision_function"):
        if hasattr(model, method):
            np.testing.assert_allclose(getattr(model, method)(X, n_jobs=2), getattr(model, method)(X), rtol=1e-6)
            with pytest.raises(ValueError, match="n_jobs=0 is not valid"):
                getattr(model, method)(X, n_jobs=0)
    if hasattr(model, "ensemble_"):
        assert model.optimize_trees() is model  # snapml's call before predicting: nothing to do here


def test_predicting_with_another_number_of_features_is_refused() -> None:
    X, y = binned_classification(2, 13)
    model = DecisionTreeClassifier(max_depth=2).fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features, but DecisionTreeClassifier is expecting 8 features"):
        model.predict(X[:, :3])


# Row sampling makes a weight differ from repeated rows for the forests; XGBoost's softmax trees (min_child_weight
# in hessian units, its quantile sketch over weighted rows) differ between weights and copies for the boosting
# classifier. Each is a property of the learner, not of forklift's wrapping.
SAMPLE_WEIGHT_CHECKS = {
    "check_sample_weight_equivalence_on_dense_data": "row sampling / XGBoost's weighted sketch",
    "check_sample_weight_equivalence_on_sparse_data": "row sampling / XGBoost's weighted sketch",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("estimator", "expected"),
    [
        (DecisionTreeClassifier(), {}),
        (DecisionTreeRegressor(), {}),
        (RandomForestClassifier(), SAMPLE_WEIGHT_CHECKS),
        (RandomForestRegressor(), SAMPLE_WEIGHT_CHECKS),
        (BoostingMachineClassifier(num_round=10), SAMPLE_WEIGHT_CHECKS),
        (BoostingMachineRegressor(num_round=10), {}),
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, dict) else "",
)
def test_check_estimator(estimator: Any, expected: dict[str, str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_estimator(estimator, expected_failed_checks=expected)
