"""A tabular model's metrics on a table, from its graph's answers: for a classifier, the scores `forklift ml fit`
records (accuracy, log-loss, AUC), the confusion matrix and each drawn class's area under its ROC and
precision-recall curves; for a regressor, RMSE, MAE and R². scikit-learn computes each number."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.metrics import average_precision_score, confusion_matrix, roc_auc_score

from forklift.ml.metrics import ClassifierScores, classifier_scores


@dataclass(frozen=True)
class TableClassifierMetrics(ClassifierScores):
    confusion: list[list[int]]  # rows: true class; columns: predicted class (the highest score)
    class_auc: dict[str, float]  # area under each drawn class's ROC curve (see curve_classes)
    average_precision: dict[str, float]  # area under its precision-recall curve, as scikit-learn sums it


def curve_classes(truth: np.ndarray, classes: int) -> list[int]:
    """The classes whose curves are drawn against the rest: of two, the second (the positive class, whose score
    the AUC ranks); of more, each. A class needs rows of its own and rows of others to have a curve."""
    chosen = [1] if classes == 2 else range(classes)
    return [k for k in chosen if 0 < np.count_nonzero(truth == k) < len(truth)]


def classifier_metrics(
    truth: np.ndarray, scores: np.ndarray, *, classes: list[str], probabilities: bool
) -> TableClassifierMetrics:
    """``truth``: each row's class index; ``scores``: the graph's [rows, classes] (log-loss only where they are
    probabilities; AUC and the curves from any scores, since ranking is all they need)."""
    labels = list(range(len(classes)))
    predicted = scores.argmax(axis=1)
    overall = classifier_scores(truth, predicted, scores, labels=labels, probabilities=probabilities)
    drawn = curve_classes(truth, len(classes))
    return TableClassifierMetrics(
        accuracy=overall.accuracy,
        log_loss=overall.log_loss,
        auc=overall.auc,
        confusion=confusion_matrix(truth, predicted, labels=labels).tolist(),
        class_auc={classes[k]: float(roc_auc_score(truth == k, scores[:, k])) for k in drawn},
        average_precision={classes[k]: float(average_precision_score(truth == k, scores[:, k])) for k in drawn},
    )
