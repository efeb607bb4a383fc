"""Hyperparameter search over training runs (`forklift tune`) on Optuna: the search space (`space`), where the
study lives (`storage`), one trial (`trial`), the workers and their watcher (`search`) and the report.

This module imports nothing heavy: the command line offers its choices without loading Optuna.
"""

from forklift.vocabulary import Task

SAMPLERS = ("tpe", "random", "grid", "cmaes", "gp")
PRUNERS = ("median", "hyperband", "none")
METRICS: dict[Task, tuple[str, ...]] = {  # what a trial can maximise, the default first
    Task.DETECT: ("map50", "map"),
    Task.CLASSIFY: ("top1", "top5"),
    Task.SEGMENT: ("miou", "pixel_accuracy"),
}
