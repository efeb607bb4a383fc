"""Number columns centred and scaled for a linear model's fit, then folded back into its coefficients.

A table's numbers come in their own units (ages in tens, incomes in tens of thousands); coordinate descent on such
columns needs many more epochs (the SVM's dual stops at ``max_iter`` far from its optimum) and the penalty weighs
the columns by their units. Fitting on standardised columns and folding the scaling into ``coef_`` and
``intercept_`` afterwards gives a model that reads the numbers as given: the ONNX graph, the pickle and the server
need nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ColumnScaling:
    """The centre and scale of some columns of a matrix (the rest are left as they are)."""

    columns: np.ndarray  # indices of the scaled columns
    center: np.ndarray  # zeros where the fit has no intercept to take the centring back
    scale: np.ndarray  # 1 where a column is constant

    @classmethod
    def of(cls, X: np.ndarray, columns: np.ndarray, *, center: bool) -> ColumnScaling:
        """The columns' mean (when ``center``) and standard deviation over the rows of ``X``."""
        picked = np.asarray(X[:, columns], dtype=np.float64)
        spread = picked.std(axis=0) if len(picked) else np.ones(len(columns))
        means = picked.mean(axis=0) if center and len(picked) else np.zeros(len(columns))
        return cls(columns=columns, center=means, scale=np.where(spread > 0, spread, 1.0))

    def apply(self, X: np.ndarray) -> np.ndarray:
        """A copy of ``X`` with the columns centred and scaled."""
        scaled = X.copy()
        scaled[:, self.columns] = (X[:, self.columns] - self.center) / self.scale
        return scaled

    def fold(self, estimator: Any) -> None:
        """Rewrite a linear model fitted on :meth:`apply`'d rows so that it reads the rows as they were:
        ``w_j / s_j`` for a scaled column, and the intercept less ``sum_j w_j m_j / s_j``."""
        coef = np.array(estimator.coef_, dtype=np.float64)
        coef[..., self.columns] /= self.scale
        shift = coef[..., self.columns] @ self.center
        estimator.intercept_ = (
            float(estimator.intercept_ - shift)
            if np.ndim(estimator.intercept_) == 0
            else np.asarray(estimator.intercept_ - shift, dtype=np.float64)
        )
        estimator.coef_ = coef
