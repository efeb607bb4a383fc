"""What `forklift eval` writes for a person to open: eval.json, the confusion matrix and (detectors) the
precision-recall curves as PNG pictures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from forklift.evaluation.detection import DetectionMetrics
from forklift.evaluation.plots import Curve, plot_confusion, plot_curves
from forklift.evaluation.segmentation import BACKGROUND, SegmentationMetrics

if TYPE_CHECKING:
    from forklift.evaluation.evaluate import EvalResult


def write_report(result: EvalResult, out: Path) -> list[Path]:
    """eval.json, confusion.png and (for a detector) pr-curves.png in `out`; returns their paths.

    A segmentation confusion counts pixels: it is drawn with each row divided by its sum (the share of the true
    class's pixels predicted as each class), while eval.json keeps the counts."""
    out.mkdir(parents=True, exist_ok=True)
    metrics = result.metrics
    confusion = np.array(metrics.confusion)
    names = result.classes
    if isinstance(metrics, DetectionMetrics):
        names = [*result.classes, BACKGROUND]
    elif isinstance(metrics, SegmentationMetrics):
        names = [BACKGROUND, *result.classes]
        confusion = np.round(confusion / np.maximum(confusion.sum(axis=1, keepdims=True), 1), 2)
    written = [plot_confusion(confusion, names, out / "confusion.png")]
    if isinstance(metrics, DetectionMetrics):
        written.append(_plot_pr_curves(metrics, out / "pr-curves.png"))
    report = out / "eval.json"
    report.write_text(json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8")
    return [report, *written]


def _plot_pr_curves(metrics: DetectionMetrics, path: Path) -> Path:
    curves = [
        Curve(f"{name} (AP@.5 {metrics.ap50[name]:.3f})", metrics.pr_recall, curve)
        for name, curve in metrics.pr_curves.items()
        if curve is not None
    ]
    title = f"precision-recall at IoU 0.5 (mAP@.5 {metrics.map50 or 0:.3f})"
    return plot_curves(curves, path, x_label="recall", y_label="precision", title=title)
