"""forklift.ml's truncated Newton, on a partition of the rows per device (torch tensors: two `cpu` devices here,
CUDA with `-m gpu`) and per thread of one process (scipy products), against scikit-learn's optimum."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.datasets import make_regression
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.linear_model import Ridge
from sklearn.svm import LinearSVC

from forklift.ml import LogisticRegression
from forklift.ml.datasets import make_dense_classification, make_sparse_clicks
from forklift.ml.losses import Loss
from forklift.ml.newton import solve_on_devices, solve_on_host
from forklift.ml.solver import LinearProblem, SolverSettings

CPUS = [torch.device("cpu"), torch.device("cpu")]  # two partitions, added up as on two GPUs
SETTINGS = SolverSettings(dual=False, max_iter=100, tol=1e-12)


@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_logistic_regression_on_two_partitions_reaches_sklearns_optimum(layout: str) -> None:
    if layout == "dense":
        X, y = make_dense_classification(n_samples=3000, n_features=20, random_state=1)
    else:
        X, y = make_sparse_clicks(n_samples=5000, n_features=300, n_fields=6, random_state=2)
    signs = np.where(y > 0, 1.0, -1.0)
    solution = solve_on_devices(
        LinearProblem(X=X, targets=signs, bounds=np.full(len(y), 0.5), loss=Loss.LOGISTIC, bias=1.0),
        SETTINGS,
        devices=CPUS,
    )
    reference = SkLogisticRegression(C=0.5, solver="liblinear", intercept_scaling=1.0, tol=1e-12, max_iter=10_000).fit(
        X, y
    )
    assert solution.converged
    np.testing.assert_allclose(solution.coef, reference.coef_.ravel(), atol=1e-5 * np.abs(reference.coef_).max())
    assert solution.intercept == pytest.approx(reference.intercept_[0], rel=1e-4)


def test_ridge_and_squared_hinge_on_two_partitions() -> None:
    X, y = make_regression(n_samples=1500, n_features=25, noise=5.0, random_state=3)
    ridge = solve_on_devices(
        LinearProblem(X=sp.csr_matrix(X), targets=y, bounds=np.full(len(y), 1 / 3.0), loss=Loss.SQUARED),
        SETTINGS,
        devices=CPUS,
    )
    reference = Ridge(alpha=3.0, fit_intercept=False, solver="cholesky").fit(X, y)
    np.testing.assert_allclose(ridge.coef, reference.coef_, atol=1e-7 * np.abs(reference.coef_).max())
    X, labels = make_dense_classification(n_samples=3000, n_features=20, random_state=4)
    signs = np.where(labels > 0, 1.0, -1.0)
    svm = solve_on_devices(
        LinearProblem(X=X, targets=signs, bounds=np.ones(len(signs)), loss=Loss.SQUARED_HINGE), SETTINGS, devices=CPUS
    )
    reference_svm = LinearSVC(C=1.0, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, labels)

    def objective(w: np.ndarray) -> float:
        return float((np.maximum(0, 1 - signs * (X @ w)) ** 2).sum() + 0.5 * w @ w)

    assert objective(svm.coef) == pytest.approx(objective(reference_svm.coef_.ravel()), rel=1e-7)


def test_hinge_and_l1_are_refused_on_devices() -> None:
    X, y = make_dense_classification(n_samples=100, n_features=5)
    for problem in (
        LinearProblem(X=X, targets=np.where(y > 0, 1.0, -1.0), bounds=np.ones(100), loss=Loss.HINGE),
        LinearProblem(X=X, targets=np.where(y > 0, 1.0, -1.0), bounds=np.ones(100), loss=Loss.LOGISTIC, l1=True),
    ):
        with pytest.raises(ValueError, match="smooth losses with an l2 penalty"):
            solve_on_devices(problem, SETTINGS, devices=CPUS)


@pytest.mark.gpu
def test_use_gpu_trains_on_cuda_to_the_cpu_optimum() -> None:
    X, y = make_sparse_clicks(n_samples=20_000, n_features=1000, random_state=5)
    on_gpu = LogisticRegression(use_gpu=True, device_ids=list(range(torch.cuda.device_count())), tol=1e-10).fit(X, y)
    on_cpu = LogisticRegression(tol=1e-10).fit(X, y)
    np.testing.assert_allclose(on_gpu.coef_, on_cpu.coef_, atol=1e-4 * np.abs(on_cpu.coef_).max())


@pytest.mark.parametrize("threads", [1, 3])
def test_newton_on_the_threads_of_one_process_reaches_sklearns_optimum_and_leaves_torchs_count(threads: int) -> None:
    X, y = make_sparse_clicks(n_samples=5000, n_features=300, n_fields=6, random_state=2)
    X = X.tocsr()
    X.data[::7] = 0.5  # not one-hot: the preconditioner's squares differ from X
    signs = np.where(y > 0, 1.0, -1.0)
    problem = LinearProblem(X=X, targets=signs, bounds=np.full(len(y), 0.5), loss=Loss.LOGISTIC, bias=1.0)
    before = torch.get_num_threads()
    torch.set_num_threads(threads + 1)  # a count the fit does not use
    try:
        solution = solve_on_host(problem, SolverSettings(dual=False, max_iter=100, tol=1e-12, n_jobs=threads))
        assert torch.get_num_threads() == threads + 1  # the fit's threads are its own: the program keeps its count
    finally:
        torch.set_num_threads(before)
    reference = SkLogisticRegression(C=0.5, solver="liblinear", intercept_scaling=1.0, tol=1e-12, max_iter=10_000).fit(
        X, y
    )
    assert solution.converged and solution.n_iter < 20  # Newton steps, not epochs
    np.testing.assert_allclose(solution.coef, reference.coef_.ravel(), atol=1e-5 * np.abs(reference.coef_).max())
    assert solution.intercept == pytest.approx(reference.intercept_[0], rel=1e-4)
