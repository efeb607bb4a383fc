"""Time per image of each runtime (onnx, openvino, torch, opencv) on yolov3-tiny and yolov3 at 416x416.

Side by side in one run: the runtimes take turns image by image, so machine noise falls on all of them.
Reports p50/p90/p99 of the whole predict (decode excluded: images are decoded once) and of inference alone,
and each runtime's p50 as a ratio to ONNX Runtime's. Writes bench/results/predict.csv and .json.

    .venv/bin/python bench/predict.py [--iterations 30] [--threads 2] [--models yolov3-tiny,yolov3]
        [--runtimes onnx,openvino] [--no-spin]

ONNX Runtime's threads spin for work after each run unless --no-spin (as serve's workers run): with more than
one thread they then take CPU from the next runtime's turn, which only --no-spin makes a fair comparison.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from forklift.model_files.model_dir import open_model_dir
from forklift.nets.fresh_weights import new_darknet_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.shared_data import shared_data_root
from forklift.vision.images import decode_image
from forklift.vocabulary import Runtime, words

SHARED = shared_data_root()
RUNTIMES = words(Runtime)  # onnx, the baseline, first
RESULTS = Path(__file__).resolve().parent / "results"


def percentiles(values: list[float]) -> dict[str, float]:
    p50, p90, p99 = np.percentile(np.asarray(values) * 1000, [50, 90, 99])
    return {"p50_ms": round(float(p50), 2), "p90_ms": round(float(p90), 2), "p99_ms": round(float(p99), 2)}


def bench_model(name: str, workdir: Path, iterations: int, options: PredictOptions, runtimes: list[str]) -> list[dict]:
    model_dir = new_darknet_dir(SHARED / "darknet" / f"{name}.cfg", SHARED / "darknet" / "coco.names", workdir / name)
    model = open_model_dir(model_dir)
    predictors = {runtime: load_predictor(model, runtime, options) for runtime in runtimes}
    photos = [decode_image(p.read_bytes(), p.name) for p in sorted((SHARED / "images").glob("*.jpg"))]
    totals: dict[str, list[float]] = {r: [] for r in runtimes}
    inference: dict[str, list[float]] = {r: [] for r in runtimes}
    for step in range(iterations + 3):
        photo = photos[step % len(photos)]
        for runtime, predictor in predictors.items():
            start = time.perf_counter()
            _, timing = predictor.predict_image("photo", photo)
            if step >= 3:  # warm-up
                totals[runtime].append(time.perf_counter() - start)
                inference[runtime].append(timing.inference)
    base = float(np.median(totals["onnx"]))
    rows = []
    for runtime in runtimes:
        row = {"model": name, "runtime": runtime, "threads": options.threads, "spin": options.spin}
        row["iterations"] = iterations
        row.update({f"total_{k}": v for k, v in percentiles(totals[runtime]).items()})
        row.update({f"inference_{k}": v for k, v in percentiles(inference[runtime]).items()})
        row["p50_vs_onnx"] = round(float(np.median(totals[runtime])) / base, 2)
        rows.append(row)
        print(
            f"{name:<12} {runtime:<7} total p50 {row['total_p50_ms']:7.1f} ms  p90 {row['total_p90_ms']:7.1f}  "
            f"p99 {row['total_p99_ms']:7.1f}  inference p50 {row['inference_p50_ms']:7.1f}  x{row['p50_vs_onnx']}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="yolov3-tiny,yolov3")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="which to compare; onnx, the baseline, first")
    parser.add_argument("--no-spin", action="store_true", help="idle engine threads sleep (as in forklift serve)")
    args = parser.parse_args()
    options = PredictOptions(threads=args.threads, spin=not args.no_spin)
    runtimes = args.runtimes.split(",")
    if runtimes[0] != "onnx" or not set(runtimes) <= set(RUNTIMES):
        parser.error(f"--runtimes: onnx first, then any of {', '.join(RUNTIMES[1:])}")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models.split(","):
            rows += bench_model(name, Path(workdir), args.iterations, options, runtimes)
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "predict.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    machine = {"machine": platform.machine(), "cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()}
    (RESULTS / "predict.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    print(f"wrote {RESULTS / 'predict.csv'}")


if __name__ == "__main__":
    main()
