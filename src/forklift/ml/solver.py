"""Fitting one linear model: data put in the layout each solver walks, epochs run until the tolerance is met.

The estimators (``forklift.ml.linear``) turn labels, weights and options into a :class:`LinearProblem`; this
module knows nothing of classes or scikit-learn. :class:`Peers` is the seam to other processes: CoCoA across
ranks adds the parts' changes with one all-reduce per epoch, a single process adds nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Protocol, TypeAlias

import numba
import numpy as np
import scipy.sparse as sp

from forklift.ml import kernels
from forklift.ml.anderson import Extrapolation
from forklift.ml.layouts import Rows, as_rows
from forklift.ml.losses import Loss

Matrix: TypeAlias = np.ndarray | sp.csr_matrix | sp.csc_matrix | sp.csr_array | sp.csc_array
# The dual's threads each take at least this many rows: on fewer, a thread's part is done in microseconds and the
# parts' scaling (sigma) only slows convergence (1,500 rows of a table: 80,663 epochs, 15.7 s, to tol on 2 threads;
# 49,978 epochs, 1.9 s, on one)
ROWS_PER_THREAD = 1_000


class Peers(Protocol):
    """Other processes fitting other rows of the same problem (CoCoA); one process alone is ``Alone``."""

    @property
    def count(self) -> int: ...

    def sum(self, values: np.ndarray) -> np.ndarray:
        """The element-wise sum of ``values`` over all processes, the same on each."""
        ...


class Alone:
    """The single-process case: nothing to add."""

    count = 1

    def sum(self, values: np.ndarray) -> np.ndarray:
        return values


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearProblem:
    """``min_w sum_i bounds_i * loss(x_i . w + bias * w_b, targets_i) + 1/2 ||(w, w_b)||^2`` (or ``||.||_1``).

    ``bounds`` are the sample weights divided by the regularizer; ``targets`` are ±1 for the classification
    losses and real values for the squared one; ``bias`` is the constant of the intercept's feature (0: none).
    """

    X: Matrix
    targets: np.ndarray
    bounds: np.ndarray
    loss: Loss
    l1: bool = False
    bias: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SolverSettings:
    """How to solve: which formulation, how long, how many threads, which seed."""

    dual: bool
    max_iter: int
    tol: float
    n_jobs: int = 1
    seed: int = 0
    verbose: bool = False
    record_every_epoch: bool = False


@dataclasses.dataclass(frozen=True)
class Epoch:
    """One recorded epoch: its number, the seconds since the start, and the primal objective (``nan``: not computed)."""

    epoch: int
    seconds: float
    objective: float


@dataclasses.dataclass(frozen=True)
class Solution:
    """The fitted weights and how the fit went (the objective in the problem's own scale)."""

    coef: np.ndarray
    intercept: float
    n_iter: int
    converged: bool
    objective: float
    history: list[Epoch]


class PreparedData:
    """The data once, in the layouts the solvers walk: rows for the dual, columns (the transpose) for the primal.

    Conversions are made on first use and kept, so the one-vs-rest models of a multi-class fit share them.
    """

    def __init__(self, X: Matrix) -> None:
        self.X = X
        self.n_rows, self.n_features = X.shape
        self._rows: Rows | None = None
        self._columns: Rows | None = None
        self._sqnorms: np.ndarray | None = None

    @property
    def rows(self) -> Rows:
        if self._rows is None:
            X = self.X
            self._rows = as_rows(sp.csr_matrix(X) if sp.issparse(X) else np.ascontiguousarray(X))
        return self._rows

    @property
    def columns(self) -> Rows:
        if self._columns is None:
            X = self.X
            self._columns = as_rows(sp.csc_matrix(X).T.tocsr() if sp.issparse(X) else np.asfortranarray(X).T)
        return self._columns

    @property
    def sqnorms(self) -> np.ndarray:
        if self._sqnorms is None:
            self._sqnorms = kernels.row_sqnorms(self.rows, self.n_rows)
        return self._sqnorms

    def margins(self, w: np.ndarray, bias: float) -> np.ndarray:
        """``X w + bias * w_b`` for the extended weights ``w``."""
        return np.asarray(self.X @ w[:-1], dtype=np.float64).ravel() + bias * w[-1]


def dual_weights(X: Matrix, scaled: np.ndarray, bias: float) -> np.ndarray:
    """``w`` of the dual variables: ``sum_i scaled_i x_i``, and the constant feature's weight last."""
    w = np.empty(X.shape[1] + 1)
    w[:-1] = np.asarray(X.T @ scaled).ravel()
    w[-1] = bias * scaled.sum()
    return w


def solve(
    problem: LinearProblem,
    settings: SolverSettings,
    *,
    data: PreparedData | None = None,
    peers: Peers | None = None,
) -> Solution:
    """Fit the problem by primal or dual coordinate descent; stop on ``tol`` or after ``max_iter`` epochs.

    Primal: stops when an epoch lowers the objective by less than ``tol`` of its value. Dual: when the dual
    objective changes by less than ``tol`` of its value and the duality gap (which bounds the distance to the
    optimum) is below ``tol`` of the primal objective.
    """
    data = data or PreparedData(problem.X)
    peers = peers or Alone()
    run = _DualRun(problem, settings, data, peers) if settings.dual else _PrimalRun(problem, settings, data, peers)
    with use_threads(settings.n_jobs):
        return run.solve()


@contextlib.contextmanager
def use_threads(n_jobs: int) -> Iterator[None]:
    """Run the compiled kernels on ``n_jobs`` threads (as many as numba has, at most), then on the caller's again:
    an estimator's ``n_jobs`` is its own, not the rest of the program's."""
    caller = numba.get_num_threads()
    numba.set_num_threads(max(1, min(n_jobs, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
    try:
        yield
    finally:
        numba.set_num_threads(caller)


class _Run:
    """The epoch loop both formulations share; subclasses make epochs and objectives."""

    def __init__(self, problem: LinearProblem, settings: SolverSettings, data: PreparedData, peers: Peers) -> None:
        self.problem = problem
        self.settings = settings
        self.data = data
        self.peers = peers
        self.parts = max(1, settings.n_jobs)
        # Parts (threads, ranks) see each other's changes only at the epoch's end, unscaled at first (sigma 1):
        # the primal line search keeps every epoch a descent, and the dual undoes an epoch that ascends and
        # switches to CoCoA+'s scaling by the number of parts (every rank decides alike: the objective is summed).
        self.sigma = 1.0
        self.w = np.zeros(data.n_features + 1)

    def epoch(self, number: int) -> None:
        raise NotImplementedError

    def primal_objective(self, z: np.ndarray, w: np.ndarray | None = None) -> float:
        """``sum_i C_i loss(z_i) + penalty(w)`` summed over all processes (``w``: the current weights)."""
        w = self.w if w is None else w
        penalty = np.abs(w).sum() if self.problem.l1 else 0.5 * float(w @ w)
        return (
            float(
                self.peers.sum(
                    np.array([kernels.loss_sum(self.problem.loss, z, self.problem.targets, self.problem.bounds)])
                )[0]
            )
            + penalty
        )

    def converged(self, number: int) -> tuple[bool, float]:
        """Whether to stop after this epoch, and the primal objective (``nan`` where it was not computed)."""
        raise NotImplementedError

    def solve(self) -> Solution:
        start = time.perf_counter()
        history: list[Epoch] = []
        converged = False
        objective = float("nan")
        number = 0
        for number in range(1, self.settings.max_iter + 1):
            self.epoch(number)
            converged, objective = self.converged(number)
            if self.settings.record_every_epoch or self.settings.verbose:
                if np.isnan(objective):
                    objective = self.primal_objective(self.data.margins(self.w, self.problem.bias))
                history.append(Epoch(number, time.perf_counter() - start, objective))
                if self.settings.verbose:
                    print(f"epoch {number}: objective {objective:.9g}", flush=True)
            if converged:
                break
        if np.isnan(objective):
            objective = self.primal_objective(self.data.margins(self.w, self.problem.bias))
        if not history or history[-1].epoch != number:
            history.append(Epoch(number, time.perf_counter() - start, objective))
        return Solution(
            self.w[:-1].copy(), float(self.w[-1] * self.problem.bias), number, converged, objective, history
        )


class _PrimalRun(_Run):
    def __init__(self, problem: LinearProblem, settings: SolverSettings, data: PreparedData, peers: Peers) -> None:
        super().__init__(problem, settings, data, peers)
        if peers.count > 1:
            raise ValueError("the primal solver splits features, not rows: fit across processes with dual=True")
        self.z = np.zeros(data.n_rows)
        self.replicas = np.empty((self.parts, data.n_rows))
        self.n_coordinates = data.n_features + (1 if problem.bias else 0)
        self.value = self.primal_objective(self.z)
        self.before = self.value
        self.extrapolation = Extrapolation()

    def epoch(self, number: int) -> None:
        """A pass over the quadratic model, then the longest step of 1, 1/2, 1/4, ... that lowers the objective."""
        p = self.problem
        first, second = kernels.loss_model(int(p.loss), self.z, p.targets, p.bounds)
        moved = self.w.copy()
        order = kernels.shuffled(self.n_coordinates, self.settings.seed)
        kernels.primal_epoch(self.data.columns, first, second, moved, self.replicas, order, self.sigma, p.bias, p.l1)
        dz = kernels.summed(self.replicas, self.sigma)
        dw = moved - self.w
        self.before = self.value
        step = 1.0
        for _ in range(40):
            z = self.z + step * dz
            w = self.w + step * dw
            value = self.primal_objective(z, w)
            if value <= self.value:
                self.z, self.w, self.value = z, w, value
                break
            step *= 0.5
        self.extrapolation.push(self.w, self.z)
        proposal = self.extrapolation.propose()
        if proposal is not None:
            w, z = proposal
            value = self.primal_objective(z, w)
            if value < self.value:
                self.w, self.z, self.value = w, z, value

    def converged(self, number: int) -> tuple[bool, float]:
        """Settled (the epoch lowered the objective by less than ``tol`` of it) and, for l2, certified.

        With the l2 penalty the objective is 1-strongly convex, so ``P(w) - P* <= ||grad P(w)||^2 / 2``: the fit
        stops only when that bound is below ``tol`` of the objective, not while an epoch crawls along collinear
        features making little progress far from the optimum.
        """
        if self.before - self.value > self.settings.tol * abs(self.value):
            return False, self.value
        if self.problem.l1:
            return True, self.value
        p = self.problem
        first, _ = kernels.loss_model(int(p.loss), self.z, p.targets, p.bounds)
        gradient = self.w.copy()
        gradient[:-1] += np.asarray(self.data.X.T @ first).ravel()
        gradient[-1] += p.bias * first.sum()
        return 0.5 * float(gradient @ gradient) <= self.settings.tol * abs(self.value), self.value


class _ActiveRows:
    """The rows a dual epoch visits: all, less those the hinge losses' shrinking set aside (LIBLINEAR's rule: a dual
    at its bound whose gradient pushes it further out, by more than any free row's did the epoch before, stays
    out), so that late epochs walk the few rows still moving; all of them again on :meth:`restore`."""

    def __init__(self, n_rows: int, n_parts: int, *, enabled: bool) -> None:
        self.n_rows = n_rows
        self.enabled = enabled
        self.rows = np.arange(n_rows)
        self.thresholds = np.array([np.inf, -np.inf])
        self.extremes = np.empty((n_parts, 2))
        self.shrunk = np.zeros(n_rows if enabled else 0, dtype=np.bool_)

    def order(self, seed: int) -> np.ndarray:
        """The active rows in a shuffled order (all rows: the same order as without shrinking)."""
        order = kernels.shuffled(self.rows.size, seed)
        return order if self.rows.size == self.n_rows else self.rows[order]

    def after_epoch(self) -> None:
        """Drop the rows the epoch shrank; the next thresholds are its largest and smallest projected gradients."""
        if not self.enabled:
            return
        out = self.shrunk[self.rows]
        if out.any():
            self.shrunk[self.rows[out]] = False
            self.rows = self.rows[~out]
        largest, smallest = self.extremes[:, 0].max(), self.extremes[:, 1].min()
        self.thresholds[:] = (largest if largest > 0 else np.inf, smallest if smallest < 0 else -np.inf)

    def restore(self) -> None:
        self.rows = np.arange(self.n_rows)
        self.thresholds[:] = (np.inf, -np.inf)


class _DualRun(_Run):
    def __init__(self, problem: LinearProblem, settings: SolverSettings, data: PreparedData, peers: Peers) -> None:
        super().__init__(problem, settings, data, peers)
        self.parts = min(self.parts, max(1, data.n_rows // ROWS_PER_THREAD))
        shrinking = problem.loss in (Loss.HINGE, Loss.SQUARED_HINGE)
        self.active = _ActiveRows(data.n_rows, self.parts, enabled=shrinking)
        self.next_gap = 0  # with shrinking: the first epoch that may measure the duality gap again
        self.signs = np.ones_like(problem.targets) if problem.loss is Loss.SQUARED else problem.targets
        if problem.loss is Loss.LOGISTIC:  # the logistic dual lives strictly inside (0, C)
            self.alpha = np.minimum(1e-3 * problem.bounds, 1e-8)
            self.w = peers.sum(self._weights_of(self.alpha))
        else:
            self.alpha = np.zeros(data.n_rows)
        self.replicas = np.empty((self.parts, data.n_features + 1))
        self.previous = self.dual_objective()

    def _weights_of(self, alpha: np.ndarray) -> np.ndarray:
        return dual_weights(self.data.X, alpha * self.signs, self.problem.bias)

    def dual_objective(self) -> float:
        p = self.problem
        data_part = float(self.peers.sum(np.array([kernels.dual_sum(int(p.loss), self.alpha, p.bounds, p.targets)]))[0])
        return 0.5 * float(self.w @ self.w) + data_part

    def epoch(self, number: int) -> None:
        p = self.problem
        order = self.active.order(self.settings.seed + number)
        optimistic = self.sigma < self.parts * self.peers.count
        if optimistic:
            alpha_before, w_before = self.alpha.copy(), self.w
        kernels.dual_epoch(
            self.data.rows,
            self.signs,
            p.targets,
            p.bounds,
            self.data.sqnorms,
            self.alpha,
            self.w,
            self.replicas,
            order,
            self.sigma,
            p.bias,
            int(p.loss),
            self.active.thresholds,
            self.active.extremes,
            self.active.shrunk,
        )
        self.active.after_epoch()
        change = kernels.merged(self.w, self.replicas, self.sigma) - self.w
        self.w = self.w + self.peers.sum(change)
        if optimistic and not self.dual_objective() <= self.previous:  # (a nan is an ascent too)
            # the threads' changes added up overshot (their rows share features): undo the epoch and scale from
            # now on, as CoCoA+ does, which makes every epoch a descent
            self.alpha, self.w = alpha_before, w_before
            self.sigma = float(self.parts * self.peers.count)
            self.active.restore()

    def converged(self, number: int) -> tuple[bool, float]:
        """Settled (the dual moved by less than ``tol`` of it) and the duality gap below ``tol`` of the primal.

        With shrinking, an epoch over the active rows costs far less than the gap's pass over all of them, and a
        settled active set may still leave out rows that must move: a gap that fails brings every row back and is
        measured again no sooner than a tenth of the epochs so far.
        """
        dual = self.dual_objective()
        settled = abs(self.previous - dual) <= self.settings.tol * abs(dual)
        self.previous = dual
        if not settled or (number < self.next_gap and self.active.rows.size):  # (nothing left to visit: measure)
            return False, float("nan")
        primal = self.primal_objective(self.data.margins(self.w, self.problem.bias))
        if primal + dual <= self.settings.tol * max(abs(primal), 1e-12):
            return True, primal
        if self.active.enabled:
            self.next_gap = number + max(1, number // 10)
            self.active.restore()
        return False, primal
