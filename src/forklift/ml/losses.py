"""The losses the linear models minimise, as compiled scalar functions both solvers share.

Every problem is solved in the scale liblinear uses, ``sum_i C_i * loss(z_i, y_i) + 1/2 ||w||^2`` with
``C_i = weight_i / regularizer``: its minimiser is that of snapml's ``sum_i weight_i * loss + regularizer/2
||w||^2``, and the per-coordinate steps need no division by the regularizer.
"""

from __future__ import annotations

import enum
import math

from numba import njit


class Loss(enum.IntEnum):
    """Which loss a problem uses (an int inside the compiled kernels)."""

    LOGISTIC = 0
    SQUARED = 1  # 1/2 (z - y)^2: ridge and lasso
    HINGE = 2
    SQUARED_HINGE = 3

    @property
    def smooth(self) -> bool:
        """Whether the primal solver can take Newton steps on it (hinge has no second derivative)."""
        return self is not Loss.HINGE


@njit(cache=True, inline="always")
def loss_value(loss: int, z: float, y: float) -> float:
    """The loss of margin ``z`` (the linear function's value) for label ``y`` (±1, or the target)."""
    if loss == 0:
        m = -y * z
        return m + math.log1p(math.exp(-m)) if m > 0.0 else math.log1p(math.exp(m))
    if loss == 1:
        return 0.5 * (z - y) * (z - y)
    slack = 1.0 - y * z
    if slack <= 0.0:
        return 0.0
    return slack if loss == 2 else slack * slack


@njit(cache=True, inline="always")
def loss_derivatives(loss: int, z: float, y: float) -> tuple[float, float]:
    """First and second derivative of the loss in ``z`` (hinge's second is 0: only the dual solver takes it)."""
    if loss == 0:
        e = math.exp(-abs(z))
        p = 1.0 / (1.0 + e) if z >= 0.0 else e / (1.0 + e)  # sigmoid(z) without overflow
        target = 1.0 if y > 0.0 else 0.0
        return p - target, p * (1.0 - p)
    if loss == 1:
        return z - y, 1.0
    slack = 1.0 - y * z
    if slack <= 0.0:
        return 0.0, 0.0
    if loss == 2:
        return -y, 0.0
    return -2.0 * y * slack, 2.0


@njit(cache=True, inline="always")
def dual_term(loss: int, a: float, c: float, y: float) -> float:
    """phi_i(a): the i-th term of the dual objective that is minimised (its optimum is minus the primal's)."""
    if loss == 0:
        if c <= 0.0:
            return 0.0
        r = c - a
        return (a * math.log(a) if a > 0.0 else 0.0) + (r * math.log(r) if r > 0.0 else 0.0) - c * math.log(c)
    if loss == 1:
        return a * a / (2.0 * c) - a * y if c > 0.0 else 0.0
    if loss == 2:
        return -a
    return -a + a * a / (4.0 * c) if c > 0.0 else 0.0


@njit(cache=True, inline="always")
def dual_step(loss: int, a: float, c: float, y: float, gradient: float, curvature: float) -> float:
    """The new value of one dual variable given the gradient and curvature of the shared quadratic part.

    ``gradient`` is ``y_i x_i . w`` for classification (``x_i . w`` for regression) and ``curvature`` is
    ``sigma * ||x_i||^2``; closed form for the squared losses and hinge, a safeguarded Newton iteration for the
    logistic one (its solution lies strictly inside ``(0, C)``).
    """
    if c <= 0.0:
        return 0.0
    if loss == 1:
        return a - (gradient + a / c - y) / (curvature + 1.0 / c)
    if loss == 2:
        if curvature <= 0.0:
            return c if gradient < 1.0 else 0.0
        return min(max(a - (gradient - 1.0) / curvature, 0.0), c)
    if loss == 3:
        return max(a - (gradient - 1.0 + a / (2.0 * c)) / (curvature + 1.0 / (2.0 * c)), 0.0)
    t = a
    for _ in range(50):
        r = c - t
        d1 = curvature * (t - a) + gradient + math.log(t / r)
        if abs(d1) < 1e-12:
            break
        d2 = curvature + c / (t * r)
        nxt = t - d1 / d2
        if nxt <= 0.0:
            nxt = 0.1 * t
        elif nxt >= c:
            nxt = c - 0.1 * r
        if nxt == t or nxt <= 0.0 or nxt >= c:  # as close to a bound as floating point goes
            break
        t = nxt
    return t
