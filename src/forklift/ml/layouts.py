"""Row access to a matrix inside the compiled kernels, for dense and compressed-sparse layouts alike.

A matrix reaches a kernel as a tuple: ``(X,)`` for a C-ordered 2-D array, ``(indptr, indices, data)`` for a
CSR one; its "rows" are what the kernel walks over. The primal solver walks over features, so it receives the
transpose (an F-ordered array is a C-ordered transpose, a CSC matrix a CSR one). Each helper is written once
per layout and chosen at compile time, so the solvers are written once.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba.core import types
from numba.extending import overload

from forklift.ml.prefetch import prefetch

Rows = tuple[np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]


def as_rows(X: np.ndarray | sp.csr_matrix) -> Rows:
    """The kernel tuple of a C-ordered array or a CSR matrix."""
    if isinstance(X, np.ndarray):
        return (X,)
    return (X.indptr, X.indices, X.data)


def _dense(rows: types.BaseTuple) -> bool:
    return len(rows) == 1


def row_dot(rows: Rows, i: int, v: np.ndarray) -> float:
    """Row ``i`` dotted with ``v`` (compiled: see the overload)."""
    raise NotImplementedError


def row_axpy(rows: Rows, i: int, a: float, v: np.ndarray) -> None:
    """``v += a * row i`` (compiled: see the overload)."""
    raise NotImplementedError


def row_sqnorm(rows: Rows, i: int) -> float:
    """The squared norm of row ``i`` (compiled: see the overload)."""
    raise NotImplementedError


def row_model_derivatives(
    rows: Rows, i: int, first: np.ndarray, second: np.ndarray, change: np.ndarray
) -> tuple[float, float]:
    """``(sum_k x_ik (first_k + second_k change_k), sum_k x_ik^2 second_k)`` over row ``i`` (see the overload)."""
    raise NotImplementedError


def row_prefetch(rows: Rows, i: int) -> None:
    """Hint that row ``i`` will be read soon (compiled: see the overload)."""
    raise NotImplementedError


def row_prefetch_offsets(rows: Rows, i: int) -> None:
    """Hint that where row ``i`` starts will be read soon (sparse rows; compiled: see the overload)."""
    raise NotImplementedError


def row_count(rows: Rows) -> int:
    """The number of rows (compiled: see the overload)."""
    raise NotImplementedError


@overload(row_dot, inline="always")
def _row_dot(rows, i, v):
    if _dense(rows):

        def dense(rows, i, v):
            x = rows[0][i]
            s = 0.0
            for k in range(x.shape[0]):
                s += x[k] * v[k]
            return s

        return dense

    def sparse(rows, i, v):
        indptr, indices, data = rows
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * v[indices[k]]
        return s

    return sparse


@overload(row_axpy, inline="always")
def _row_axpy(rows, i, a, v):
    if _dense(rows):

        def dense(rows, i, a, v):
            x = rows[0][i]
            for k in range(x.shape[0]):
                v[k] += a * x[k]

        return dense

    def sparse(rows, i, a, v):
        indptr, indices, data = rows
        for k in range(indptr[i], indptr[i + 1]):
            v[indices[k]] += a * data[k]

    return sparse


@overload(row_sqnorm, inline="always")
def _row_sqnorm(rows, i):
    if _dense(rows):

        def dense(rows, i):
            x = rows[0][i]
            s = 0.0
            for k in range(x.shape[0]):
                s += x[k] * x[k]
            return s

        return dense

    def sparse(rows, i):
        indptr, data = rows[0], rows[2]
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * data[k]
        return s

    return sparse


@overload(row_model_derivatives, inline="always")
def _row_model_derivatives(rows, i, first, second, change):
    if _dense(rows):

        def dense(rows, i, first, second, change):
            x = rows[0][i]
            g = 0.0
            h = 0.0
            for k in range(x.shape[0]):
                g += x[k] * (first[k] + second[k] * change[k])
                h += x[k] * x[k] * second[k]
            return g, h

        return dense

    def sparse(rows, i, first, second, change):
        indptr, indices, data = rows
        g = 0.0
        h = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            g += data[k] * (first[j] + second[j] * change[j])
            h += data[k] * data[k] * second[j]
        return g, h

    return sparse


@overload(row_prefetch, inline="always")
def _row_prefetch(rows, i):
    if _dense(rows):

        def dense(rows, i):
            prefetch(rows[0][i], 0)

        return dense

    def sparse(rows, i):
        start = rows[0][i]
        prefetch(rows[1], start)
        prefetch(rows[2], start)

    return sparse


@overload(row_prefetch_offsets, inline="always")
def _row_prefetch_offsets(rows, i):
    if _dense(rows):
        return lambda rows, i: None

    def sparse(rows, i):
        prefetch(rows[0], i)

    return sparse


@overload(row_count, inline="always")
def _row_count(rows):
    if _dense(rows):
        return lambda rows: rows[0].shape[0]
    return lambda rows: rows[0].shape[0] - 1
