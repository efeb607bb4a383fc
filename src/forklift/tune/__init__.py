"""Hyperparameter search over training runs (`forklift tune`) on Optuna: the search space (`space`), where the
study lives (`storage`), one trial (`trial`), the workers and their watcher (`search`) and the report.

This module imports nothing heavy: the command line offers its choices without loading Optuna.
"""

SAMPLERS = ("tpe", "random", "grid", "cmaes", "gp")
PRUNERS = ("median", "hyperband", "none")
