"""Prediction throughput: predict_proba of forklift.ml, snapml and scikit-learn on the same fitted problem.

Each engine fits a logistic model (a few epochs: the weights do not change the cost of predicting) and then
scores the whole set ``REPEATS`` times; reported are p50/p90/p99 of the seconds per pass and the rate at which
the p50 pass reads the matrix as stored (GB/s), beside a single-thread numpy sum over the same bytes as the
memory's pace. snapml runs in its own interpreter (``--snapml-python``), on the same arrays.

    .venv/bin/python bench/ml/predict.py --snapml-python /path/to/snapml-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from snapml_data import load_lines, run_snapml, save_arrays

REPEATS = 30


def stored_bytes(X) -> int:  # type: ignore[no-untyped-def]
    return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes if sp.issparse(X) else X.nbytes


def percentiles(seconds: list[float]) -> list[float]:
    return [float(np.percentile(seconds, q)) for q in (50, 90, 99)]


def passes(predict, X) -> list[float]:  # type: ignore[no-untyped-def]
    predict(X)
    out = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        predict(X)
        out.append(time.perf_counter() - start)
    return out


def snapml_passes(python: str, data: Path, threads: int) -> list[float]:
    code = f"""
import json, time, warnings, numpy as np, scipy.sparse as sp, snapml
warnings.simplefilter("ignore")
{load_lines(data)}
m = snapml.LogisticRegression(max_iter=3, n_jobs={threads}).fit(X, y)
m.predict_proba(X)
out = []
for _ in range({REPEATS}):
    t = time.perf_counter(); m.predict_proba(X); out.append(time.perf_counter() - t)
print(json.dumps(out))
"""
    return list(run_snapml(python, code))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapml-python", help="an interpreter that can import snapml (optional)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from sklearn.linear_model import LogisticRegression as SkLogisticRegression

    from forklift.ml import LogisticRegression
    from forklift.ml.datasets import make_dense_classification, make_sparse_clicks

    dense, labels = make_dense_classification()
    sets = {
        "dense float64 200k x 100": (dense, labels),
        "dense float32 200k x 100": (dense.astype(np.float32), labels),
        "sparse float32 CSR 1M x 10k": make_sparse_clicks(),
    }
    report = {}
    for name, (X, y) in sets.items():
        size = stored_bytes(X)
        memory = percentiles(passes(lambda X: X.data.sum() if sp.issparse(X) else X.sum(), X))[0]
        rows = {
            "forklift": passes(LogisticRegression(max_iter=3, n_jobs=args.threads).fit(X, y).predict_proba, X),
            "scikit-learn": passes(SkLogisticRegression(max_iter=3).fit(X, y).predict_proba, X),
        }
        if args.snapml_python:
            with tempfile.TemporaryDirectory() as tmp:
                data = Path(tmp) / "data.npz"
                save_arrays(data, X, y)
                rows["snapml"] = snapml_passes(args.snapml_python, data, args.threads)
        print(f"\n{name}: {size / 1e6:.0f} MB stored; a one-thread numpy sum reads it in {memory * 1e3:.1f} ms")
        report[name] = {"bytes": size, "numpy sum": memory}
        for engine, seconds in rows.items():
            p50, p90, p99 = percentiles(seconds)
            report[name][engine] = [p50, p90, p99]
            print(
                f"  {engine:13s} p50 {p50 * 1e3:7.1f} ms  p90 {p90 * 1e3:7.1f}  p99 {p99 * 1e3:7.1f}"
                f"  {size / p50 / 1e9:5.2f} GB/s  ({p50 / rows_p50(rows, 'forklift'):.2f}x forklift's time)"
            )
    out = Path("bench/results/ml_predict.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


def rows_p50(rows: dict[str, list[float]], engine: str) -> float:
    return percentiles(rows[engine])[0]


if __name__ == "__main__":
    main()
