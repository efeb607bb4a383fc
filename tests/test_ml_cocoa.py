"""Fits across processes: 2 ranks under torchrun, each reading its part of one libsvm file, end with the same
model, equal to the single-process one: by truncated Newton (the default on sparse rows), L-BFGS (on dense rows)
and CoCoA+ (``dual=True``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from forklift.ml import LogisticRegression, load_svmlight_file
from forklift.ml.datasets import make_sparse_clicks

WORKER = Path(__file__).with_name("ml_cocoa_worker.py")


def torchrun(*args: str, nproc: int = 2, ok: bool = True) -> str:
    """Run the worker on ``nproc`` ranks; what they printed (asserting they succeeded, or with ``ok=False`` failed)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    done = subprocess.run([*command, str(WORKER), *args], timeout=300, capture_output=True, text=True)
    assert (done.returncode == 0) is ok, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def clicks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    X, y = make_sparse_clicks(n_samples=6000, n_features=400, n_fields=8, random_state=5)
    path = tmp_path_factory.mktemp("cocoa") / "clicks.svm"
    dump_svmlight_file(X, y, str(path), zero_based=False)  # 1-based, as most libsvm files: the ranks must agree on it
    return path


@pytest.mark.slow
@pytest.mark.parametrize("dual", ["auto", "true", "dense"])  # Newton, CoCoA+, L-BFGS
def test_two_ranks_end_with_the_single_process_model(clicks: Path, tmp_path: Path, dual: str) -> None:
    X, y = load_svmlight_file(clicks)
    alone = LogisticRegression(tol=1e-9, max_iter=5000).fit(X, y)  # also compiles the kernels the ranks load
    torchrun(str(clicks), str(tmp_path), "logistic", "1", dual)
    rank0, rank1 = (np.load(tmp_path / f"coef-{r}.npy") for r in (0, 1))
    np.testing.assert_array_equal(rank0, rank1)  # one model, the same bits on every rank
    rows = [np.load(tmp_path / f"rows-{r}.npy") for r in (0, 1)]
    assert rows[0][0] + rows[1][0] == X.shape[0] and min(rows[0][0], rows[1][0]) > 0.4 * X.shape[0]
    assert rows[0][1] == rows[1][1] == X.shape[1] == 400
    np.testing.assert_allclose(rank0, np.ravel(alone.coef_), atol=2e-4 * np.abs(alone.coef_).max())


def test_a_rank_whose_share_holds_no_line_is_named_on_every_rank(tmp_path: Path) -> None:
    (tmp_path / "one.svm").write_text("1 1:2\n")  # rank 1's half of the bytes starts no line
    printed = torchrun(str(tmp_path / "one.svm"), str(tmp_path), "logistic", "1", ok=False)
    message = "one.svm: rank 1's share of the file holds no line (1 in all for 2 ranks): give each rank some rows"
    assert printed.count(message) >= 2  # both ranks refuse: neither waits for the other


@pytest.mark.parametrize(
    ("case", "messages"),
    [
        (  # each rank would fit its own model, or the collectives would not match
            "differ",
            ["LogisticRegression: the ranks were given different parameters: regularizer=1.0 on rank 0, 2.0 on rank 1"],
        ),
        (  # rank 1 refuses its rows; rank 0, past its own checks, would wait for it in the next all-reduce
            "nan-on-1",
            ["ValueError: LogisticRegression: X[2, 3] is nan", "rank 1 stopped the fit: LogisticRegression: X[2, 3]"],
        ),
    ],
)
def test_ranks_that_cannot_fit_one_model_all_stop_with_one_line(
    clicks: Path, tmp_path: Path, case: str, messages: list[str]
) -> None:
    printed = torchrun(str(clicks), str(tmp_path), "logistic", "1", case, ok=False)
    for message in messages:
        assert message in printed, printed[-3000:]
    assert "Timeout" not in printed and not list(tmp_path.glob("coef-*.npy"))
