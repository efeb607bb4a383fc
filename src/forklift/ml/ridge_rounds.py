"""SnapBoost's other learner: a ridge regression on random Fourier features (an approximation of kernel ridge
regression with the RBF kernel ``exp(-gamma ||x - x'||^2)``), fitted to the boosting round's Newton step.

A round draws ``W ~ N(0, 2 gamma)`` and ``b ~ U(0, 2 pi)``, maps ``z = sqrt(2 / m) cos(X W + b)`` and solves, for
each output, ``min_beta sum_i h_i (z_i beta + g_i / h_i)^2 + regularizer ||beta||^2``: the second-order model of
the loss around the current margin, as a tree's leaf values are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from forklift.ml.tree_ensemble import FourierTerm


@dataclass(frozen=True)
class RidgeRound:
    weights: np.ndarray  # (n_features, m)
    offset: np.ndarray  # (m,)
    coef: np.ndarray  # (m, outputs): the ridge coefficients times the learning rate and sqrt(2 / m)
    intercept: np.ndarray  # (outputs,): times the learning rate

    def margin(self, X: np.ndarray) -> np.ndarray:
        return np.cos(X @ self.weights + self.offset) @ self.coef + self.intercept


def fit_ridge_round(
    X: np.ndarray,
    gradient: np.ndarray,
    hessian: np.ndarray,
    *,
    rng: np.random.Generator,
    gamma: float,
    n_components: int,
    regularizer: float,
    fit_intercept: bool,
    learning_rate: float,
) -> RidgeRound:
    """One round's map and its weighted ridge fit to the Newton step ``-gradient / hessian`` of each output."""
    weights = rng.normal(scale=np.sqrt(2.0 * gamma), size=(X.shape[1], n_components))
    offset = rng.uniform(0.0, 2.0 * np.pi, size=n_components)
    scale = np.sqrt(2.0 / n_components)
    Z = np.cos(X @ weights + offset) * scale
    if fit_intercept:
        Z = np.hstack([Z, np.ones((len(Z), 1))])
    penalty = regularizer * np.eye(Z.shape[1])
    if fit_intercept:
        penalty[-1, -1] = 0.0  # the intercept is not shrunk
    betas = np.column_stack([
        np.linalg.solve(Z.T @ (Z * hessian[:, [k]]) + penalty, -Z.T @ gradient[:, k]) for k in range(gradient.shape[1])
    ])  # fmt: skip
    intercept = betas[-1] if fit_intercept else np.zeros(gradient.shape[1])
    coef = betas[:n_components] * scale
    return RidgeRound(weights, offset, coef * learning_rate, intercept * learning_rate)


def fourier_term(rounds: Sequence[RidgeRound]) -> tuple[FourierTerm, np.ndarray]:
    """The rounds as one term of the ensemble (their features side by side) and their summed intercepts."""
    term = FourierTerm(
        weights=np.hstack([r.weights for r in rounds]).astype(np.float32),
        offset=np.concatenate([r.offset for r in rounds]).astype(np.float32),
        coef=np.vstack([r.coef for r in rounds]).astype(np.float32),
    )
    return term, np.sum([r.intercept for r in rounds], axis=0)
