"""The arrays a benchmark hands to snapml, which runs in its own interpreter: one .npz file, and the lines that
read it back there (as ``X`` and ``y``, CSR or dense as they were)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp


def save_arrays(path: Path, X: np.ndarray | sp.csr_matrix, y: np.ndarray) -> None:
    if sp.issparse(X):
        np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr, shape=np.array(X.shape), y=y)
    else:
        np.savez(path, X=X, y=y)


def load_lines(path: Path) -> str:
    """Python source that defines ``X`` and ``y`` from ``path`` (numpy as ``np``, scipy.sparse as ``sp``)."""
    return f"""
f = np.load({str(path)!r})
X = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"])) if "indptr" in f else f["X"]
y = f["y"]
"""
