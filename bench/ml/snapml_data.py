"""What a benchmark hands to snapml, which runs in its own interpreter: the arrays as one .npz file, the lines
that read it back there (as ``X`` and ``y``, CSR or dense as they were), and the run that brings its answer back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

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


def run_snapml(python: str, code: str) -> Any:
    """Run ``code`` in ``python`` (an interpreter that can import snapml); its last printed line, read as JSON."""
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])
