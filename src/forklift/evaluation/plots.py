"""The pictures of an evaluation report, drawn the same way for every kind of model: a confusion matrix, curves
on the unit square (precision-recall, ROC) and predicted against true values. Each writes one PNG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

DPI = 110
TITLED_WIDTH = 5.0  # inches: room for a title naming the model above a confusion matrix of few classes


@dataclass(frozen=True)
class Curve:
    """One line of a curves picture: its legend entry and its points."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    steps: bool = False  # a step from each point to the next (precision-recall as average precision sums it)


def plot_confusion(confusion: np.ndarray, names: list[str], path: Path, *, title: str | None = None) -> Path:
    """Counts (or shares) of each true class, row by row, as each predicted class; a title widens a small one."""
    size = 2.0 + 0.6 * len(names)
    figure = Figure(figsize=(size if title is None else max(size, TITLED_WIDTH), size))
    axes = figure.subplots()
    axes.imshow(confusion, cmap="Blues")
    axes.set_xticks(range(len(names)), names, rotation=45, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    if title is not None:
        axes.set_title(title, fontsize=9)
    for (row, column), count in np.ndenumerate(confusion):
        dark = count > confusion.max() / 2
        axes.text(column, row, str(count), ha="center", va="center", fontsize=8, color="white" if dark else "black")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return path


def plot_curves(
    curves: Sequence[Curve], path: Path, *, x_label: str, y_label: str, title: str, chance: bool = False
) -> Path:
    """Curves whose axes run from 0 to 1; ``chance``: the diagonal a guess would trace (ROC)."""
    figure = Figure(figsize=(7, 5))
    axes = figure.subplots()
    if chance:
        axes.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="chance")
    for curve in curves:
        axes.plot(curve.x, curve.y, label=curve.label, drawstyle="steps-post" if curve.steps else "default")
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1.05)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if curves:
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return path


def plot_predicted(truth: np.ndarray, predicted: np.ndarray, path: Path, *, quantity: str, title: str) -> Path:
    """Each row's predicted value against its true one, with the line where they are equal."""
    figure = Figure(figsize=(6, 6))
    axes = figure.subplots()
    axes.scatter(truth, predicted, s=10, alpha=0.6, label=f"rows ({len(truth)})")
    low, high = float(min(truth.min(), predicted.min())), float(max(truth.max(), predicted.max()))
    axes.plot([low, high], [low, high], linestyle="--", color="grey", linewidth=1, label="predicted = true")
    axes.set_xlabel(f"true {quantity}")
    axes.set_ylabel(f"predicted {quantity}")
    axes.set_title(title, fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return path
