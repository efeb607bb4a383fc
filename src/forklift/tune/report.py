"""What a search leaves for a person: OUT/trials.csv, a printed table of the best trials, and Optuna's plots as
PNG (optimisation history, parallel coordinates, parameter importance, intermediate values)."""

from __future__ import annotations

import csv
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from forklift.tune.trial import SAME_AS, TIMED_OUT, StepUnit

SHOWN = 10  # rows of the printed table
TARGET_NAMED = ("history.png", "parallel-coordinates.png", "importance.png")  # plots that take `target_name`
LEGEND_MAX = 12  # trials a plot names in its legend; past that the legend would cover the plot or leave the image
PLOTS: dict[str, str] = {  # file -> Optuna's matplotlib function
    "history.png": "plot_optimization_history",
    "parallel-coordinates.png": "plot_parallel_coordinate",
    "importance.png": "plot_param_importances",
    "intermediate.png": "plot_intermediate_values",
}


def describe_trial(trial: FrozenTrial, best: FrozenTrial | None, unit: StepUnit) -> str:
    """One line for a trial that ended: its state, value or reason, settings and time."""
    settings = " ".join(f"{k}={_short(v)}" for k, v in trial.params.items())
    seconds = trial.duration.total_seconds() if trial.duration is not None else 0.0
    if trial.state == TrialState.COMPLETE and trial.value is not None:
        lead = figure(trial.value)
        if best is not None and best.number == trial.number:
            lead += " (best so far)"
        if SAME_AS in trial.user_attrs:
            lead += f" (trial {trial.user_attrs[SAME_AS]}'s settings: not run again)"
    elif trial.state == TrialState.PRUNED:
        lead = trial.user_attrs.get(TIMED_OUT, f"pruned after {unit} {trial.last_step}")
    else:
        lead = f"failed: {trial.user_attrs.get('error', 'stopped or crashed; its log says more')}"
    return f"trial {trial.number:>3} {lead}  {settings}  {seconds:.{1 if seconds < 10 else 0}f} s"


def figure(value: float) -> str:
    """A trial's metric as its lines and table show it: 4 decimals, or 4 figures below 0.1 (0.007282 and 0.007336
    both read 0.0073, each 'best so far')."""
    return f"{value:.4g}" if 0 < abs(value) < 0.1 else f"{value:.4f}"


def write_report(study: optuna.Study, out: Path, metric: str, unit: StepUnit) -> list[Path]:
    """trials.csv, the printed table and the plots; the paths written."""
    trials = study.get_trials(deepcopy=False)
    names = sorted({name for trial in trials for name in trial.params})
    ran = f"{unit}s"  # the steps each trial ran, where trials record them (a training run's epochs)
    steps = [ran] if any(ran in t.user_attrs for t in trials) else []
    header = ["trial", "state", metric, *names, *steps, "seconds", "host"]
    rows = [
        [
            t.number,
            t.state.name.lower(),
            "" if t.value is None else f"{t.value:.6g}",
            *[_short(t.params[n]) if n in t.params else "" for n in names],
            *(t.user_attrs.get(name, "") for name in steps),
            f"{t.duration.total_seconds():.1f}" if t.duration is not None else "",
            t.user_attrs.get("host", ""),
        ]
        for t in trials
    ]
    table = out / "trials.csv"
    with table.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    _print_table(header, rows, metric, study.direction)
    return [table, *_plots(study, out, metric, unit)]


def _print_table(header: list[str], rows: list[list[Any]], metric: str, direction: StudyDirection) -> None:
    complete = [r for r in rows if r[1] == "complete"]
    states = {state: sum(1 for r in rows if r[1] == state) for state in ("complete", "pruned", "fail", "running")}
    print(", ".join(f"{n} {state}" for state, n in states.items() if n), flush=True)
    if not complete:
        return
    best = sorted(complete, key=lambda r: float(r[2]), reverse=direction == StudyDirection.MAXIMIZE)[:SHOWN]
    shown = [[*r[:2], figure(float(r[2])), *r[3:]] for r in best]  # as the trials' lines say it
    widths = [max(len(str(h)), *(len(str(r[i])) for r in shown)) for i, h in enumerate(header)]
    print(f"best trials by {metric}:")
    for row in [header, *shown]:
        print("  ".join(str(cell).rjust(width) for cell, width in zip(row, widths, strict=True)))


def _plots(study: optuna.Study, out: Path, metric: str, unit: StepUnit) -> list[Path]:
    """Optuna's plots as PNG, their axes naming the metric and the step; a plot that needs more trials than there
    are, or has nothing to show (intermediate values of trials that report none), is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    written: list[Path] = []
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return written  # every plot would be empty
    reported = any(t.intermediate_values for t in study.get_trials(deepcopy=False))
    for name, function in PLOTS.items():
        if name == "intermediate.png" and not reported:
            continue
        draw: Callable[..., Any] = getattr(plots, function)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
            try:
                axes = draw(study, **({"target_name": f"{metric} on val"} if name in TARGET_NAMED else {}))
            except (ValueError, RuntimeError, ZeroDivisionError):  # too few trials or parameters to draw it
                plt.close("all")
                continue
        if name == "intermediate.png":
            axes.set_xlabel(unit)
            axes.set_ylabel(f"{metric} on val after the {unit}")
        figure = axes.figure if hasattr(axes, "figure") else axes.ravel()[0].figure  # one Axes, or an array
        legend = getattr(axes, "get_legend", lambda: None)()
        if legend is not None and len(legend.get_texts()) > LEGEND_MAX:  # one entry a trial (intermediate values)
            legend.remove()
        figure.set_size_inches(9, 5.5)
        figure.tight_layout()
        path = out / name
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


def _short(value: Any) -> str:
    """Four significant digits; a whole float keeps its point, as max_features=1.0 (all) is not 1 (one)."""
    if not isinstance(value, float):
        return str(value)
    text = f"{value:.4g}"
    return text if any(mark in text for mark in ".eni") else f"{text}.0"
