"""One rank of a distributed forklift.ml fit (run by torchrun or `forklift run`): it reads its part of a libsvm
file, fits, and saves the model it ends with as OUT/coef-RANK.npy.

    python -m torch.distributed.run --nproc-per-node 2 ml_cocoa_worker.py DATA.svm OUT MODEL THREADS [DUAL]

DUAL is ``auto`` (the default: truncated Newton for the smooth losses on sparse rows, L-BFGS on dense ones),
``true`` (CoCoA+ in the dual) or ``dense`` (``auto`` on the rows made dense); or, for the refusals, ``differ``
(each rank its own ``regularizer``) or ``nan-on-1`` (a NaN in rank 1's rows).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from forklift.ml import LinearRegression, LogisticRegression, SupportVectorMachine, load_svmlight_part

MODELS = {"logistic": LogisticRegression, "svm": SupportVectorMachine, "ridge": LinearRegression}


def main() -> None:
    data, out, model, threads = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    rank = os.environ["RANK"]  # a program that never touches torch.distributed: forklift starts and ends the group
    options: dict[str, object] = {"dual": True} if sys.argv[5:] == ["true"] else {}
    if sys.argv[5:] == ["differ"]:
        options["regularizer"] = 1.0 + int(rank)
    X, y = load_svmlight_part(data)
    if sys.argv[5:] in (["dense"], ["nan-on-1"]):
        X = X.toarray()
    if sys.argv[5:] == ["nan-on-1"] and rank == "1":
        X[2, 3] = np.nan
    fitted = MODELS[model](tol=1e-9, n_jobs=threads, max_iter=5000, **options).fit(X, y)
    np.save(out / f"coef-{rank}.npy", np.ravel(fitted.coef_))
    np.save(
        out / f"rows-{rank}.npy",
        np.array([X.shape[0], X.shape[1], fitted.n_iter_.max() if np.ndim(fitted.n_iter_) else 0]),
    )


if __name__ == "__main__":
    main()
