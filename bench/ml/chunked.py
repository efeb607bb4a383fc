"""Beyond memory: a streamed fit of a chunked set ten times its memory budget against in-memory training.

Generates Criteo-like clicks (``--fields`` one-hot features a row), keeps ``--test`` rows aside and writes the
rest as chunks; a fresh process (tests/ml_streaming_worker.py) fits them with a memory budget of a tenth of the
chunks' bytes on disk (``--ratio``; float32 values, as the solver reads them), sampling its resident memory every
5 ms. In memory, the dual solver (the one the streamed fit runs) and the default fit a subsample that fits
(``--subsample`` rows). Prints the data and budget sizes, the RSS the streamed fit added, each fit's test
log-loss, and the seconds per pass per million rows of the streamed and the in-memory dual solver.

    .venv/bin/python bench/ml/chunked.py                       # 5M rows x 40 fields: 1.6 GB of chunks
    .venv/bin/python bench/ml/chunked.py --rows 200000 --fields 10 --subsample 100000   # smoke test
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
from sklearn.metrics import log_loss

from forklift.ml import LogisticRegression
from forklift.ml.chunked import write_chunks
from forklift.ml.datasets import make_sparse_clicks

WORKER = Path(__file__).resolve().parents[2] / "tests" / "ml_streaming_worker.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--fields", type=int, default=40)
    parser.add_argument("--features", type=int, default=100_000)
    parser.add_argument("--test", type=int, default=200_000)
    parser.add_argument("--subsample", type=int, default=1_000_000)
    parser.add_argument("--ratio", type=float, default=10.0, help="bytes on disk over the budget")
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--max-passes", type=int, default=1000, help="the streamed fit's max_iter")
    parser.add_argument("--rows-per-chunk", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    X, y = make_sparse_clicks(n_samples=args.rows + args.test, n_features=args.features, n_fields=args.fields)
    X_test, y_test = X[args.rows :], y[args.rows :]
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        folder = Path(tmp) / "chunks"
        start = time.perf_counter()
        dataset = write_chunks((X[: args.rows], y[: args.rows]), folder, rows_per_chunk=args.rows_per_chunk)
        seconds = time.perf_counter() - start
        on_disk = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        print(f"wrote {dataset.n_rows:,} rows in {seconds:.0f} s: {on_disk / 2**20:,.0f} MiB on disk (float32 values), "
              f"{dataset.nbytes / 2**20:,.0f} MiB as float64")  # fmt: skip
        sub_X, sub_y = X[: args.subsample], y[: args.subsample]
        del X, y
        budget = int(on_disk / args.ratio)
        report_path = Path(tmp) / "streamed.json"
        command = [sys.executable, str(WORKER), str(folder), str(budget), str(report_path)]
        subprocess.run([*command, str(args.tol), str(args.max_passes), str(args.threads)], check=True)
        report = json.loads(report_path.read_text())
        streamed_w = np.load(report_path.with_suffix(".npy"))

    def test_loss(w: np.ndarray) -> float:
        return float(log_loss(y_test, 1 / (1 + np.exp(-(X_test @ w)))))

    in_memory = {}
    for name, options in {"dual": {"dual": True}, "default": {}}.items():
        model = LogisticRegression(tol=args.tol, n_jobs=args.threads, **options)
        model.fit(sub_X[:1000], sub_y[:1000])  # compile outside the timing
        start = time.perf_counter()
        model.fit(sub_X, sub_y)
        seconds = time.perf_counter() - start
        in_memory[name] = (seconds, int(model.n_iter_[0]), test_loss(np.ravel(model.coef_)))

    per_pass = report["seconds"] / report["epochs"] / (dataset.n_rows / 1e6)
    dual_seconds, dual_epochs, _ = in_memory["dual"]
    in_memory_per_pass = dual_seconds / dual_epochs / (args.subsample / 1e6)
    added = (report["peak"] - report["before"]) / 2**20
    print(f"budget {budget / 2**20:,.0f} MiB; the streamed fit added {added:,.0f} MiB of RSS "
          f"({report['before'] / 2**20:,.0f} MiB before it)")  # fmt: skip
    print(f"streamed, {dataset.n_rows:,} rows: {report['seconds']:.1f} s, {report['epochs']} passes, "
          f"{per_pass:.2f} s per pass per million rows, test log-loss {test_loss(streamed_w):.6f}")  # fmt: skip
    for name, (seconds, passes, loss) in in_memory.items():
        print(f"in memory ({name}), {args.subsample:,} rows: {seconds:.1f} s, {passes} passes or steps, "
              f"test log-loss {loss:.6f}")  # fmt: skip
    print(f"time per pass, in memory over streamed: {in_memory_per_pass / per_pass:.2f}")


if __name__ == "__main__":
    main()
