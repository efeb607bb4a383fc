"""Fit a chunked data set under a memory budget and report the peak RSS the fit added (used by test_ml_chunked).

python ml_streaming_worker.py CHUNKS BUDGET_BYTES OUT.json
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
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
    folder, budget, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rng = np.random.default_rng(0)
    X = rng.random((200, 5)).astype(np.float32)
    LogisticRegression(dual=True, max_iter=2).fit(X, (X[:, 0] > 0.5).astype(int))  # load the compiled kernels
    gc.collect()
    before = rss()
    dataset = ChunkedDataset.open(folder, memory_budget=budget)
    sampler = Sampler()
    sampler.start()
    model = LogisticRegression(max_iter=3, tol=0).fit(dataset)
    sampler.done.set()
    sampler.join()
    report = {"before": before, "peak": sampler.peak, "epochs": int(model.n_iter_[0]), "data": dataset.nbytes}
    Path(out).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
