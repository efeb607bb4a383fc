"""Truncated Newton over row partitions: the GPU path, the threads of one process, and the ranks of a job.

Coordinate descent is sequential at heart; a Newton step is not. forklift takes Newton steps on the same
quadratic model the CPU's primal solver walks coordinate by coordinate: ``(X' diag(C loss'') X + I) d = -grad``
is solved by conjugate gradients (products with X and X' only), preconditioned by the system's diagonal
(``sum_i C_i loss''_i x_ij^2 + 1``: on one-hot click data it takes the conjugate-gradient steps from hundreds to
tens), then the step is line-searched on the true objective; the stopping test is the CPU primal's gradient
bound. Each partition holds some rows; the products with ``X'`` are added across partitions and then across the
ranks of a distributed job (one all-reduce of a vector of the features' length per product, as distributed
Newton methods for logistic regression do; a trial point's objective, gradient and diagonal travel in one), so every
rank takes the same steps and ends with the same model.

Partitions are devices (torch tensors: CUDA, or ``cpu`` in the tests) or the threads of one process (scipy and
numpy products, which release the GIL, one thread per partition).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeAlias, TypeVar

import numpy as np
import scipy.optimize
import scipy.sparse as sp
import torch
from threadpoolctl import threadpool_limits

from forklift.ml.losses import Loss
from forklift.ml.solver import Alone, Epoch, LinearProblem, Peers, Solution, SolverSettings

CG_STEPS = 50
CG_TOLERANCE = 0.1  # of the gradient's norm: an inexact Newton step is enough, the line search guards it
T = TypeVar("T")
Block: TypeAlias = np.ndarray | sp.csr_matrix  # rows in this process, as scipy or numpy holds them


def _loss_values(loss: Loss, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample loss at the margins ``z`` (as ``forklift.ml.losses``, vectorised)."""
    if loss is Loss.LOGISTIC:
        return torch.nn.functional.softplus(-y * z)
    if loss is Loss.SQUARED:
        return 0.5 * (z - y) ** 2
    return torch.clamp(1 - y * z, min=0) ** 2


def _loss_derivatives(loss: Loss, z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample first and second derivative of the loss in ``z``."""
    if loss is Loss.LOGISTIC:
        p = torch.sigmoid(z)
        return p - (y > 0).to(z.dtype), p * (1 - p)
    if loss is Loss.SQUARED:
        return z - y, torch.ones_like(z)
    slack = torch.clamp(1 - y * z, min=0)
    return -2 * y * slack, 2.0 * (slack > 0).to(z.dtype)


class _Partition(Protocol):
    """Some rows: products with them, their transpose and their squares' transpose, in float64 tensors."""

    y: torch.Tensor
    c: torch.Tensor
    device: torch.device

    def times(self, v: torch.Tensor) -> torch.Tensor: ...
    def transpose_times(self, u: torch.Tensor) -> torch.Tensor: ...
    def squares_transpose_times(self, u: torch.Tensor) -> torch.Tensor: ...


class _DevicePart:
    """Rows as torch tensors on a device: sparse CSR (and its transpose) or dense."""

    def __init__(self, X: np.ndarray | sp.spmatrix, targets: np.ndarray, bounds: np.ndarray, device: torch.device):
        if sp.issparse(X):
            csr = sp.csr_matrix(X, dtype=np.float64)
            self.X = _csr_tensor(csr, device)
            self.XT = _csr_tensor(csr.T.tocsr(), device)
            with warnings.catch_warnings():  # squared on the device, on the transpose's own indices
                warnings.simplefilter("ignore", UserWarning)
                self.squares_T = torch.sparse_csr_tensor(
                    self.XT.crow_indices(), self.XT.col_indices(), self.XT.values() ** 2, size=self.XT.shape
                )
        else:
            self.X = torch.as_tensor(np.asarray(X, dtype=np.float64), device=device)
            self.XT = self.X.T
            self.squares_T = (self.X * self.X).T
        self.y = torch.as_tensor(targets, dtype=torch.float64, device=device)
        self.c = torch.as_tensor(bounds, dtype=torch.float64, device=device)
        self.device = device

    def times(self, v: torch.Tensor) -> torch.Tensor:
        return self.X @ v

    def transpose_times(self, u: torch.Tensor) -> torch.Tensor:
        return self.XT @ u

    def squares_transpose_times(self, u: torch.Tensor) -> torch.Tensor:
        return self.squares_T @ u


class HostRows:
    """The rows in this process as float64 scipy or numpy blocks, one per thread (their squares made when first
    asked for): made once and shared by the one-vs-rest models of a multi-class fit."""

    def __init__(self, X: np.ndarray | sp.spmatrix, *, threads: int) -> None:
        X = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.ascontiguousarray(X, dtype=np.float64)
        self.threads = max(1, min(threads, X.shape[0]))
        # one block is the matrix itself: a slice would copy it
        self.bounds = [(0, X.shape[0])] if self.threads == 1 else _row_bounds(X.shape[0], self.threads)
        self.blocks: list[Block] = [X] if self.threads == 1 else [X[a:b] for a, b in self.bounds]
        self._squares: dict[int, Block] = {}

    def squares(self, index: int) -> Block:
        if index not in self._squares:
            block = self.blocks[index]
            if isinstance(block, np.ndarray):
                self._squares[index] = block**2
            else:  # one-hot rows are their own squares
                ones = bool(np.all(block.data == 1))
                self._squares[index] = block if ones else sp.csr_matrix(block.multiply(block))
        return self._squares[index]


class _HostPart:
    """One block of ``HostRows`` and its targets: products in scipy's and numpy's compiled loops, zero-copy to torch."""

    device = torch.device("cpu")

    def __init__(self, rows: HostRows, index: int, targets: np.ndarray, bounds: np.ndarray) -> None:
        self.rows = rows
        self.index = index
        self.X = rows.blocks[index]
        # writable (a table's target may be a read-only view): torch warns of sharing a read-only array
        self.y = torch.as_tensor(np.require(targets, np.float64, "W"))
        self.c = torch.as_tensor(np.require(bounds, np.float64, "W"))

    def times(self, v: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.X @ v.numpy()).ravel())

    def transpose_times(self, u: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.X.T @ u.numpy()).ravel())

    def squares_transpose_times(self, u: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.rows.squares(self.index).T @ u.numpy()).ravel())


def _csr_tensor(matrix: sp.csr_matrix, device: torch.device) -> torch.Tensor:
    with warnings.catch_warnings():  # torch calls its CSR tensors beta: they are what its sparse products take
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.as_tensor(matrix.indptr, dtype=torch.int64),
            torch.as_tensor(matrix.indices, dtype=torch.int64),
            torch.as_tensor(matrix.data),
            size=matrix.shape,
            device=device,
            check_invariants=False,  # scipy's CSR arrays are valid: checking each would cost a pass
        )


def _row_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, parts + 1).astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))


@dataclass(frozen=True)
class _Point:
    """The model at some weights: margins (per partition), objective, gradient and, for a Newton step, the loss's
    second derivatives (per partition) and the system's diagonal."""

    z: list[torch.Tensor]
    w: torch.Tensor
    value: float
    gradient: torch.Tensor
    second: list[torch.Tensor]
    diagonal: torch.Tensor | None


class _Model:
    """The problem over the partitions and ranks: margins, objective, gradient and Hessian products."""

    def __init__(self, problem: LinearProblem, parts: Sequence[_Partition], peers: Peers, threads: int) -> None:
        self.parts = parts
        self.loss = problem.loss
        self.bias = problem.bias
        self.home = parts[0].device
        self.width = problem.X.shape[1] + 1
        self.peers = peers
        self.pool = ThreadPoolExecutor(threads) if threads > 1 else None

    def map(self, function: Callable[..., T], *columns: Sequence[object]) -> list[T]:
        """``function`` over the partitions (and the matching items of ``columns``), on their threads if any."""
        rows = list(zip(self.parts, *columns, strict=True))
        if self.pool is None:
            return [function(*row) for row in rows]
        return list(self.pool.map(lambda row: function(*row), rows))

    def margins(self, w: torch.Tensor) -> list[torch.Tensor]:
        return self.map(lambda p: p.times(w[:-1].to(p.device)) + self.bias * w[-1].to(p.device))

    def _sum(self, local: torch.Tensor) -> torch.Tensor:
        """The sum over the ranks of a job (each rank's partitions already added)."""
        if self.peers.count == 1:
            return local
        return torch.from_numpy(self.peers.sum(local.cpu().numpy())).to(self.home)

    def _transpose(self, values: list[torch.Tensor], *, squares: bool = False) -> torch.Tensor:
        """``sum over this rank's partitions of [X_p' u_p, bias * sum(u_p)]`` (of the squares' if asked)."""

        def one(p: _Partition, u: torch.Tensor) -> torch.Tensor:
            return p.squares_transpose_times(u) if squares else p.transpose_times(u)

        out = torch.zeros(self.width, dtype=torch.float64, device=self.home)
        bias = self.bias**2 if squares else self.bias
        for u, product in zip(values, self.map(one, values), strict=True):
            out[:-1] += product.to(self.home)
            out[-1] += (bias * u.sum()).to(self.home)
        return out

    def transpose_sum(self, values: list[torch.Tensor]) -> torch.Tensor:
        """``sum over partitions and ranks of [X_p' u_p, bias * sum(u_p)]``."""
        return self._sum(self._transpose(values))

    def point(self, z: list[torch.Tensor], w: torch.Tensor, *, curvature: bool) -> _Point:
        """The objective and its gradient at ``w`` (margins ``z``), with ``curvature`` also the loss's second
        derivatives and the system's diagonal: one sum over the ranks for all of them (across processes each sum
        is an all-reduce, whose latency is most of its cost)."""

        def one(p: _Partition, zp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            first, second = _loss_derivatives(self.loss, zp, p.y)
            return p.c * first, p.c * second, (p.c @ _loss_values(self.loss, zp, p.y)).to(self.home)

        terms = self.map(one, z)
        second = [t[1] for t in terms]
        pieces = [self._transpose([t[0] for t in terms])]
        if curvature:
            pieces.append(self._transpose(second, squares=True))
        pieces.append(torch.stack([t[2] for t in terms]).sum().reshape(1))
        total = self._sum(torch.cat(pieces))
        n = self.width
        return _Point(
            z=z,
            w=w,
            value=float(total[-1]) + 0.5 * float(w @ w),
            gradient=total[:n] + w,
            second=second,
            diagonal=total[n : 2 * n] + 1.0 if curvature else None,
        )


def solve_on_devices(problem: LinearProblem, settings: SolverSettings, *, devices: Sequence[torch.device]) -> Solution:
    """Fit an l2-penalised smooth loss by truncated Newton on ``devices`` (one partition of the rows each)."""
    X = sp.csr_matrix(problem.X) if sp.issparse(problem.X) else problem.X
    parts = [
        _DevicePart(X[a:b], problem.targets[a:b], problem.bounds[a:b], device)
        for (a, b), device in zip(_row_bounds(X.shape[0], len(devices)), devices, strict=True)
    ]
    return _solve(problem, settings, _Model(problem, parts, Alone(), threads=1))


def solve_on_host(
    problem: LinearProblem,
    settings: SolverSettings,
    *,
    rows: HostRows | None = None,
    peers: Peers | None = None,
    quasi: bool = False,
) -> Solution:
    """Fit an l2-penalised smooth loss in this process by truncated Newton (or, with ``quasi``, L-BFGS), one block
    of ``rows`` (made from ``problem.X`` if not given) per thread, adding the products over ``peers`` when the rows
    are spread over several processes."""
    rows = rows or HostRows(problem.X, threads=settings.n_jobs)
    parts = [
        _HostPart(rows, index, problem.targets[a:b], problem.bounds[a:b]) for index, (a, b) in enumerate(rows.bounds)
    ]
    caller_threads = torch.get_num_threads()  # a fit's thread count is its own, not the rest of the program's
    torch.set_num_threads(rows.threads)
    model = _Model(problem, parts, peers or Alone(), threads=rows.threads)
    try:
        with threadpool_limits(limits=1, user_api="blas"):  # the threads are the blocks': BLAS's own would fight them
            return _solve_lbfgs(problem, settings, model) if quasi else _solve(problem, settings, model)
    finally:
        torch.set_num_threads(caller_threads)
        if model.pool is not None:  # one pool per fit: its threads end with it, not when it is collected
            model.pool.shutdown()


def _solve_lbfgs(problem: LinearProblem, settings: SolverSettings, model: _Model) -> Solution:
    """L-BFGS (scipy's) on the model's objective and gradient; the same stopping test as Newton's."""
    _check_smooth(problem)
    start = time.perf_counter()
    history: list[Epoch] = []
    last: dict[str, float | np.ndarray] = {}

    def objective_and_gradient(w: np.ndarray) -> tuple[float, np.ndarray]:
        weights = torch.from_numpy(w)
        here = model.point(model.margins(weights), weights, curvature=False)
        gradient = here.gradient.numpy()
        last.update(value=here.value, gradient=gradient)
        return here.value, gradient

    def after_iteration(intermediate_result: scipy.optimize.OptimizeResult) -> None:  # scipy passes it by this name
        value = float(intermediate_result.fun)
        history.append(Epoch(len(history) + 1, time.perf_counter() - start, value))
        if settings.verbose:
            print(f"l-bfgs iteration {len(history)}: objective {value:.9g}", flush=True)
        if _small(np.asarray(last["gradient"]), float(last["value"]), settings.tol):
            raise StopIteration

    result = scipy.optimize.minimize(
        objective_and_gradient, np.zeros(model.width), jac=True, method="L-BFGS-B", callback=after_iteration,
        options={"maxiter": settings.max_iter, "gtol": 0.0, "ftol": 0.0},
    )  # fmt: skip
    converged = _small(np.asarray(last["gradient"]), float(last["value"]), settings.tol)
    if not history:
        history.append(Epoch(0, time.perf_counter() - start, float(result.fun)))
    w = np.asarray(result.x)
    return Solution(w[:-1].copy(), float(w[-1] * problem.bias), int(result.nit), converged, float(result.fun), history)


def _small(gradient: np.ndarray, value: float, tol: float) -> bool:
    """``1/2 ||gradient||^2 <= tol * value``: the objective is 1-strongly convex, so this bounds ``f - f*`` by
    ``tol * f``."""
    return 0.5 * float(gradient @ gradient) <= tol * abs(value)


def _check_smooth(problem: LinearProblem) -> None:
    if problem.l1 or problem.loss is Loss.HINGE:
        raise ValueError("(quasi-)Newton takes smooth losses with an l2 penalty: not penalty='l1' or loss='hinge'")


def _solve(problem: LinearProblem, settings: SolverSettings, model: _Model) -> Solution:
    _check_smooth(problem)
    w = torch.zeros(model.width, dtype=torch.float64, device=model.home)
    here = model.point(model.margins(w), w, curvature=True)
    start = time.perf_counter()
    history: list[Epoch] = []
    converged = False
    number = 0
    for number in range(1, settings.max_iter + 1):
        if _small(here.gradient.cpu().numpy(), here.value, settings.tol):
            converged = True
            break

        def hessian_times(v: torch.Tensor, second: list[torch.Tensor] = here.second) -> torch.Tensor:
            return model.transpose_sum([s * xv for s, xv in zip(second, model.margins(v), strict=True)]) + v

        assert here.diagonal is not None  # a point with curvature
        direction = _conjugate_gradients(hessian_times, -here.gradient, here.diagonal)
        dz = model.margins(direction)
        step = 1.0
        for _ in range(40):  # the trial's gradient and curvature come in the same sum: the next step's, if it is taken
            trial_z = [zp + step * d for zp, d in zip(here.z, dz, strict=True)]
            trial = model.point(trial_z, here.w + step * direction, curvature=True)
            if trial.value <= here.value:
                here = trial
                break
            step *= 0.5
        history.append(Epoch(number, time.perf_counter() - start, here.value))
        if settings.verbose:
            print(f"newton step {number}: objective {here.value:.9g}", flush=True)
    out = here.w.cpu().numpy()
    if not history or history[-1].epoch != number:
        history.append(Epoch(number, time.perf_counter() - start, here.value))
    return Solution(out[:-1].copy(), float(out[-1] * problem.bias), number, converged, here.value, history)


def _conjugate_gradients(
    multiply: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, diagonal: torch.Tensor
) -> torch.Tensor:
    """An approximate solution of ``A x = b`` (``A`` positive definite, given by ``multiply``; Jacobi-preconditioned
    by ``diagonal``, ``A``'s diagonal)."""
    x = torch.zeros_like(b)
    r = b.clone()
    h = r / diagonal
    p = h.clone()
    rh = float(r @ h)
    goal = (CG_TOLERANCE**2) * float(r @ r)
    for _ in range(CG_STEPS):
        if float(r @ r) <= goal:
            break
        ap = multiply(p)
        alpha = rh / float(p @ ap)
        x += alpha * p
        r -= alpha * ap
        h = r / diagonal
        new_rh = float(r @ h)
        p = h + (new_rh / rh) * p
        rh = new_rh
    return x
