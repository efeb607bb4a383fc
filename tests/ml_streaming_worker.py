"""Fit a chunked data set under a memory budget and report the peak RSS the fit added (used by test_ml_chunked and
bench/ml/chunked.py); the coefficients go to OUT.npy beside the report.

python ml_streaming_worker.py CHUNKS BUDGET_BYTES OUT.json [TOL MAX_ITER THREADS]   (defaults: 0 3 1)
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from forklift.ml import LogisticRegression
from forklift.ml.chunked import ChunkedDataset


def rss() -> int:
    """This process's resident memory now (the peak counter would keep the imports' and compiler's peaks)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Sampler(threading.Thread):
    """The largest resident memory seen every 5 ms while it runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = rss()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.005):
            self.peak = max(self.peak, rss())


def main() -> None:
    folder, budget, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    tol, max_iter, threads = (float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])) if sys.argv[4:] else (0, 3, 1)
    rng = np.random.default_rng(0)
    X = rng.random((200, 5)).astype(np.float32)
    LogisticRegression(dual=True, max_iter=2).fit(X, (X[:, 0] > 0.5).astype(int))  # load the compiled kernels
    gc.collect()
    before = rss()
    dataset = ChunkedDataset.open(folder, memory_budget=budget)
    sampler = Sampler()
    sampler.start()
    start = time.perf_counter()
    model = LogisticRegression(max_iter=max_iter, tol=tol, n_jobs=threads).fit(dataset)
    seconds = time.perf_counter() - start
    sampler.done.set()
    sampler.join()
    report = {
        "before": before, "peak": sampler.peak, "epochs": int(model.n_iter_[0]), "data": dataset.nbytes,
        "seconds": seconds,
    }  # fmt: skip
    out.write_text(json.dumps(report))
    np.save(out.with_suffix(".npy"), np.ravel(model.coef_))


if __name__ == "__main__":
    main()
