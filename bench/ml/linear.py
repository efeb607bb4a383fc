"""Logistic regression: forklift.ml against snapml and scikit-learn, time to the same train objective.

Each engine fits the same data (objective: summed logistic loss + regularizer/2 ||w||^2, no intercept) with a
ladder of stopping settings; an engine's time is that of its fastest fit whose objective is within 1e-5
(relative) of the best objective any fit reached. snapml is proprietary and never a dependency: it runs in a
separate interpreter given by ``--snapml-python`` (a venv with ``pip install snapml``), on the same data file.

    .venv/bin/python bench/ml/linear.py --snapml-python /path/to/snapml-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from snapml_data import load_lines, save_arrays

LADDERS = {
    "forklift primal": [("dual", False), 1e-3, 1e-4, 1e-5, 1e-6],
    "forklift dual": [("dual", True), 1e-3, 1e-4, 1e-5, 1e-6],
}
SECONDS_CAP = 120.0  # a ladder stops climbing once a fit takes longer than this


def objective(X, y, w, lam):  # type: ignore[no-untyped-def]
    signs = np.where(y > 0, 1.0, -1.0)
    return float(np.logaddexp(0, -signs * np.asarray(X @ w).ravel()).sum() + 0.5 * lam * w @ w)


def timed_fits(make, settings, X, y, lam):  # type: ignore[no-untyped-def]
    """(setting, seconds, objective) per rung, climbing until a fit takes longer than the cap."""
    rows = []
    for setting in settings:
        model = make(setting)
        start = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - start
        rows.append((setting, seconds, objective(X, y, np.ravel(model.coef_), lam)))
        if seconds > SECONDS_CAP:
            break
    return rows


def snapml_fits(python: str, data: Path, threads: int, lam: float) -> dict[str, list]:  # type: ignore[type-arg]
    code = f"""
import json, time, warnings, numpy as np, scipy.sparse as sp, snapml
warnings.simplefilter("ignore")
{load_lines(data)}
out = {{}}
for dual in (False, True):
    rows = []
    for tol in (1e-2, 1e-3, 1e-4, 1e-5):
        m = snapml.LogisticRegression(regularizer={lam}, dual=dual, n_jobs={threads}, tol=tol, max_iter=1000)
        t = time.perf_counter(); m.fit(X, y); s = time.perf_counter() - t
        rows.append((tol, s, np.ravel(m.coef_).tolist()))
        if s > {SECONDS_CAP}:
            break
    out["snapml " + ("dual" if dual else "primal")] = rows
print(json.dumps(out))
"""
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def adult_census() -> tuple[sp.csr_matrix, np.ndarray]:
    """The adult census table that ships inside the ``mglearn`` wheel (32,561 rows): categorical columns one-hot,
    numeric ones standardised; label: income above 50K. Read from the installed package's file, not imported."""
    import csv
    import importlib.util

    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    spec = importlib.util.find_spec("mglearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the adult set needs the mglearn wheel installed (pip install mglearn --no-deps)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "adult.data"
    with open(path, newline="") as stream:
        records = [[field.strip() for field in row] for row in csv.reader(stream) if len(row) == 15]
    table = np.array(records, dtype=object)
    numeric = [0, 2, 4, 10, 11, 12]
    categorical = [1, 3, 5, 6, 7, 8, 9, 13]
    encoder = ColumnTransformer([("numbers", StandardScaler(), numeric), ("categories", OneHotEncoder(), categorical)])
    X = sp.csr_matrix(encoder.fit_transform(table[:, :14]))
    return X, (table[:, 14] == ">50K").astype(int)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapml-python", help="an interpreter that can import snapml (optional)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sets", default="dense,sparse")
    args = parser.parse_args()

    from sklearn.linear_model import LogisticRegression as SkLogisticRegression

    from forklift.ml import LogisticRegression
    from forklift.ml.datasets import make_dense_classification, make_sparse_clicks

    lam = 1.0
    sets = {
        "dense 200k x 100": make_dense_classification,
        "sparse 1M x 10k (10 one-hot a row)": make_sparse_clicks,
        "adult census 32k x 108 (mglearn's file)": adult_census,
    }
    chosen = [name for name in sets if name.split()[0] in args.sets.split(",")]
    report: dict[str, dict[str, list]] = {}  # type: ignore[type-arg]
    for name in chosen:
        X, y = sets[name]()
        fits: dict[str, list] = {}  # type: ignore[type-arg]
        LogisticRegression(dual=True, max_iter=1).fit(X[:1000], y[:1000])  # compile outside the timings
        LogisticRegression(dual=False, max_iter=1).fit(X[:1000], y[:1000])
        for engine, ladder in LADDERS.items():
            (_, dual), *tols = ladder
            fits[engine] = timed_fits(
                lambda tol, dual=dual: LogisticRegression(
                    regularizer=lam, dual=dual, n_jobs=args.threads, tol=tol, random_state=0
                ),
                tols,
                X,
                y,
                lam,
            )
        solvers = ["newton-cholesky", "lbfgs", "liblinear"] if not sp.issparse(X) else ["lbfgs", "liblinear"]
        for solver in solvers:
            fits[f"sklearn {solver}"] = timed_fits(
                lambda tol, solver=solver: SkLogisticRegression(
                    C=1 / lam, fit_intercept=False, solver=solver, tol=tol, max_iter=10_000
                ),
                [1e-4, 1e-6, 1e-8],
                X,
                y,
                lam,
            )
        if args.snapml_python:
            with tempfile.TemporaryDirectory() as tmp:
                data = Path(tmp) / "data.npz"
                save_arrays(data, X, y)
                for engine, rows in snapml_fits(args.snapml_python, data, args.threads, lam).items():
                    fits[engine] = [(tol, s, objective(X, y, np.array(w), lam)) for tol, s, w in rows]
        best = min(o for rows in fits.values() for _, _, o in rows)
        report[name] = {}
        print(f"\n{name}: best objective {best:.8g}")
        for engine, rows in fits.items():
            reached = [(s, setting) for setting, s, o in rows if (o - best) / best <= 1e-5]
            seconds = min(reached)[0] if reached else float("nan")
            setting = min(reached)[1] if reached else None
            report[name][engine] = [seconds, setting, rows]
            print(
                f"  {engine:24s} {seconds:8.2f} s  (tol {setting})  fits: "
                + ", ".join(f"{st}:{s:.2f}s/{(o - best) / best:.1e}" for st, s, o in rows)
            )
    out = Path("bench/results/ml_linear.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
