"""Linear models: forklift.ml against snapml and scikit-learn, time to the same train objective.

Each engine fits the same data (objective: summed loss + regularizer/2 ||w||^2, no intercept; the loss is the
logistic one, the squared error halved for ridge, or the hinge for the SVM) with a ladder of stopping settings;
an engine's time is that of its fastest fit whose objective is within 1e-5 (relative) of the best objective any
fit reached. snapml is proprietary and never a dependency: it runs in a separate interpreter given by
``--snapml-python`` (a venv with ``pip install snapml``), on the same data file.

    .venv/bin/python bench/ml/linear.py --snapml-python /path/to/snapml-venv/bin/python --model logistic

``--gpu`` adds each engine's CUDA path (``use_gpu=True, device_ids=[0]``; forklift's takes the smooth losses
only), after one warm-up fit that pays for CUDA's start outside the timings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from snapml_data import load_lines, run_snapml, save_arrays

FORKLIFT_TOLS = [1e-3, 1e-4, 1e-5, 1e-6]
SECONDS_CAP = 120.0  # a ladder stops climbing once a fit takes longer than this
BOTH = {"primal": {"dual": False}, "dual": {"dual": True}}
AUTO = {"dual": "auto"}  # forklift's default (no such value in snapml): Newton on sparse data, the primal on dense


@dataclasses.dataclass(frozen=True)
class Model:
    """One kind of model as each engine names it, and its objective."""

    loss: Callable[[np.ndarray, np.ndarray], np.ndarray]  # per-sample loss of the margins z for the targets y
    forklift: str  # class in forklift.ml (and in snapml)
    options: dict[str, Any]  # extra constructor options for forklift and snapml
    formulations: dict[str, dict[str, bool]]  # engine suffix -> the options that choose it
    sklearn: dict[str, Callable[[float, float], Any]]  # name -> (regularizer, tol) -> estimator
    classification: bool
    max_iter: int | None = None  # forklift's epochs at most, as liblinear's (None: the default; snapml: 1000)


def _logistic(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, -np.where(y > 0, 1.0, -1.0) * z)


def _squared(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    return 0.5 * (z - y) ** 2


def _hinge(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.maximum(0.0, 1.0 - np.where(y > 0, 1.0, -1.0) * z)


def _sklearn_models() -> dict[str, Model]:
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.svm import LinearSVC

    def logistic(solver: str) -> Callable[[float, float], Any]:
        return lambda lam, tol: LogisticRegression(
            C=1 / lam, fit_intercept=False, solver=solver, tol=tol, max_iter=10_000
        )

    def ridge(solver: str) -> Callable[[float, float], Any]:
        return lambda lam, tol: Ridge(alpha=lam, fit_intercept=False, solver=solver, tol=tol, max_iter=10_000)

    return {
        "logistic": Model(
            _logistic, "LogisticRegression", {}, BOTH,
            {s: logistic(s) for s in ("newton-cholesky", "lbfgs", "liblinear")}, True,
        ),
        "ridge": Model(
            _squared, "LinearRegression", {}, BOTH,
            {s: ridge(s) for s in ("cholesky", "sparse_cg", "lsqr", "sag")}, False,
        ),
        "svm": Model(
            _hinge, "SupportVectorMachine", {"loss": "hinge"}, {"dual": {}},
            {"liblinear": lambda lam, tol: LinearSVC(C=1 / lam, loss="hinge", fit_intercept=False, tol=tol,
                                                     max_iter=100_000)},
            True, 100_000,
        ),
    }  # fmt: skip


def objective(model: Model, X: Any, y: np.ndarray, w: np.ndarray, lam: float) -> float:
    return float(model.loss(np.asarray(X @ w).ravel(), y).sum() + 0.5 * lam * w @ w)


def timed_fits(make, settings, X, y, score):  # type: ignore[no-untyped-def]
    """(setting, seconds, objective) per rung, climbing until a fit takes longer than the cap."""
    rows = []
    for setting in settings:
        estimator = make(setting)
        start = time.perf_counter()
        estimator.fit(X, y)
        seconds = time.perf_counter() - start
        rows.append((setting, seconds, score(np.ravel(estimator.coef_))))
        if seconds > SECONDS_CAP:
            break
    return rows


def snapml_fits(  # type: ignore[type-arg]
    python: str, data: Path, threads: int, lam: float, model: Model, formulations: dict[str, dict[str, Any]]
) -> dict[str, list]:
    """Each formulation's ladder in snapml; one that raises is reported as an empty ladder and its error."""
    code = f"""
import json, time, warnings, numpy as np, scipy.sparse as sp, snapml
warnings.simplefilter("ignore")
{load_lines(data)}
out, errors = {{}}, {{}}
for suffix, chosen in {formulations!r}.items():
    rows = []
    try:
        if chosen.get("use_gpu"):
            snapml.{model.forklift}(max_iter=1, **chosen, **{model.options!r}).fit(X[:1000], y[:1000])
        for tol in (1e-2, 1e-3, 1e-4, 1e-5):
            m = snapml.{model.forklift}(regularizer={lam}, n_jobs={threads}, tol=tol, max_iter=1000,
                                        **chosen, **{model.options!r})
            t = time.perf_counter(); m.fit(X, y); s = time.perf_counter() - t
            rows.append((tol, s, np.ravel(m.coef_).tolist()))
            if s > {SECONDS_CAP}:
                break
    except Exception as error:
        errors["snapml " + suffix] = f"{{type(error).__name__}}: {{error}}"
    out["snapml " + suffix] = rows
out["errors"] = errors
print(json.dumps(out))
"""
    return dict(run_snapml(python, code))


def regression_targets(X: Any, seed: int = 0) -> np.ndarray:
    """Real targets for ridge on the same matrix: a random linear function of the rows plus unit noise."""
    rng = np.random.default_rng(seed)
    return np.asarray(X @ rng.normal(size=X.shape[1])).ravel() + rng.normal(size=X.shape[0])


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
    parser.add_argument("--model", choices=["logistic", "ridge", "svm"], default="logistic")
    parser.add_argument("--sklearn", default="all", help="scikit-learn's solvers to run, comma-separated")
    parser.add_argument("--gpu", action="store_true", help="add forklift's and snapml's CUDA paths on device 0")
    parser.add_argument(
        "--formulations",
        default="primal,dual",
        help="forklift's and snapml's, comma-separated (auto: forklift's default)",
    )
    args = parser.parse_args()

    import forklift.ml
    from forklift.ml.datasets import make_dense_classification, make_sparse_clicks

    model = _sklearn_models()[args.model]
    estimator = getattr(forklift.ml, model.forklift)
    lam = 1.0
    limit = {"max_iter": model.max_iter} if model.max_iter else {}
    sets = {
        "dense 200k x 100": make_dense_classification,
        "sparse 1M x 10k (10 one-hot a row)": make_sparse_clicks,
        "adult census 32k x 108 (mglearn's file)": adult_census,
    }
    chosen = [name for name in sets if name.split()[0] in args.sets.split(",")]
    report: dict[str, dict[str, list]] = {}  # type: ignore[type-arg]
    for name in chosen:
        X, y = sets[name]()
        if not model.classification:
            y = regression_targets(X)

        def score(w: np.ndarray, X: Any = X, y: np.ndarray = y) -> float:
            return objective(model, X, y, w, lam)

        fits: dict[str, list] = {}  # type: ignore[type-arg]
        wanted = args.formulations.split(",")
        formulations = {k: v for k, v in model.formulations.items() if k in wanted}
        if "auto" in wanted and model.options.get("loss") != "hinge":
            formulations["auto"] = AUTO
        if args.gpu and model.options.get("loss") != "hinge":
            formulations["gpu"] = {"use_gpu": True, "device_ids": [0]}
        for chosen in formulations.values():  # compile (and start CUDA) outside the timings
            estimator(max_iter=1, **chosen, **model.options).fit(X[:1000], y[:1000])
        for suffix, chosen in formulations.items():
            fits[f"forklift {suffix}"] = timed_fits(
                lambda tol, chosen=chosen: estimator(
                    regularizer=lam, n_jobs=args.threads, tol=tol, random_state=0, **chosen, **model.options, **limit
                ),
                FORKLIFT_TOLS,
                X,
                y,
                score,
            )
        for solver, make in model.sklearn.items():
            if args.sklearn != "all" and solver not in args.sklearn.split(","):
                continue
            if solver in ("newton-cholesky", "cholesky") and sp.issparse(X):
                continue  # a 10k x 10k dense system
            sklearn_tols = [1e-4, 1e-6, 1e-8]
            fits[f"sklearn {solver}"] = timed_fits(lambda tol, make=make: make(lam, tol), sklearn_tols, X, y, score)
        if args.snapml_python:
            with tempfile.TemporaryDirectory() as tmp:
                data = Path(tmp) / "data.npz"
                save_arrays(data, X, y)
                snapml_formulations = {k: v for k, v in model.formulations.items() if k in wanted}
                if args.gpu:
                    snapml_formulations.update(
                        {f"gpu {k}": {**v, "use_gpu": True, "device_ids": [0]} for k, v in formulations.items()
                         if k != "gpu"}
                    )  # fmt: skip
                runs = snapml_fits(args.snapml_python, data, args.threads, lam, model, snapml_formulations)
                for engine, error in runs.pop("errors").items():
                    print(f"  {engine} failed: {error}")
                for engine, rows in runs.items():
                    fits[engine] = [(tol, s, score(np.array(w))) for tol, s, w in rows]
        best = min(o for rows in fits.values() for _, _, o in rows)
        report[name] = {}
        print(f"\n{args.model}, {name}: best objective {best:.8g}")
        for engine, rows in fits.items():
            reached = [(s, setting) for setting, s, o in rows if (o - best) / best <= 1e-5]
            seconds = min(reached)[0] if reached else float("nan")
            setting = min(reached)[1] if reached else None
            report[name][engine] = [seconds, setting, rows]
            print(
                f"  {engine:24s} {seconds:8.2f} s  (tol {setting})  fits: "
                + ", ".join(f"{st}:{s:.2f}s/{(o - best) / best:.1e}" for st, s, o in rows)
            )
    out = Path(f"bench/results/ml_{args.model}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
