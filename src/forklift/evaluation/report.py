"""What `forklift eval` writes for a person to open: eval.json, the confusion matrix and (detectors) the
precision-recall curves as PNG pictures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from forklift.evaluation.detection import DetectionMetrics
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
    written = [_plot_confusion(confusion, names, out / "confusion.png")]
    if isinstance(metrics, DetectionMetrics):
        written.append(_plot_pr_curves(metrics, out / "pr-curves.png"))
    report = out / "eval.json"
    report.write_text(json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8")
    return [report, *written]


def _plot_confusion(confusion: np.ndarray, names: list[str], path: Path) -> Path:
    size = 2.0 + 0.6 * len(names)
    figure = Figure(figsize=(size, size))
    axes = figure.subplots()
    axes.imshow(confusion, cmap="Blues")
    axes.set_xticks(range(len(names)), names, rotation=45, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    for (row, column), count in np.ndenumerate(confusion):
        dark = count > confusion.max() / 2
        axes.text(column, row, str(count), ha="center", va="center", fontsize=8, color="white" if dark else "black")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path


def _plot_pr_curves(metrics: DetectionMetrics, path: Path) -> Path:
    figure = Figure(figsize=(7, 5))
    axes = figure.subplots()
    for name, curve in metrics.pr_curves.items():
        if curve is not None:
            axes.plot(metrics.pr_recall, curve, label=f"{name} (AP@.5 {metrics.ap50[name]:.3f})")
    axes.set_xlabel("recall")
    axes.set_ylabel("precision")
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1.05)
    axes.set_title(f"precision-recall at IoU 0.5 (mAP@.5 {metrics.map50 or 0:.3f})")
    axes.grid(True, alpha=0.3)
    if any(curve is not None for curve in metrics.pr_curves.values()):
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path
