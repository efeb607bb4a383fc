"""What growing a category one-hot as one XGBoost categorical feature buys (forklift.ml.column_bundles): forklift's
decision tree and boosting fitted on the adult census's one-hot columns with the bundles and without them (as before
they existed), interleaved in one process, beside scikit-learn's tree, LightGBM and XGBoost.

``--copies K`` stacks the training rows K times (their number columns, standardised, jittered by 0.01) for a larger
one-hot table.

    .venv/bin/python bench/ml/one_hot_bundles.py [--repeats 15] [--copies 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from linear import adult_census


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import lightgbm
    import xgboost
    from sklearn import tree as sk_tree
    from sklearn.model_selection import train_test_split

    import forklift.ml as ours
    from forklift.ml import trees

    X, y = adult_census()
    X_train, _, y_train, _ = train_test_split(X.toarray(), y, test_size=0.2, random_state=0)
    X_train, y_train = np.vstack([X_train] * args.copies), np.concatenate([y_train] * args.copies)
    if args.copies > 1:  # copies of a row differ in their numbers
        numbers = [column for column in range(X_train.shape[1]) if not np.isin(X_train[:, column], (0, 1)).all()]
        X_train[:, numbers] += np.random.default_rng(0).normal(scale=0.01, size=(len(X_train), len(numbers)))
    print(f"adult census, {X_train.shape[0]} x {X_train.shape[1]}, {args.threads} threads", flush=True)

    bundled = trees._TreeModel.__dict__["_bundles"]
    columns_only = staticmethod(lambda X, **options: None)  # as before the bundles: every column a feature
    threads = args.threads
    tasks: dict[str, dict[str, Callable[[], Any]]] = {
        "tree depth 8": {
            "forklift": lambda: ours.DecisionTreeClassifier(max_depth=8, n_jobs=threads),
            "scikit-learn": lambda: sk_tree.DecisionTreeClassifier(max_depth=8),
        },
        "boosting 100 x depth 6": {
            "forklift": lambda: ours.BoostingMachineClassifier(
                num_round=100, max_depth=6, learning_rate=0.1, n_jobs=threads
            ),
            "LightGBM": lambda: lightgbm.LGBMClassifier(
                n_estimators=100, max_depth=6, num_leaves=64, learning_rate=0.1, n_jobs=threads, verbose=-1
            ),
            "XGBoost": lambda: xgboost.XGBClassifier(
                n_estimators=100, max_depth=6, learning_rate=0.1, n_jobs=threads, tree_method="hist"
            ),
        },
    }
    for task, engines in tasks.items():
        seconds: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for engine, make in engines.items():
                modes = (
                    [("one-hot columns", columns_only), ("bundled", bundled)] if engine == "forklift" else [("", None)]
                )
                for mode, bundles in modes:
                    if bundles is not None:
                        trees._TreeModel._bundles = bundles  # type: ignore[method-assign]
                    model = make()
                    start = time.perf_counter()
                    model.fit(X_train, y_train)
                    seconds.setdefault(f"{engine} {mode}".strip(), []).append(time.perf_counter() - start)
        trees._TreeModel._bundles = bundled  # type: ignore[method-assign]
        for name, times in seconds.items():
            p50, p90, p99 = np.percentile(times, [50, 90, 99])
            print(f"{task} | {name}: p50 {p50:.3f} / p90 {p90:.3f} / p99 {p99:.3f} s", flush=True)


if __name__ == "__main__":
    main()
