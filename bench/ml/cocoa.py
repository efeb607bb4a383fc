"""Across processes: 2 ranks x 1 thread against 1 process x 1 thread, time to the same objective.

Every rank makes the same generated set (1M x 10k Criteo-like clicks) and fits its contiguous share of the rows
with forklift.ml's LogisticRegression (n_jobs=1; ``dual="auto"``: truncated Newton with an all-reduce per
product, or ``--dual``: CoCoA+ with an all-reduce per epoch) for a ladder of ``tol``; rank 0 scores each fit's
objective on the whole set. The driver runs both layouts under torchrun and prints, for each, the fastest fit
within 1e-5 of the best objective either reached.

    .venv/bin/python bench/ml/cocoa.py            # or --dual
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TOLS = [1e-3, 1e-4, 1e-5, 1e-6]


def rank_main(out: Path, dual: bool | str) -> None:
    import torch.distributed as dist

    from forklift.ml import LogisticRegression
    from forklift.ml.datasets import make_sparse_clicks

    X, y = make_sparse_clicks()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = slice(X.shape[0] * rank // world, X.shape[0] * (rank + 1) // world)
    mine_X, mine_y = X[rows], y[rows]
    LogisticRegression(max_iter=1).fit(mine_X[:1000], mine_y[:1000])  # compile outside the timings
    fits = []
    for tol in TOLS:
        dist.barrier()
        start = time.perf_counter()
        model = LogisticRegression(tol=tol, n_jobs=1, dual=dual, random_state=0).fit(mine_X, mine_y)
        seconds = time.perf_counter() - start
        if rank == 0:
            w = model.coef_.ravel()
            signs = np.where(y > 0, 1.0, -1.0)
            objective = float(np.logaddexp(0, -signs * (X @ w)).sum() + 0.5 * w @ w)
            fits.append((tol, seconds, objective, int(model.n_iter_[0])))
    if rank == 0:
        out.write_text(json.dumps(fits))
    dist.destroy_process_group()


def main() -> None:
    dual = "true" if "--dual" in sys.argv[1:] else "auto"
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (1, 2):
            out = Path(tmp) / f"{ranks}.json"
            env = dict(os.environ, FORKLIFT_BENCH_OUT=str(out), OMP_NUM_THREADS="1", FORKLIFT_BENCH_DUAL=dual)
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                str(ranks),
                __file__,
            ]
            subprocess.run(command, check=True, env=env)
            results[ranks] = json.loads(out.read_text())
    best = min(o for fits in results.values() for _, _, o, _ in fits)
    times = {}
    for ranks, fits in results.items():
        reached = [s for _, s, o, _ in fits if (o - best) / best <= 1e-5]
        times[ranks] = min(reached) if reached else float("nan")
        print(
            f"{ranks} x 1 thread: {times[ranks]:.2f} s  fits: "
            + ", ".join(f"{t}:{s:.2f}s/{(o - best) / best:.1e}/{n} epochs" for t, s, o, n in fits)
        )
    print(f"speed-up of 2 ranks: {times[1] / times[2]:.2f}x")


if __name__ == "__main__":
    if "FORKLIFT_BENCH_OUT" in os.environ:
        rank_main(
            Path(os.environ["FORKLIFT_BENCH_OUT"]), True if os.environ["FORKLIFT_BENCH_DUAL"] == "true" else "auto"
        )
    else:
        main()
