"""The GPU path: truncated Newton on PyTorch tensors, one row partition per device.

Coordinate descent is sequential at heart and a GPU is not, so on devices forklift takes Newton steps on the
same quadratic model the CPU's primal solver walks coordinate by coordinate: the Newton system
``(X' diag(C loss'') X + I) d = -grad`` is solved by conjugate gradients (products with X and X' only), then
the step is line-searched on the true objective and the stopping test is the CPU primal's gradient bound. Each
device holds its partition of the rows; the products with ``X'`` are added across devices (on the first), the
way the ranks' changes are added in the multi-process case. The code is the same on ``cpu`` devices, which is
how the tests run it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp
import torch

from forklift.ml.losses import Loss
from forklift.ml.solver import Epoch, LinearProblem, Solution, SolverSettings

CG_STEPS = 50
CG_TOLERANCE = 0.1  # of the gradient's norm: an inexact Newton step is enough, the line search guards it


def _loss_terms(loss: Loss, z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample loss, first and second derivative in ``z`` (as ``forklift.ml.losses``, vectorised)."""
    if loss is Loss.LOGISTIC:
        margin = y * z
        p = torch.sigmoid(z)
        return torch.nn.functional.softplus(-margin), p - (y > 0).to(z.dtype), p * (1 - p)
    if loss is Loss.SQUARED:
        r = z - y
        return 0.5 * r * r, r, torch.ones_like(z)
    slack = torch.clamp(1 - y * z, min=0)
    return slack * slack, -2 * y * slack, 2.0 * (slack > 0).to(z.dtype)


class _Partition:
    """One device's rows: X and its transpose (sparse CSR or dense), targets and bounds."""

    def __init__(
        self, X: np.ndarray | sp.spmatrix, targets: np.ndarray, bounds: np.ndarray, device: torch.device
    ) -> None:
        if sp.issparse(X):
            csr = sp.csr_matrix(X, dtype=np.float64)
            csr_t = csr.T.tocsr()
            self.X = _csr_tensor(csr, device)
            self.XT = _csr_tensor(csr_t, device)
        else:
            self.X = torch.as_tensor(np.asarray(X, dtype=np.float64), device=device)
            self.XT = self.X.T
        self.y = torch.as_tensor(targets, dtype=torch.float64, device=device)
        self.c = torch.as_tensor(bounds, dtype=torch.float64, device=device)
        self.device = device


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


class _Model:
    """The problem over the partitions: margins, objective, gradient and Hessian products."""

    def __init__(self, problem: LinearProblem, devices: Sequence[torch.device]) -> None:
        n = problem.X.shape[0]
        bounds = np.linspace(0, n, len(devices) + 1).astype(int)
        X = sp.csr_matrix(problem.X) if sp.issparse(problem.X) else problem.X
        self.parts = [
            _Partition(X[a:b], problem.targets[a:b], problem.bounds[a:b], device)
            for a, b, device in zip(bounds[:-1], bounds[1:], devices, strict=True)
        ]
        self.loss = problem.loss
        self.bias = problem.bias
        self.home = devices[0]

    def margins(self, w: torch.Tensor) -> list[torch.Tensor]:
        return [p.X @ w[:-1].to(p.device) + self.bias * w[-1].to(p.device) for p in self.parts]

    def transpose_sum(self, values: list[torch.Tensor]) -> torch.Tensor:
        """``sum over partitions of [X_p' u_p, bias * sum(u_p)]`` on the first device."""
        out = torch.zeros(self.parts[0].X.shape[1] + 1, dtype=torch.float64, device=self.home)
        for p, u in zip(self.parts, values, strict=True):
            out[:-1] += (p.XT @ u).to(self.home)
            out[-1] += (self.bias * u.sum()).to(self.home)
        return out

    def objective(self, z: list[torch.Tensor], w: torch.Tensor) -> float:
        total = sum(
            float((p.c * _loss_terms(self.loss, zp, p.y)[0]).sum()) for p, zp in zip(self.parts, z, strict=True)
        )
        return total + 0.5 * float(w @ w)


def solve_on_devices(problem: LinearProblem, settings: SolverSettings, *, devices: Sequence[torch.device]) -> Solution:
    """Fit an l2-penalised smooth loss by truncated Newton on ``devices`` (one partition of the rows each)."""
    if problem.l1 or problem.loss is Loss.HINGE:
        raise ValueError("the GPU path takes smooth losses with an l2 penalty: not penalty='l1' or loss='hinge'")
    model = _Model(problem, devices)
    w = torch.zeros(problem.X.shape[1] + 1, dtype=torch.float64, device=model.home)
    z = model.margins(w)
    value = model.objective(z, w)
    start = time.perf_counter()
    history: list[Epoch] = []
    converged = False
    number = 0
    for number in range(1, settings.max_iter + 1):
        terms = [_loss_terms(model.loss, zp, p.y) for p, zp in zip(model.parts, z, strict=True)]
        first = [p.c * t[1] for p, t in zip(model.parts, terms, strict=True)]
        second = [p.c * t[2] for p, t in zip(model.parts, terms, strict=True)]
        gradient = model.transpose_sum(first) + w
        if 0.5 * float(gradient @ gradient) <= settings.tol * abs(value):
            converged = True
            break

        def hessian_times(v: torch.Tensor, second: list[torch.Tensor] = second) -> torch.Tensor:
            return model.transpose_sum([s * xv for s, xv in zip(second, model.margins(v), strict=True)]) + v

        direction = _conjugate_gradients(hessian_times, -gradient)
        dz = model.margins(direction)
        step = 1.0
        for _ in range(40):
            trial_z = [zp + step * d for zp, d in zip(z, dz, strict=True)]
            trial_w = w + step * direction
            trial = model.objective(trial_z, trial_w)
            if trial <= value:
                z, w, value = trial_z, trial_w, trial
                break
            step *= 0.5
        history.append(Epoch(number, time.perf_counter() - start, value))
        if settings.verbose:
            print(f"newton step {number}: objective {value:.9g}", flush=True)
    out = w.cpu().numpy()
    if not history or history[-1].epoch != number:
        history.append(Epoch(number, time.perf_counter() - start, value))
    return Solution(out[:-1].copy(), float(out[-1] * problem.bias), number, converged, value, history)


def _conjugate_gradients(multiply: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor) -> torch.Tensor:
    """An approximate solution of ``A x = b`` (``A`` positive definite, given by ``multiply``)."""
    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rr = float(r @ r)
    goal = (CG_TOLERANCE**2) * rr
    for _ in range(CG_STEPS):
        if rr <= goal:
            break
        ap = multiply(p)
        alpha = rr / float(p @ ap)
        x += alpha * p
        r -= alpha * ap
        new_rr = float(r @ r)
        p = r + (new_rr / rr) * p
        rr = new_rr
    return x
