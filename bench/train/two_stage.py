"""Small objects: the tiny YOLO against a two-stage detector (Faster R-CNN) under equal training time.

The claim to check (PowerAI Vision's "optimized for accuracy"): the two-stage model finds the small, distant objects
the fast one misses, at about twice the time per image. This generates a set of many small shapes
(`forklift data synth shapes --object-size 8:32 --objects 4:12`), trains the slim yolov3-tiny of bench/train and
fasterrcnn_mobilenet_v3_large_fpn (anchors sized for small objects, 300 proposals) with forklift's trainer for the same
wall-clock budget each (epochs chosen from a one-epoch probe, not counted, so that each cosine schedule completes
inside the budget), measures both model directories on val (mAP@.5, and mAP@.5 on objects under 32x32 px) and
serves each with `forklift serve` (one worker, all CPUs) to time val images posted one at a time (p50/p90/p99).
Writes bench/results/train/two_stage.json and prints a table.

    .venv/bin/python bench/train/two_stage.py [--minutes 10] [--n 600] [--work DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from forklift.data.dataset import load_dataset
from forklift.data.synth import CLASSES, synth_shapes
from forklift.evaluation.detection import DetectionMetrics
from forklift.evaluation.evaluate import evaluate
from forklift.model_files.model_dir import open_model_dir
from forklift.serve.process import ServerProcess
from forklift.shared_data import shared_data_path
from forklift.train.settings import RunOptions, TrainSettings
from forklift.train.small_cfg import slim_cfg
from forklift.train.trainer import train

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "train"
SIZE = 320
OBJECT_SIZE, OBJECTS = (8, 32), (4, 12)
TWO_STAGE = "fasterrcnn_mobilenet_v3_large_fpn"
SMALL_ANCHORS = (16, 32, 64)  # one per FPN level of the MobileNet FPN (torchvision's: 32, 64, 128... at 800 px)
PROPOSALS = 300  # RPN proposals kept at test time, as the Faster R-CNN paper tested (torchvision keeps 1000)
POSTED = 60  # val images timed through the server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget of each model")
    parser.add_argument("--n", type=int, default=600, help="images generated (80%% train, 10%% val, 10%% test)")
    parser.add_argument("--work", type=Path, default=None, help="folder for the data and the runs (default: temp)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="forklift-two-stage-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "small-shapes"
    if not (data / "dataset.json").is_file():
        synth_shapes(data, args.n, SIZE, seed=0, object_size=OBJECT_SIZE, objects=OBJECTS)
    cfg = work / "yolov3-tiny-slim.cfg"
    cfg.write_text(slim_cfg(shared_data_path("darknet/yolov3-tiny.cfg"), len(CLASSES), SIZE)[0], encoding="utf-8")
    budget = args.minutes * 60
    candidates: dict[str, dict[str, Any]] = {
        "yolov3-tiny (slim)": {"cfg": cfg, "batch": 8, "lr": 0.004},
        TWO_STAGE: {
            "arch": TWO_STAGE,
            "img": SIZE,
            "anchor_sizes": SMALL_ANCHORS,
            "proposals": PROPOSALS,
            "batch": 4,
            "lr": 0.001,
        },
    }
    rows = {name: measure(name, options, data=data, work=work, budget=budget) for name, options in candidates.items()}
    summary = {
        "data": {"n": args.n, "size": SIZE, "object_size": OBJECT_SIZE, "objects": OBJECTS, "seed": 0},
        "budget_minutes": args.minutes,
        "models": rows,
        "work": str(work),
    }
    write_results("two_stage.json", summary)
    print(f"\n{args.n} images of {SIZE} px, shapes of {OBJECT_SIZE[0]}-{OBJECT_SIZE[1]} px, {args.minutes:g} min each")
    print(f"{'model':<36} {'epochs':>6} {'mAP@.5':>7} {'small':>7} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7}")
    for name, r in rows.items():
        print(
            f"{name:<36} {r['epochs']:>6} {r['map50']:>7.3f} {r['map50_small'] or 0:>7.3f} "
            f"{r['served_ms']['p50']:>7.1f} {r['served_ms']['p90']:>7.1f} {r['served_ms']['p99']:>7.1f}"
        )
    yolo, two = rows.values()
    print(f"two-stage / yolo: time per image x{two['served_ms']['p50'] / yolo['served_ms']['p50']:.2f}")


def write_results(file_name: str, summary: dict[str, Any]) -> None:
    """A bench's figures, with the machine they were measured on, in bench/results/train/FILE."""
    machine = {"platform": platform.platform(), "cpus": os.cpu_count()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / file_name).write_text(json.dumps({"machine": machine, **summary}, indent=2) + "\n", encoding="utf-8")


def measure(name: str, options: dict[str, Any], *, data: Path, work: Path, budget: float) -> dict[str, Any]:
    """Train `options` for `budget` seconds (epochs from a probe), evaluate on val and time it served."""
    folder = work / name.split()[0]
    return {**train_within(name, options, data=data, folder=folder, budget=budget),
            "served_ms": _served_latency(folder, data)}  # fmt: skip


def train_within(name: str, options: dict[str, Any], *, data: Path, folder: Path, budget: float) -> dict[str, Any]:
    """Train `options` into `folder` for `budget` seconds (as many epochs as a one-epoch probe says fit, so that
    the cosine schedule completes), then measure it on val: the run's figures."""
    probe_folder = folder.with_name(f"{folder.name}-probe")
    for run in (folder, probe_folder):  # runs of an earlier bench in the same --work
        shutil.rmtree(run, ignore_errors=True)
    probe = TrainSettings.of(data=data, epochs=1, val_every=1000, **options)
    probe_seconds = _epoch_seconds(train(probe, probe_folder))
    epochs = max(1, math.floor(budget / (probe_seconds * 1.1)))
    print(f"{name}: one epoch {probe_seconds:.0f} s -> {epochs} epochs in {budget:.0f} s", flush=True)
    started = time.perf_counter()
    settings = TrainSettings.of(data=data, epochs=epochs, val_every=max(1, epochs // 3), **options)
    train(settings, folder, RunOptions(time_budget_s=budget))
    train_seconds = time.perf_counter() - started
    metrics = evaluate(folder, data, split="val").metrics
    assert isinstance(metrics, DetectionMetrics)
    with (folder / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        run = list(csv.DictReader(handle))
    return {
        "options": {k: str(v) for k, v in options.items()},
        "epochs": len(run),
        "train_minutes": round(sum(float(r["seconds"]) for r in run) / 60, 2),
        "wall_minutes": round(train_seconds / 60, 2),
        "map50": metrics.map50,
        "map": metrics.map,
        "map50_small": metrics.map50_small,
        "recall": metrics.recall,
    }


def _epoch_seconds(run: Path) -> float:
    with (run / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        return float(next(csv.DictReader(handle))["seconds"])


def _served_latency(model_dir: Path, data: Path) -> dict[str, float]:
    """p50/p90/p99 of val images posted one at a time to `forklift serve` (one worker on every CPU), after a warm-up."""
    dataset = load_dataset(data)
    images = [dataset.path(i) for i in dataset.images if i.split == "val"][:POSTED]
    name = open_model_dir(model_dir).name
    cpus = str(os.cpu_count() or 1)
    latencies = []
    with ServerProcess(model_dir, "--instances", "1", "--cpus-per-instance", cpus, "--threads", cpus) as server:
        for index, path in enumerate([*images[:5], *images]):
            started = time.perf_counter()
            response = httpx.post(f"{server.url}/predict/{name}", files={"files": (path.name, path.read_bytes())})
            response.raise_for_status()
            if index >= 5:  # the first five warm the engine up
                latencies.append((time.perf_counter() - started) * 1000)
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
    return {"p50": round(float(p50), 1), "p90": round(float(p90), 1), "p99": round(float(p99), 1)}


if __name__ == "__main__":
    main()
