"""Trees and boosting: forklift.ml against snapml, scikit-learn, XGBoost and LightGBM, side by side in one run.

Each engine fits the same train split (80%) with the same threads, depth, trees and rounds; its time is the median
of ``--repeats`` fits, its quality is measured on the test split (accuracy for a tree, AUC for a forest, log-loss
for boosting). snapml is proprietary and never a dependency: it runs in a separate interpreter given by
``--snapml-python`` (a venv with ``pip install snapml``), on the same arrays.

    .venv/bin/python bench/ml/trees.py --snapml-python /path/to/snapml-venv/bin/python --sets dense,adult
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from linear import adult_census
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score
from snapml_data import load_lines, run_snapml, save_arrays

TREE_DEPTH, FOREST_TREES, FOREST_DEPTH, BOOST_ROUNDS, BOOST_DEPTH = 8, 50, 8, 100, 6


def quality(task: str, y: np.ndarray, probabilities: np.ndarray) -> float:
    if task == "tree":
        return float(accuracy_score(y, probabilities.argmax(axis=1)))
    if task == "forest":
        return float(roc_auc_score(y, probabilities[:, 1]))  # snapboost and boosting: log-loss
    return float(log_loss(y, probabilities))


def timed(make: Callable[[], Any], fit: Callable[[Any], Any], repeats: int) -> tuple[float, Any]:
    seconds, model = [], None
    for _ in range(repeats):
        model = make()
        start = time.perf_counter()
        fit(model)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), model


def python_engines(threads: int) -> dict[str, dict[str, Callable[[], Any]]]:
    """task -> engine -> a fresh model of that engine for the task."""
    import lightgbm
    import xgboost
    from sklearn import ensemble, tree

    import forklift.ml as ours

    return {
        "tree": {
            "forklift": lambda: ours.DecisionTreeClassifier(max_depth=TREE_DEPTH, n_jobs=threads),
            "sklearn": lambda: tree.DecisionTreeClassifier(max_depth=TREE_DEPTH),
        },
        "forest": {
            "forklift": lambda: ours.RandomForestClassifier(
                n_estimators=FOREST_TREES, max_depth=FOREST_DEPTH, n_jobs=threads, random_state=0
            ),
            "sklearn": lambda: ensemble.RandomForestClassifier(
                n_estimators=FOREST_TREES, max_depth=FOREST_DEPTH, n_jobs=threads, random_state=0
            ),
            "xgboost XGBRF": lambda: xgboost.XGBRFClassifier(
                n_estimators=FOREST_TREES, max_depth=FOREST_DEPTH, n_jobs=threads, tree_method="hist"
            ),
            "lightgbm rf": lambda: lightgbm.LGBMClassifier(
                boosting_type="rf",
                n_estimators=FOREST_TREES,
                max_depth=FOREST_DEPTH,
                num_leaves=2**FOREST_DEPTH,
                subsample=0.632,
                subsample_freq=1,
                colsample_bynode=0.1,
                n_jobs=threads,
                verbose=-1,
            ),
        },
        "boosting": {
            "forklift": lambda: ours.BoostingMachineClassifier(
                num_round=BOOST_ROUNDS, max_depth=BOOST_DEPTH, n_jobs=threads
            ),
            "sklearn HistGB": lambda: ensemble.HistGradientBoostingClassifier(
                max_iter=BOOST_ROUNDS, max_depth=BOOST_DEPTH, max_leaf_nodes=None, early_stopping=False
            ),
            "xgboost": lambda: xgboost.XGBClassifier(
                n_estimators=BOOST_ROUNDS,
                max_depth=BOOST_DEPTH,
                n_jobs=threads,
                tree_method="hist",
                reg_lambda=0.0,
                learning_rate=0.1,
            ),
            "lightgbm": lambda: lightgbm.LGBMClassifier(
                n_estimators=BOOST_ROUNDS,
                max_depth=BOOST_DEPTH,
                num_leaves=2**BOOST_DEPTH,
                n_jobs=threads,
                reg_lambda=0.0,
                learning_rate=0.1,
                verbose=-1,
            ),
        },
        "snapboost": {  # snapml's defaults (depths drawn in 1..5): plain trees against 20% ridge rounds
            "forklift trees": lambda: ours.BoostingMachineClassifier(num_round=BOOST_ROUNDS, n_jobs=threads),
            "forklift 20% ridge rounds": lambda: ours.BoostingMachineClassifier(
                num_round=BOOST_ROUNDS, n_jobs=threads, tree_select_probability=0.8
            ),
        },
    }


SNAPML_MODELS = {
    "snapboost": f"snapml.BoostingMachineClassifier(num_round={BOOST_ROUNDS}, n_jobs={{threads}}, "
    "tree_select_probability=0.8)",
    "tree": f"snapml.DecisionTreeClassifier(max_depth={TREE_DEPTH}, n_jobs={{threads}})",
    "forest": f"snapml.RandomForestClassifier(n_estimators={FOREST_TREES}, max_depth={FOREST_DEPTH}, "
    "n_jobs={threads}, use_histograms=True, random_state=0)",
    "boosting": f"snapml.BoostingMachineClassifier(num_round={BOOST_ROUNDS}, max_depth={BOOST_DEPTH}, "
    "n_jobs={threads})",
}


def snapml_runs(python: str, train: Path, test: Path, task: str, threads: int, repeats: int) -> tuple[float, Any]:
    """snapml's median fit time and its test predictions, from its own interpreter."""
    code = f"""
import json, time, statistics, numpy as np, scipy.sparse as sp, snapml
{load_lines(train)}
seconds = []
for _ in range({repeats}):
    model = {SNAPML_MODELS[task].format(threads=threads)}
    start = time.perf_counter(); model.fit(X.astype(np.float32), y); seconds.append(time.perf_counter() - start)
{load_lines(test)}
print(json.dumps([statistics.median(seconds), model.predict_proba(X.astype(np.float32)).tolist()]))
"""
    seconds, probabilities = run_snapml(python, code)
    return seconds, np.asarray(probabilities)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapml-python", help="an interpreter that can import snapml (optional)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sets", default="dense,adult")
    parser.add_argument("--tasks", default="tree,forest,boosting,snapboost")
    parser.add_argument("--engines", default="all", help="comma-separated engine names, or all")
    args = parser.parse_args()

    from sklearn.model_selection import train_test_split

    from forklift.ml.datasets import make_dense_classification

    sets: dict[str, Callable[[], tuple[Any, np.ndarray]]] = {
        "dense 200k x 100": make_dense_classification,
        "adult census 32k x 108 (mglearn's file)": lambda: (adult_census()[0].toarray(), adult_census()[1]),
    }
    engines = python_engines(args.threads)
    report: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for name in [n for n in sets if n.split()[0] in args.sets.split(",")]:
        X, y = sets[name]()
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)
        report[name] = {}
        with tempfile.TemporaryDirectory() as folder:
            train, test = Path(folder) / "train.npz", Path(folder) / "test.npz"
            save_arrays(train, X_train, y_train)
            save_arrays(test, X_test, y_test)
            for task in args.tasks.split(","):
                rows: dict[str, dict[str, float]] = {}
                for engine, make in engines[task].items():
                    if args.engines != "all" and engine not in args.engines.split(","):
                        continue
                    seconds, model = timed(make, lambda m, X=X_train, y=y_train: m.fit(X, y), args.repeats)
                    rows[engine] = {"seconds": seconds, "quality": quality(task, y_test, model.predict_proba(X_test))}
                if args.snapml_python and args.engines in ("all", "snapml"):
                    seconds, probabilities = snapml_runs(
                        args.snapml_python, train, test, task, args.threads, args.repeats
                    )
                    rows["snapml"] = {"seconds": seconds, "quality": quality(task, y_test, probabilities)}
                report[name][task] = rows
                measure = {"tree": "accuracy", "forest": "AUC"}.get(task, "log-loss")
                base = next(iter(rows.values()))["seconds"]  # forklift's (its first engine)
                for engine, row in rows.items():
                    print(
                        f"{name} | {task} | {engine}: {row['seconds']:.2f} s, {measure} {row['quality']:.4f} "
                        f"(forklift's time / this: {base / row['seconds']:.2f})",
                        flush=True,
                    )
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
