"""f32, bf16 and INT8 side by side: images/s of one engine process and end-to-end `forklift serve` throughput, with
the eval metric of each precision.

Models: a detector trained here on generated shapes (`--detector DIR --data DIR`, e.g. bench/train's output), a
two-stage detector likewise (`--two-stage DIR --two-stage-data DIR`: an OpenVINO IR in INT8), a shapes classifier
and an LR-ASPP segmentation net trained here briefly, and yolov3-tiny and yolov3 at 416x416 with seeded random
weights. The trained models go through `forklift models quantize` (calibrated on 300 of their train images,
measured on val: mAP@.5 through pycocotools, top-1, mIoU); the random-weight models are quantised by the same
NNCF call with ranges from generated shape images, so their INT8 graphs show the speed only: random weights have
no accuracy to keep, and their ranges are not those of real photos.

Per model and precision, the engine is OpenVINO (the default for Darknet models):
  - one process, 1 thread, batch 1, the sample JPEGs of ../shared/data/images/ in turn (decode, letterbox,
    inference and NMS included): images/s and per-image p50/p90/p99, the precisions taking turns in rounds;
  - `forklift serve --instances 2 --threads 1 --runtime openvino --precision P`, loaded by forklift's own client
    at 8 requests in flight: requests/s and p50/p90/p99.
Writes bench/results/quantize/results.json and prints a table with the ratios to f32.

    .venv/bin/python bench/quantize/run.py [--detector DIR --data DIR] [--two-stage DIR --two-stage-data DIR]
        [--requests 400] [--models yolov3-tiny,yolov3] [--skip-training]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from forklift.data.check import check_dataset
from forklift.data.synth import synth_shapes
from forklift.loadtest.post import run_load
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.fresh_weights import new_darknet_dir
from forklift.quantize.calibration import calibration_inputs
from forklift.quantize.check import quantize_model_dir
from forklift.quantize.int8 import quantize_graph
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.runtime.onnx_export import source_digest
from forklift.runtime.onnx_graph import graph_path
from forklift.serve.process import ServerProcess
from forklift.shared_data import shared_data_path, shared_data_root
from forklift.train.settings import TrainSettings
from forklift.train.trainer import train
from forklift.vocabulary import Precision, Runtime

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "quantize"
CLASSIFIER_CFG = ROOT / "tests" / "cfgs" / "shapes-classifier.cfg"
PRECISIONS = (Precision.F32, Precision.BF16, Precision.INT8)
ROUNDS = 5  # of the in-process measure, the precisions taking turns
PER_ROUND = 24  # images per precision and round
CONCURRENCY = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detector", type=Path, help="a detector trained on generated shapes (bench/train)")
    parser.add_argument("--data", type=Path, help="its data set")
    parser.add_argument("--two-stage", type=Path, help="a two-stage detector trained on generated shapes")
    parser.add_argument("--two-stage-data", type=Path, help="its data set")
    parser.add_argument("--models", default="yolov3-tiny,yolov3", help="random-weight Darknet models to measure")
    parser.add_argument("--requests", type=int, default=400, help="requests per serve measurement")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--skip-training", action="store_true", help="no classifier and segmentation net")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="forklift-quantize-bench-"))
    images = [(p.name, p.read_bytes()) for p in sorted((shared_data_root() / "images").glob("*.jpg"))]
    trained = [(f"{kind} (trained)", *made) for kind, made in train_small(work, skip=args.skip_training).items()]
    if args.two_stage:
        trained.insert(0, ("two-stage detector (trained)", args.two_stage, args.two_stage_data))
    if args.detector:
        trained.insert(0, ("shapes detector (trained)", args.detector, args.data))
    models: list[dict[str, Any]] = []
    for name, source, data in trained:
        directory = work / name.split()[0]
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(source, directory, ignore=shutil.ignore_patterns("checkpoints", "tensorboard", "eval"))
        result = quantize_model_dir(directory, data, samples=300, max_drop=0.01)
        checks = {str(p): c.to_json() for p, c in result.checks.items()}
        models.append({"name": name, "dir": directory, "checks": checks, "controlled": result.controlled})
    shapes = work / "calibration-shapes"
    if not (shapes / "dataset.json").is_file():
        synth_shapes(shapes, 300, 416, seed=0)
    for name in filter(None, args.models.split(",")):
        shutil.rmtree(work / name, ignore_errors=True)
        directory = new_darknet_dir(
            shared_data_path(f"darknet/{name}.cfg"), shared_data_path("darknet/coco.names"), work / name, seed=1
        )
        model = open_model_dir(directory)
        inputs = calibration_inputs(model, check_dataset(shapes), samples=300, seed=0)
        quantize_graph(graph_path(model), inputs, directory, digest=source_digest(model))
        models.append({"name": f"{name} (random weights)", "dir": directory, "checks": None})
    for entry in models:
        print(f"{entry['name']}: one process", flush=True)
        entry["process"] = in_process(entry["dir"], images)
        entry["serve"] = {}
        for precision in PRECISIONS:
            print(f"{entry['name']}: serve, {precision}", flush=True)
            entry["serve"][precision] = served(entry["dir"], images, precision, args.requests)
        entry["dir"] = str(entry["dir"])
    summary = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu": cpu_name()},
        "method": {"rounds": ROUNDS, "per_round": PER_ROUND, "serve": "2 instances x 1 thread", "in_flight": 8},
        "models": models,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    report(models)


def train_small(work: Path, *, skip: bool) -> dict[str, tuple[Path, Path]]:
    """A shapes classifier (forklift's test cfg, 64 px) and an LR-ASPP segmentation net (128 px), trained briefly
    on generated shapes: kind -> (model directory, data set)."""
    if skip:
        return {}
    made = {}
    for kind, task, n, size, settings in (
        ("classifier", "classify", 600, 64, {"cfg": CLASSIFIER_CFG, "epochs": 25, "batch": 16, "lr": 0.003}),
        ("segmenter", "segment", 300, 128, {"arch": "lraspp_mobilenet_v3_large", "img": 128, "epochs": 12,
                                            "batch": 8, "lr": 0.01}),
    ):  # fmt: skip
        data = work / f"{kind}-data"
        if not (data / "dataset.json").is_file():
            synth_shapes(data, n, size, seed=0, task=task)
        out = work / f"{kind}-run"
        if not (out / "forklift.json").is_file():
            print(f"training the {kind}", flush=True)
            train(TrainSettings.of(data=data, seed=0, val_every=settings["epochs"], **settings), out)
        made[kind] = (out, data)
    return made


def in_process(directory: Path, images: list[tuple[str, bytes]]) -> dict[str, dict[str, float]]:
    """Per precision: images/s and per-image latency percentiles of one 1-thread OpenVINO predictor."""
    model = open_model_dir(directory)
    predictors = {
        p: load_predictor(model, Runtime.OPENVINO, PredictOptions(threads=1, precision=p)) for p in PRECISIONS
    }
    times: dict[Precision, list[float]] = {p: [] for p in PRECISIONS}
    for predictor in predictors.values():
        for name, data in images[:4]:
            predictor.predict([(name, data)])  # warm-up
    for _ in range(ROUNDS):
        for precision, predictor in predictors.items():
            for index in range(PER_ROUND):
                name, data = images[index % len(images)]
                start = time.perf_counter()
                predictor.predict([(name, data)])
                times[precision].append(time.perf_counter() - start)
    return {p: stats(times[p]) for p in PRECISIONS}


def served(directory: Path, images: list[tuple[str, bytes]], precision: Precision, requests: int) -> dict:
    arguments = [f"{directory}=model", "--instances", "2", "--threads", "1", "--precision", precision]
    arguments += ["--runtime", "openvino"]
    with ServerProcess(*arguments) as server:
        url = f"{server.url}/predict/model"
        asyncio.run(run_load(url, images, 16, CONCURRENCY))
        result = asyncio.run(run_load(url, images, requests, CONCURRENCY))
    return {"requests_per_s": result.throughput, "p50_ms": result.p50_ms, "p90_ms": result.p90_ms,
            "p99_ms": result.p99_ms, "errors": result.errors}  # fmt: skip


def stats(seconds: list[float]) -> dict[str, float]:
    ms = np.array(seconds) * 1000
    return {"images_per_s": len(seconds) / sum(seconds), "p50_ms": float(np.percentile(ms, 50)),
            "p90_ms": float(np.percentile(ms, 90)), "p99_ms": float(np.percentile(ms, 99))}  # fmt: skip


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def report(models: list[dict[str, Any]]) -> None:
    print(f"\n{'model':<28} {'prec':<5} {'metric':>7} {'img/s 1 proc':>13} {'x f32':>6} {'p50/p90/p99 ms':>17} "
          f"{'serve req/s':>12} {'x f32':>6} {'p50/p90/p99 ms':>17}")  # fmt: skip
    for entry in models:
        base_proc = entry["process"][Precision.F32]["images_per_s"]
        base_serve = entry["serve"][Precision.F32]["requests_per_s"]
        for precision in PRECISIONS:
            proc, serve = entry["process"][precision], entry["serve"][precision]
            checks = entry["checks"] or {}
            value = checks.get(str(precision), {}).get("value") if precision != Precision.F32 else None
            if precision == Precision.F32 and checks:
                value = next(iter(checks.values()))["f32"]
            metric = "n/a" if value is None else f"{value:.4f}"
            print(
                f"{entry['name']:<28} {precision:<5} {metric:>7} {proc['images_per_s']:>13.1f} "
                f"{proc['images_per_s'] / base_proc:>6.2f} {latencies(proc):>17} {serve['requests_per_s']:>12.1f} "
                f"{serve['requests_per_s'] / base_serve:>6.2f} {latencies(serve):>17}"
            )


def latencies(row: dict[str, float]) -> str:
    return f"{row['p50_ms']:.1f}/{row['p90_ms']:.1f}/{row['p99_ms']:.1f}"


if __name__ == "__main__":
    main()
