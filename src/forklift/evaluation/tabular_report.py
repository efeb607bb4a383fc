"""What `forklift eval` writes for a tabular model: eval.json and, for a classifier, the confusion matrix, ROC and
precision-recall curves (one class against the rest, or the positive class of two); for a regressor, the
predicted values against the true ones. Drawn by the same helpers as the image models' pictures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sklearn.metrics import precision_recall_curve, roc_curve

from forklift.evaluation.plots import Curve, plot_confusion, plot_curves, plot_predicted
from forklift.evaluation.tabular_metrics import TableClassifierMetrics
from forklift.runtime.tabular import RowsAnswer

if TYPE_CHECKING:
    from forklift.evaluation.tabular import TableEvalResult


def write_table_report(result: TableEvalResult, truth: np.ndarray, answer: RowsAnswer, out: Path) -> TableEvalResult:
    """The pictures and eval.json (which lists them) in ``out``; returns ``result`` with the files it wrote.
    ``truth``: each row's class index (classifiers) or value (regressors), as ``result`` was measured on."""
    out.mkdir(parents=True, exist_ok=True)
    about = f"{result.model} ({result.estimator}) on {Path(result.data).name}"
    metrics = result.metrics
    if isinstance(metrics, TableClassifierMetrics):
        assert answer.scores is not None  # a classifier's graph gives class scores
        confusion = plot_confusion(
            np.array(metrics.confusion), result.classes, out / "confusion.png", title=f"confusion matrix\n{about}"
        )
        pictures = [confusion, *_plot_class_curves(metrics, result.classes, truth, answer.scores, out, about)]
    else:
        title = f"{about}\nRMSE {metrics.rmse:#.4g}  MAE {metrics.mae:#.4g}  R² {metrics.r2:.4f}"
        predicted = np.asarray(answer.predictions, dtype=np.float64)
        scatter = plot_predicted(truth, predicted, out / "predicted-vs-true.png", quantity=result.target, title=title)
        pictures = [scatter]
    report = out / "eval.json"
    result = replace(result, files=[report, *pictures])
    report.write_text(json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8")
    return result


def _plot_class_curves(
    metrics: TableClassifierMetrics, classes: list[str], truth: np.ndarray, scores: np.ndarray, out: Path, about: str
) -> list[Path]:
    """roc-curves.png and pr-curves.png: a curve for each class the metrics drew (none: no pictures)."""
    if not metrics.class_auc:
        return []
    roc, pr = [], []
    for name in metrics.class_auc:
        k = classes.index(name)
        fpr, tpr, _ = roc_curve(truth == k, scores[:, k])
        precision, recall, _ = precision_recall_curve(truth == k, scores[:, k])
        roc.append(Curve(f"{name} (AUC {metrics.class_auc[name]:.3f})", fpr, tpr))
        pr.append(Curve(f"{name} (AP {metrics.average_precision[name]:.3f})", recall, precision, steps=True))
    which = f"class {classes[1]!r}" if len(classes) == 2 else "each class against the rest"
    return [
        plot_curves(roc, out / "roc-curves.png", x_label="false positive rate", y_label="true positive rate",
                    title=f"ROC, {which}\n{about}", chance=True),
        plot_curves(pr, out / "pr-curves.png", x_label="recall", y_label="precision",
                    title=f"precision-recall, {which}\n{about}"),
    ]  # fmt: skip
