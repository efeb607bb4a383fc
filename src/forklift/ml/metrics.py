"""The one-number metrics of a tabular model, through scikit-learn's functions: what `forklift ml fit` records in
forklift.json and `forklift eval` measures on a table, computed by the same code so that the two agree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import (
    accuracy_score,
    log_loss,
    mean_absolute_error,
    r2_score,
    roc_auc_score,
    root_mean_squared_error,
)


@dataclass(frozen=True)
class ClassifierScores:
    accuracy: float
    log_loss: float | None  # None: the model gives no probabilities
    auc: float | None  # one-vs-rest macro for more than two classes; None: a class has no row


@dataclass(frozen=True)
class RegressorScores:
    rmse: float
    mae: float
    r2: float


def classifier_scores(
    truth: np.ndarray,
    predicted: np.ndarray,
    scores: np.ndarray,
    *,
    labels: Sequence[Any],
    probabilities: bool,
) -> ClassifierScores:
    """Accuracy; AUC from ``scores`` [rows, labels], any scores (a ranking is all it needs: an SVM's decision
    values too); log-loss where they are ``probabilities``."""
    accuracy = float(accuracy_score(truth, predicted))
    loss = None
    if probabilities:
        # float64 whatever the model answered in: log_loss clips at its dtype's eps, and a graph's float32 zeros
        # would otherwise count log(1.2e-7) where the estimator's own float64 zeros count log(2.2e-16); rows scaled
        # to sum to one, as float32 rows miss it by about 1e-7, which log_loss warns of
        rows = np.asarray(scores, dtype=np.float64)
        loss = float(log_loss(truth, rows / rows.sum(axis=1, keepdims=True), labels=list(labels)))
    auc = None
    if len(set(truth.tolist())) == len(labels):  # AUC needs every class present
        ranked = [1] if len(labels) == 2 else range(len(labels))  # one-vs-rest, macro: each class against the rest
        auc = float(np.mean([roc_auc_score(truth == labels[k], scores[:, k]) for k in ranked]))
    return ClassifierScores(accuracy, loss, auc)


def regressor_scores(truth: np.ndarray, predicted: np.ndarray) -> RegressorScores:
    return RegressorScores(
        rmse=float(root_mean_squared_error(truth, predicted)),
        mae=float(mean_absolute_error(truth, predicted)),
        r2=float(r2_score(truth, predicted)),
    )
