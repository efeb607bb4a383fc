"""The compiled epochs of primal and dual coordinate descent, parallel without locks.

Both split their coordinates into ``replicas.shape[0]`` parts, one per thread (or per rank in CoCoA). A part
works on its own replica of the shared vector (the margins ``z = Xw`` in the primal, ``w`` itself in the
dual) and sees its own changes scaled by ``sigma``; afterwards the changes are added up. With ``sigma`` at
least the number of parts that add up, each part minimises an upper bound of the whole objective (Jensen's
inequality on the convex shared term), so the sum never ascends: SySCD's thread-local replicas in the primal,
CoCoA+'s adding with ``sigma' = K`` in the dual. Nothing is shared for writing within an epoch.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from forklift.ml.layouts import (
    Rows,
    row_axpy,
    row_dot,
    row_model_derivatives,
    row_prefetch,
    row_prefetch_offsets,
    row_sqnorm,
)
from forklift.ml.losses import dual_step, dual_term, loss_derivatives, loss_value
from forklift.ml.prefetch import prefetch

AHEAD = 8  # rows between a prefetch of a row's data and its use (its offsets are fetched twice as early)


@njit(cache=True)
def row_sqnorms(rows: Rows, n_rows: int) -> np.ndarray:
    """Each row's squared norm (the curvature of its dual coordinate)."""
    out = np.empty(n_rows)
    for i in range(n_rows):
        out[i] = row_sqnorm(rows, i)
    return out


@njit(cache=True)
def _splitmix(state: np.uint64) -> tuple[np.uint64, np.uint64]:
    state += np.uint64(0x9E3779B97F4A7C15)
    r = state
    r = (r ^ (r >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    r = (r ^ (r >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return state, r ^ (r >> np.uint64(31))


@njit(cache=True)
def _shuffle(values: np.ndarray, lo: int, hi: int, state: np.uint64) -> np.uint64:
    for k in range(hi - 1, lo, -1):
        state, r = _splitmix(state)
        j = lo + int(r % np.uint64(k - lo + 1))
        values[k], values[j] = values[j], values[k]
    return state


@njit(cache=True)
def shuffled(n: int, seed: int) -> np.ndarray:
    """A permutation of ``0..n-1`` from a seed (Fisher-Yates on splitmix64): cheap and reproducible."""
    order = np.arange(n)
    _shuffle(order, 0, n, np.uint64(seed))
    return order


@njit(parallel=True, cache=True)
def dual_epoch(
    rows: Rows,
    signs: np.ndarray,
    targets: np.ndarray,
    bounds: np.ndarray,
    sqnorms: np.ndarray,
    alpha: np.ndarray,
    w: np.ndarray,
    replicas: np.ndarray,
    order: np.ndarray,
    sigma: float,
    bias: float,
    loss: int,
    thresholds: np.ndarray,
    extremes: np.ndarray,
    shrunk: np.ndarray,
) -> None:
    """One pass of dual coordinate descent over the rows in ``order``; leaves each part's ``w`` in ``replicas``.

    ``w[-1]`` is the weight of the constant feature ``bias`` (0 when there is none). ``signs`` is ``y`` for
    classification and 1 for regression, so ``w = sum_i alpha_i signs_i x_i``.

    Shrinking (the hinge losses, whose duals sit at their bounds for most rows): a row at 0 whose dual gradient is
    above ``thresholds[0]``, or at its upper bound with the gradient below ``thresholds[1]``, is left alone and
    marked in ``shrunk``; each part's largest and smallest projected gradient go to ``extremes[part]``, the next
    epoch's thresholds. Thresholds of +-inf shrink nothing (``shrunk`` is then never written).
    """
    n_parts = replicas.shape[0]
    n = order.shape[0]
    last = w.shape[0] - 1
    shrinks = loss == 2 or loss == 3
    upper, lower = thresholds[0], thresholds[1]
    for part in prange(n_parts):
        v = replicas[part]
        v[:] = w
        largest, smallest = -np.inf, np.inf
        hi = (part + 1) * n // n_parts
        for k in range(part * n // n_parts, hi):
            if k + 2 * AHEAD < hi:
                ahead = order[k + 2 * AHEAD]
                row_prefetch_offsets(rows, ahead)
                prefetch(alpha, ahead)
                prefetch(bounds, ahead)
                prefetch(targets, ahead)
                prefetch(sqnorms, ahead)
            if k + AHEAD < hi:
                row_prefetch(rows, order[k + AHEAD])
            i = order[k]
            c = bounds[i]
            if c <= 0.0:
                continue
            s = signs[i]
            margin = row_dot(rows, i, v) + bias * v[last]
            old = alpha[i]
            if shrinks:
                gradient = s * margin - 1.0 + (old / (2.0 * c) if loss == 3 else 0.0)
                at_top = loss == 2 and old == c
                if (old == 0.0 and gradient > upper) or (at_top and gradient < lower):
                    shrunk[i] = True
                    continue
                projected = min(gradient, 0.0) if old == 0.0 else max(gradient, 0.0) if at_top else gradient
                largest = max(largest, projected)
                smallest = min(smallest, projected)
            new = dual_step(loss, old, c, targets[i], s * margin, sigma * (sqnorms[i] + bias * bias))
            step = (new - old) * s
            if step != 0.0:
                alpha[i] = new
                row_axpy(rows, i, sigma * step, v)
                v[last] += sigma * step * bias
        extremes[part, 0] = largest
        extremes[part, 1] = smallest


def no_shrinking(n_parts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``dual_epoch``'s last three arguments for an epoch over every row: thresholds that shrink nothing."""
    return np.array([np.inf, -np.inf]), np.empty((n_parts, 2)), np.zeros(0, dtype=np.bool_)


@njit(parallel=True, cache=True)
def binary_probabilities(scores: np.ndarray) -> np.ndarray:
    """``[1 - sigmoid(s), sigmoid(s)]`` per score, over the threads (scipy's expit is one thread and a third of
    a sparse prediction's time)."""
    out = np.empty((scores.shape[0], 2))
    for i in prange(scores.shape[0]):
        e = math.exp(-abs(scores[i]))
        small = e / (1.0 + e)
        out[i, 0] = small if scores[i] >= 0.0 else 1.0 - small
        out[i, 1] = 1.0 - small if scores[i] >= 0.0 else small
    return out


@njit(cache=True)
def loss_model(loss: int, z: np.ndarray, targets: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each sample's weighted first and second loss derivative at ``z``: the quadratic model of an epoch."""
    first = np.empty(z.shape[0])
    second = np.empty(z.shape[0])
    for i in range(z.shape[0]):
        d1, d2 = loss_derivatives(loss, z[i], targets[i])
        first[i] = weights[i] * d1
        second[i] = weights[i] * d2
    return first, second


@njit(parallel=True, cache=True)
def primal_epoch(
    columns: Rows,
    first: np.ndarray,
    second: np.ndarray,
    w: np.ndarray,
    replicas: np.ndarray,
    order: np.ndarray,
    sigma: float,
    bias: float,
    l1: bool,
) -> None:
    """One pass of coordinate descent over the features in ``order`` on the loss's quadratic model at ``z``.

    The model (``first``, ``second``: :func:`loss_model`) stays fixed during the pass, so no sample's loss is
    evaluated per coordinate, only multiply-adds; the caller line-searches the whole step on the true loss
    (newGLMNET's scheme). ``columns`` is the transposed data (a row per feature); index ``w.shape[0] - 1`` in
    ``order`` is the constant feature ``bias``. Each part leaves ``sigma`` times its change of the margins in
    ``replicas`` and writes only its own coordinates of ``w``.
    """
    n_parts = replicas.shape[0]
    m = order.shape[0]
    last = w.shape[0] - 1
    n = first.shape[0]
    for part in prange(n_parts):
        v = replicas[part]
        v[:] = 0.0
        for k in range(part * m // n_parts, (part + 1) * m // n_parts):
            j = order[k]
            if j == last:
                g = 0.0
                h = 0.0
                for i in range(n):
                    g += bias * (first[i] + second[i] * v[i])
                    h += bias * bias * second[i]
            else:
                g, h = row_model_derivatives(columns, j, first, second, v)
            h *= sigma
            old = w[j]
            if l1:
                if h <= 0.0:
                    new = 0.0
                else:
                    u = old - g / h
                    new = np.sign(u) * max(abs(u) - 1.0 / h, 0.0)
            else:
                new = old - (g + old) / (h + 1.0)
            step = new - old
            if step != 0.0:
                w[j] = new
                if j == last:
                    for i in range(n):
                        v[i] += sigma * step * bias
                else:
                    row_axpy(columns, j, sigma * step, v)


@njit(cache=True)
def merged(base: np.ndarray, replicas: np.ndarray, sigma: float) -> np.ndarray:
    """``base`` plus every part's own change (its replica's change divided by ``sigma``)."""
    out = base.copy()
    for part in range(replicas.shape[0]):
        for k in range(base.shape[0]):
            out[k] += (replicas[part, k] - base[k]) / sigma
    return out


@njit(cache=True)
def summed(replicas: np.ndarray, sigma: float) -> np.ndarray:
    """The parts' own changes added up (each replica holds ``sigma`` times its part's change)."""
    out = np.zeros(replicas.shape[1])
    for part in range(replicas.shape[0]):
        for k in range(replicas.shape[1]):
            out[k] += replicas[part, k] / sigma
    return out


@njit(cache=True)
def loss_sum(loss: int, z: np.ndarray, targets: np.ndarray, weights: np.ndarray) -> float:
    """``sum_i C_i loss(z_i)``: the data part of the primal objective."""
    total = 0.0
    for i in range(z.shape[0]):
        if weights[i] > 0.0:
            total += weights[i] * loss_value(loss, z[i], targets[i])
    return total


@njit(cache=True)
def dual_sum(loss: int, alpha: np.ndarray, bounds: np.ndarray, targets: np.ndarray) -> float:
    """``sum_i phi_i(alpha_i)``: the data part of the dual objective."""
    total = 0.0
    for i in range(alpha.shape[0]):
        total += dual_term(loss, alpha[i], bounds[i], targets[i])
    return total


@njit(parallel=True, cache=True)
def row_gaps(
    rows: Rows,
    signs: np.ndarray,
    targets: np.ndarray,
    bounds: np.ndarray,
    alpha: np.ndarray,
    w: np.ndarray,
    bias: float,
    loss: int,
) -> tuple[float, float]:
    """``(sum_i gap_i, sum_i C_i loss(z_i))`` over these rows at ``w``.

    The duality gap splits by rows: ``P + D = sum_i [C_i loss(z_i) + phi_i(alpha_i) + alpha_i s_i z_i]`` when
    ``w = sum_i alpha_i s_i x_i``, each term >= 0; so a chunk's terms say how much it still has to give.
    """
    last = w.shape[0] - 1
    gap = 0.0
    data_loss = 0.0
    for i in prange(alpha.shape[0]):
        c = bounds[i]
        if c > 0.0:
            z = row_dot(rows, i, w) + bias * w[last]
            term = c * loss_value(loss, z, targets[i])
            data_loss += term
            gap += term + dual_term(loss, alpha[i], c, targets[i]) + alpha[i] * signs[i] * z
    return gap, data_loss
