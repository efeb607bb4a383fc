"""forklift.ml's linear models against scikit-learn's optimum, its estimator checks, and bad input."""

from __future__ import annotations

import pickle
import re
import warnings

import numba
import numpy as np
import onnxruntime
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import make_regression
from sklearn.linear_model import Lasso, Ridge
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC
from sklearn.utils.estimator_checks import check_estimator

from forklift.ml import LinearRegression, LogisticRegression, SupportVectorMachine, estimators, kernels
from forklift.ml.datasets import make_dense_classification, make_sparse_clicks
from forklift.ml.layouts import as_rows
from forklift.ml.losses import Loss

TIGHT = 1e-10


@pytest.fixture(scope="module")
def dense() -> tuple[np.ndarray, np.ndarray]:
    X, y = make_dense_classification(n_samples=3000, n_features=20, random_state=1)
    return X, y


@pytest.fixture(scope="module")
def sparse() -> tuple[sp.csr_matrix, np.ndarray]:
    return make_sparse_clicks(n_samples=5000, n_features=300, n_fields=6, random_state=2)


def logistic_objective(X, y, w, lam, *, intercept=0.0, scaling=1.0):  # type: ignore[no-untyped-def]
    """snapml's and liblinear's objective: the intercept is the weight of a constant feature ``scaling``."""
    signs = np.where(y > 0, 1.0, -1.0)
    z = np.asarray(X @ w).ravel() + intercept
    return float(np.logaddexp(0, -signs * z).sum() + 0.5 * lam * (w @ w + (intercept / scaling) ** 2))


@pytest.mark.parametrize("layout", ["dense", "sparse"])
@pytest.mark.parametrize("dual", [False, True, "auto"])  # auto: the primal on dense data, Newton on sparse
@pytest.mark.parametrize("n_jobs", [1, 2])
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_logistic_regression_reaches_sklearn_optimum(request, layout, dual, n_jobs) -> None:  # type: ignore[no-untyped-def]
    X, y = request.getfixturevalue(layout)
    lam = 2.0
    ours = LogisticRegression(regularizer=lam, dual=dual, n_jobs=n_jobs, tol=TIGHT, random_state=0).fit(X, y)
    reference = SkLogisticRegression(C=1 / lam, fit_intercept=False, solver="newton-cholesky", tol=1e-12).fit(X, y)
    w_ref = reference.coef_.ravel()
    ref = logistic_objective(X, y, w_ref, lam)
    got = logistic_objective(X, y, ours.coef_.ravel(), lam)
    assert got == pytest.approx(ref, rel=1e-7)
    np.testing.assert_allclose(ours.coef_.ravel(), w_ref, atol=2e-3 * np.abs(w_ref).max())
    np.testing.assert_allclose(ours.predict_proba(X), reference.predict_proba(X), atol=1e-4)


def test_intercept_is_a_regularised_constant_feature_as_in_liblinear(dense) -> None:  # type: ignore[no-untyped-def]
    X, y = dense
    X = X + 1.0  # off-centre: the intercept matters
    reference = SkLogisticRegression(
        solver="liblinear", fit_intercept=True, intercept_scaling=2.0, tol=1e-10, max_iter=10_000
    ).fit(X, y)
    ref = logistic_objective(X, y, reference.coef_.ravel(), 1.0, intercept=reference.intercept_[0], scaling=2.0)
    for dual in (False, True):
        ours = LogisticRegression(fit_intercept=True, intercept_scaling=2.0, dual=dual, tol=TIGHT).fit(X, y)
        got = logistic_objective(X, y, ours.coef_.ravel(), 1.0, intercept=ours.intercept_[0], scaling=2.0)
        assert got == pytest.approx(ref, rel=1e-6)
        np.testing.assert_allclose(ours.intercept_, reference.intercept_, rtol=1e-2)


def test_weights_match_sklearns_weighted_optimum(dense) -> None:  # type: ignore[no-untyped-def]
    X, y = dense
    weights = np.random.default_rng(0).uniform(0.2, 3.0, len(y))
    ours = LogisticRegression(class_weight="balanced", tol=TIGHT, dual=True).fit(X, y, sample_weight=weights)
    reference = SkLogisticRegression(
        class_weight="balanced", fit_intercept=False, solver="newton-cholesky", tol=1e-12
    ).fit(X, y, sample_weight=weights)
    np.testing.assert_allclose(ours.coef_, reference.coef_, atol=2e-3 * np.abs(reference.coef_).max())


@pytest.mark.parametrize("layout", ["dense", "sparse"])  # the sparse models share one copy of the rows (Newton)
def test_multiclass_is_one_vs_rest(dense, layout) -> None:  # type: ignore[no-untyped-def]
    X, _ = dense
    y = np.digitize(X[:, 0] + X[:, 1], [-1.0, 1.0])  # three classes
    X = sp.csr_matrix(X) if layout == "sparse" else X
    ours = LogisticRegression(tol=TIGHT, n_jobs=2).fit(X, y)
    reference = OneVsRestClassifier(SkLogisticRegression(fit_intercept=False, solver="newton-cholesky", tol=1e-12)).fit(
        X, y
    )
    assert ours.coef_.shape == (3, X.shape[1])
    np.testing.assert_allclose(ours.predict_proba(X), reference.predict_proba(X), atol=1e-4)
    assert (ours.predict(X) == reference.predict(X)).mean() > 0.999


def test_scores_read_every_layout_as_stored_and_equal_numpys_product(dense) -> None:  # type: ignore[no-untyped-def]
    """The threads' prediction kernel takes float32 and CSR as they are; CSC and F order go through scipy/numpy."""
    X, _ = dense
    X = X[:2000]
    y = np.digitize(X[:, 0] + X[:, 1], [-1.0, 1.0])
    model = LogisticRegression(fit_intercept=True, n_jobs=2).fit(X, y)
    expected = X @ model.coef_.T + model.intercept_
    layouts = [X, X.astype(np.float32), np.asfortranarray(X), sp.csr_matrix(X.astype(np.float32)), sp.csc_matrix(X)]
    for layout in layouts:
        tolerance = 1e-4 if layout.dtype == np.float32 else 1e-12  # float32 sums: a few ulps of 1e-7 per term
        np.testing.assert_allclose(model.decision_function(layout), expected, rtol=tolerance, atol=tolerance)
    binary = LogisticRegression(n_jobs=2).fit(X, y > 0)
    np.testing.assert_allclose(binary.decision_function(sp.csr_matrix(X)), X @ binary.coef_.ravel(), atol=1e-12)


@pytest.mark.parametrize("layout", ["dense", "sparse"])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_svm_reaches_liblinears_optimum(request, layout, loss) -> None:  # type: ignore[no-untyped-def]
    X, y = request.getfixturevalue(layout)
    lam = 2.0
    ours = SupportVectorMachine(loss=loss, regularizer=lam, tol=1e-8, max_iter=20_000).fit(X, y)
    reference = LinearSVC(loss=loss, C=1 / lam, fit_intercept=False, tol=1e-10, max_iter=200_000, random_state=0)
    reference.fit(X, y)
    signs = np.where(y > 0, 1.0, -1.0)

    def objective(w: np.ndarray) -> float:
        slack = np.maximum(0, 1 - signs * np.asarray(X @ w).ravel())
        return float((slack if loss == "hinge" else slack**2).sum() + 0.5 * lam * w @ w)

    # liblinear may stop short of the optimum (it warns that it did not converge on the hinge loss): ours must be at
    # least as low, to 1e-5
    assert objective(ours.coef_.ravel()) <= objective(reference.coef_.ravel()) * (1 + 1e-5)


def test_the_hinge_dual_shrinks_rows_held_at_a_bound() -> None:
    """LIBLINEAR's shrinking: a dual at a bound whose gradient pushes it further out than the last epoch's extreme
    projected gradient is skipped and marked; a free row moves and alone sets this epoch's extremes."""
    X = np.array([[1.0, 0.0], [-1.0, 0.0], [0.25, 1.0]])  # all labelled +1; w = (2, 0): margins 2, -2, 0.5
    y = np.ones(3)
    alpha = np.array([0.0, 1.0, 0.5])  # at 0 (gradient 1), at the bound 1 (gradient -3), free (gradient -0.5)
    for thresholds, skipped in (([0.5, -0.5], [True, True, False]), ([np.inf, -np.inf], [False, False, False])):
        moved, extremes, shrunk = alpha.copy(), np.empty((1, 2)), np.zeros(3, dtype=np.bool_)
        kernels.dual_epoch(as_rows(X), y, y, np.ones(3), (X**2).sum(axis=1), moved, np.array([2.0, 0.0, 0.0]),
                           np.empty((1, 3)), np.arange(3), 1.0, 0.0, int(Loss.HINGE), np.array(thresholds),
                           extremes, shrunk)  # fmt: skip
        assert shrunk.tolist() == skipped
        assert moved[:2].tolist() == [0.0, 1.0] and moved[2] == pytest.approx(0.5 + 0.5 / 1.0625)
        # the rows held at their bounds project to 0 when visited
        assert extremes[0].tolist() == ([-0.5, -0.5] if skipped[0] else [0.0, -0.5])


@pytest.mark.parametrize("dual", [False, True, "auto"])
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_ridge_equals_sklearns_closed_form(dual) -> None:  # type: ignore[no-untyped-def]
    X, y = make_regression(n_samples=1500, n_features=25, noise=5.0, random_state=3)
    for data in (X, sp.csr_matrix(X)):
        ours = LinearRegression(regularizer=3.0, dual=dual, tol=1e-12, n_jobs=2).fit(data, y)
        reference = Ridge(alpha=3.0, fit_intercept=False, solver="cholesky").fit(X, y)
        np.testing.assert_allclose(ours.coef_, reference.coef_, atol=1e-7 * np.abs(reference.coef_).max())


def test_lasso_equals_sklearns_lasso() -> None:
    X, y = make_regression(n_samples=1000, n_features=40, n_informative=8, noise=2.0, random_state=4)
    lam = 200.0
    ours = LinearRegression(penalty="l1", regularizer=lam, tol=1e-12).fit(X, y)
    reference = Lasso(alpha=lam / len(y), fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, reference.coef_, atol=1e-6 * np.abs(reference.coef_).max())
    assert ((ours.coef_ == 0) == (reference.coef_ == 0)).all() and (ours.coef_ == 0).sum() > 10


def test_same_seed_same_model_and_thread_count_keeps_the_optimum(sparse) -> None:  # type: ignore[no-untyped-def]
    X, y = sparse
    first = LogisticRegression(dual=True, random_state=7, tol=1e-4).fit(X, y)
    again = LogisticRegression(dual=True, random_state=7, tol=1e-4).fit(X, y)
    np.testing.assert_array_equal(first.coef_, again.coef_)
    other = LogisticRegression(dual=True, random_state=8, tol=1e-4).fit(X, y)
    assert not np.array_equal(first.coef_, other.coef_)


def test_scikit_learn_tools_work_with_it(dense) -> None:  # type: ignore[no-untyped-def]
    X, y = dense
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(fit_intercept=True))
    search = GridSearchCV(pipeline, {"logisticregression__regularizer": [0.1, 10.0]}, cv=3).fit(X, y)
    assert search.best_score_ > 0.8
    model = clone(LogisticRegression(regularizer=5.0)).fit(X, y)
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.predict_proba(X), model.predict_proba(X))
    assert model.get_params()["regularizer"] == 5.0


def test_training_history_and_convergence_warning(dense) -> None:  # type: ignore[no-untyped-def]
    X, y = dense
    model = LogisticRegression(generate_training_history="full", dual=False, tol=1e-9).fit(X, y)
    history = model.training_history_[0]
    assert len(history["objective"]) == model.n_iter_[0] > 2
    assert all(b <= a for a, b in zip(history["objective"], history["objective"][1:], strict=False))
    with pytest.warns(Warning, match="max_iter=1"):
        LogisticRegression(max_iter=1, tol=0).fit(X, y)


@pytest.mark.parametrize(
    ("make", "fit_args", "message"),
    [
        (lambda: LogisticRegression(), "nan", "X[3, 1] is nan: LogisticRegression takes finite numbers only"),
        (lambda: LogisticRegression(), "one_class", "got only one class: 1"),
        (lambda: LogisticRegression(), "nullable_na", "X[4, 2] is nan: LogisticRegression takes finite numbers"),
        (lambda: LinearRegression(), "y_none", "LinearRegression: y[6] is None: y needs a finite number for every"),
        (lambda: LogisticRegression(), "y_nan", "LogisticRegression: y[6] is nan: y needs a label for every row"),
        (lambda: LinearRegression(), "words_series", "LinearRegression: y holds text ('yes'): a regressor predicts"),
        (lambda: LogisticRegression(class_weight="balance"), "ok", "class_weight='balance' is not valid: expected"),
        (lambda: LogisticRegression(), "continuous", "Unknown label type"),
        (lambda: SupportVectorMachine(), "continuous", "Unknown label type"),
        (lambda: LogisticRegression(regularizer=0), "ok", "regularizer=0 is not valid"),
        (lambda: LogisticRegression(regularizer=np.inf), "ok", "regularizer=inf is not valid: expected a finite"),
        (lambda: LinearRegression(tol=np.nan), "ok", "tol=nan is not valid: expected a finite number >= 0"),
        (lambda: LogisticRegression(penalty="l1", dual=True), "ok", "penalty='l1' is solved in the primal only"),
        (lambda: SupportVectorMachine(loss="log"), "ok", "loss='log' is not valid"),
        (lambda: LinearRegression(max_iter=0), "ok", "max_iter=0 is not valid"),
        (lambda: LogisticRegression(use_gpu=True, device_ids=[99]), "ok", "use_gpu=True: no CUDA device 99"),
        (lambda: LogisticRegression(privacy=True), "ok", "privacy=True"),
        (lambda: LogisticRegression(), "wrong_shape", "inconsistent numbers of samples"),
        (lambda: LogisticRegression(), "sparse_wrong_shape", "inconsistent numbers of samples: [30, 29]"),
        (lambda: LinearRegression(fit_intercept="maybe"), "ok", "fit_intercept='maybe': expected True or False"),
        (lambda: SupportVectorMachine(), "negative_weight", "SupportVectorMachine: sample_weight: Negative values"),
        (lambda: LinearRegression(), "short_weight", "sample_weight has 29 values for the 30 rows of X"),
        (lambda: LinearRegression(), "one_column", "LinearRegression: X has shape (30,). Reshape your data to rows"),
        (lambda: LinearRegression(), "words", "LinearRegression: y holds text ('yes'): a regressor predicts numbers"),
        (lambda: LogisticRegression(), "text", "LogisticRegression: X's column 'c' holds text ('high')"),
    ],
)
def test_bad_input_is_one_clear_error(make, fit_args, message) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4))
    y = (X[:, 0] > 0).astype(int)
    if fit_args == "nan":
        X[3, 1] = np.nan
    elif fit_args == "one_class":
        y = np.ones(30, dtype=int)
    elif fit_args == "continuous":
        y = rng.normal(size=30)
    elif fit_args in ("wrong_shape", "sparse_wrong_shape"):  # sparse: pandas' "Must pass 2-d input" came instead
        y = y[:-1]
        X = sp.csr_matrix(X) if fit_args == "sparse_wrong_shape" else X
    elif fit_args == "one_column":
        X = X[:, 0]
    elif fit_args == "words":
        y = np.where(y == 1, "yes", "no")
    elif fit_args == "text":  # a table's column of words, not yet one-hot
        X = pd.DataFrame(X, columns=list("abcd")).astype({"c": object})
        X.loc[5, "c"] = "high"
    elif fit_args == "nullable_na":  # pandas' nullable column, a row without a value
        X = pd.DataFrame(X, columns=list("abcd")).astype({"c": "Float64"})
        X.loc[4, "c"] = pd.NA
    elif fit_args == "y_none":  # a target column read as objects, one row empty
        y = y.astype(object)
        y[6] = None
    elif fit_args == "words_series":  # pandas' column of words: it was blamed on a column '?' of X
        y = pd.Series(np.where(y == 1, "yes", "no"))
    elif fit_args == "y_nan":
        y = y.astype(float)
        y[6] = np.nan
    weights = np.where(np.arange(30) == 2, -0.5, 1.0) if fit_args == "negative_weight" else None
    if fit_args == "short_weight":
        weights = np.ones(29)
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        make().fit(X, y, sample_weight=weights)
    assert "\n" not in str(caught.value)


def test_export_model_writes_onnx_that_predicts_the_same_and_refuses_a_name_that_says_pmml(  # type: ignore[no-untyped-def]
    dense, tmp_path
) -> None:
    X, y = dense
    model = LogisticRegression().fit(X, y)
    model.export_model(tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    (probabilities,) = session.run(["prediction"], {"X": X[:200].astype(np.float32)})
    np.testing.assert_allclose(probabilities, model.predict_proba(X[:200]), atol=1e-5)
    refusals = [  # snapml's trees write PMML by default: a name that says PMML must not get an ONNX graph
        (
            tmp_path / "model.pmml",
            "model.pmml is named as PMML, but output_type='onnx' writes ONNX: name it model.onnx",
        ),
        (tmp_path / "no-such-folder" / "m.onnx", f"the folder {tmp_path / 'no-such-folder'} does not exist"),
    ]
    for path, message in refusals:
        with pytest.raises(ValueError, match=re.escape(message)):
            model.export_model(path)
        assert not path.exists()


@pytest.mark.parametrize(
    "make", [lambda: SupportVectorMachine(use_gpu=True), lambda: LogisticRegression(use_gpu=True, penalty="l1")]
)
def test_what_the_device_path_cannot_fit_is_named(make, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # as on a machine with a GPU: the device check passes, the fit reaches the device path and refuses first
    monkeypatch.setattr(estimators, "check_cuda", lambda *args, **kwargs: None)
    model = make()
    X = np.random.default_rng(0).normal(size=(30, 4))
    with pytest.raises(
        ValueError, match=rf"{type(model).__name__}: use_gpu=True fits smooth losses with an l2 penalty"
    ):
        model.fit(X, (X[:, 0] > 0).astype(int))


def test_predicting_with_the_wrong_number_of_features_is_refused(dense) -> None:  # type: ignore[no-untyped-def]
    X, y = dense
    model = LogisticRegression().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :5])


# Checks of scikit-learn's suite that do not hold, each with its reason.
EXPECTED_FAILURES = {
    "check_sample_weight_equivalence_on_dense_data": (
        "an iterative solver stopped by tol: weights and repeated rows reach the same optimum within tol, "
        "not to the 1e-7 the check asks (test_weights_match_sklearns_weighted_optimum compares weights at tight tol)"
    ),
    "check_sample_weight_equivalence_on_sparse_data": "as on dense data",
    "check_class_weight_classifiers": (
        "snapml's default fit_intercept=False: the check's data needs an intercept (it passes with "
        "fit_intercept=True, checked below)"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("estimator", [LogisticRegression(), SupportVectorMachine(), LinearRegression()])
def test_check_estimator(estimator) -> None:  # type: ignore[no-untyped-def]
    expected = {
        k: v
        for k, v in EXPECTED_FAILURES.items()
        if k != "check_class_weight_classifiers" or not isinstance(estimator, LinearRegression)
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_estimator(estimator, expected_failed_checks=expected)
        if not isinstance(estimator, LinearRegression):
            from sklearn.utils.estimator_checks import check_class_weight_classifiers

            check_class_weight_classifiers(type(estimator).__name__, clone(estimator).set_params(fit_intercept=True))


def test_a_fit_and_predict_leave_the_programs_kernel_thread_count_as_it_was(sparse) -> None:  # type: ignore[no-untyped-def]
    """An estimator's n_jobs is its own: the numba threads of the rest of the program are not changed by it."""
    X, y = sparse
    before = numba.get_num_threads()
    model = LogisticRegression(dual=True, n_jobs=1, tol=1e-3).fit(X, y)
    model.predict_proba(X[:10])
    assert numba.get_num_threads() == before
