"""Hyperparameter search (`forklift tune`) on Optuna: the search space (`space`), where the study lives (`storage`),
one trial (`trial`) of a training run (`training`) or of a fit of a table (`tabular`), the workers and their watcher
(`search`) and the report.

This module imports nothing heavy: the command line offers its choices without loading Optuna.
"""

SAMPLERS = ("tpe", "random", "grid", "cmaes", "gp")
PRUNERS = ("median", "hyperband", "none")
# what a search of a forklift.ml model may measure on the validation table, as forklift.ml's model directory names
# it (log_loss and auc need probabilities); losses and errors are minimised, the others maximised
CLASSIFIER_METRICS = ("log_loss", "accuracy", "auc")
REGRESSOR_METRICS = ("rmse", "mae", "r2")
MINIMISED = ("log_loss", "rmse", "mae")
