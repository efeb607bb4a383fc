"""The boosting machines' losses on margins, for the rounds forklift grows itself (SnapBoost's mix of trees and
ridge rounds): each loss's gradient and hessian per row and output, and its weighted mean for early stopping, as
XGBoost's metrics of the same name define it (logloss, mlogloss, rmse, poisson-nloglik, quantile)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, gammaln, log_softmax, softmax

HESSIAN_FLOOR = 1e-16  # a row whose hessian vanished still counts a little in a Newton step


class LossKind(enum.Enum):
    LOGISTIC = "logistic"  # two classes (labels 0/1) or cross-entropy on targets in [0, 1]
    SOFTMAX = "softmax"  # more classes (labels 0..k-1)
    SQUARED = "squared"
    POISSON = "poisson"
    QUANTILE = "quantile"


@dataclass(frozen=True)
class BoostingLoss:
    kind: LossKind
    alpha: float = 0.5  # the quantile's level
    max_delta_step: float = 0.0  # Poisson's hessian is exp(margin + max_delta_step), as XGBoost's

    def gradients(self, margin: np.ndarray, y: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First and second derivatives of each row's weighted loss at ``margin`` (rows x outputs), with the
        hessians XGBoost's objectives of the same name use (softmax's is twice p(1 - p))."""
        w = weight[:, None]
        if self.kind is LossKind.SOFTMAX:
            p = softmax(margin, axis=1)
            g = p - np.eye(margin.shape[1])[y.astype(int)]
            h = 2.0 * p * (1.0 - p)
        elif self.kind is LossKind.LOGISTIC:
            p = expit(margin)
            g, h = p - y[:, None], p * (1.0 - p)
        elif self.kind is LossKind.POISSON:
            mean = np.exp(margin)
            g, h = mean - y[:, None], np.exp(margin + self.max_delta_step)
        elif self.kind is LossKind.QUANTILE:
            g, h = np.where(margin >= y[:, None], 1.0 - self.alpha, -self.alpha), np.ones_like(margin)
        else:
            g, h = margin - y[:, None], np.ones_like(margin)
        return g * w, np.maximum(h, HESSIAN_FLOOR) * w

    def metric(self, margin: np.ndarray, y: np.ndarray, weight: np.ndarray) -> float:
        """The early-stopping metric: weighted mean log-loss, negative log-likelihood or pinball loss, or RMSE."""
        if self.kind is LossKind.SOFTMAX:
            losses = -log_softmax(margin, axis=1)[np.arange(len(y)), y.astype(int)]
        elif self.kind is LossKind.LOGISTIC:
            z = margin[:, 0]
            losses = np.logaddexp(0.0, z) - y * z
        elif self.kind is LossKind.POISSON:
            z = margin[:, 0]
            losses = np.exp(z) - y * z + gammaln(y + 1.0)
        elif self.kind is LossKind.QUANTILE:
            residual = y - margin[:, 0]
            losses = np.maximum(self.alpha * residual, (self.alpha - 1.0) * residual)
        else:
            return float(np.sqrt(np.average((margin[:, 0] - y) ** 2, weights=weight)))
        return float(np.average(losses, weights=weight))
