"""What has to be measured on a GPU, side by side in one run on one machine.

(a) Training on CUDA with and without automatic mixed precision (`train --amp`, float16 with a gradient scaler):
    the tiny YOLO of yolov3-tiny.cfg on generated shapes, the same seed and epochs both ways; images/s (p50 over
    epochs after the first), peak device memory and the val mAP@.5 each reaches.
(b) The torch engine on the GPU against the CPU (torch and ONNX Runtime, all the machine's cores): time per
    image of the whole predict (letterbox, inference, decode, NMS; JPEG decoding excluded), p50/p90/p99, on
    yolov3 at 416×416 with seeded random weights, the engines taking turns image by image; and how many
    detections differ between the GPU and the CPU.
(c) `forklift serve` with GPU workers (`--gpus 0`, torch engine, batching) against CPU workers (ONNX Runtime,
    the same cores) on that yolov3: requests/s and p50/p90/p99 latency at each concurrency, same client.

Writes gpu.json and gpu.md to --out and prints the tables.

    python bench/gpu/run.py --out bench/results/gpu        # on a machine with a CUDA GPU
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from forklift.data.synth import synth_shapes
from forklift.loadtest.post import run_load
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.fresh_weights import new_darknet_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.serve.process import ServerProcess
from forklift.shared_data import shared_data_root
from forklift.train.settings import RunOptions, TrainSettings
from forklift.train.trainer import train
from forklift.vision.images import decode_image

SHARED = shared_data_root()
ROOT = Path(__file__).resolve().parents[2]


def percentiles(seconds: list[float]) -> dict[str, float]:
    p50, p90, p99 = np.percentile(np.asarray(seconds) * 1000, [50, 90, 99])
    return {"p50_ms": round(float(p50), 2), "p90_ms": round(float(p90), 2), "p99_ms": round(float(p99), 2)}


def bench_training(work: Path, epochs: int, images: int) -> list[dict[str, Any]]:
    """(a): the same run with AMP off and on; the rows of metrics.csv give images/s and the last mAP@.5."""
    data = work / "shapes"
    synth_shapes(data, images, 320, seed=0)
    rows = []
    for amp in (False, True):
        torch.cuda.reset_peak_memory_stats()
        settings = TrainSettings.of(data=data, cfg=SHARED / "darknet" / "yolov3-tiny.cfg", epochs=epochs, batch=32,
                                    img=320, lr=0.002, amp=amp, val_every=epochs)  # fmt: skip
        started = time.perf_counter()
        out = train(settings, work / f"amp-{amp}", RunOptions(device="cuda"))
        wall = time.perf_counter() - started
        with (out / "metrics.csv").open(newline="", encoding="utf-8") as handle:
            metrics = list(csv.DictReader(handle))
        speeds = [float(row["images_per_s"]) for row in metrics[1:]]
        rows.append({"amp": amp, "epochs": epochs, "images_per_s_p50": round(float(np.median(speeds)), 1),
                     "wall_s": round(wall, 1), "peak_mib": torch.cuda.max_memory_allocated() >> 20,
                     "val_map50": float(metrics[-1]["map50"])})  # fmt: skip
        print(f"train amp={amp}: {rows[-1]}", flush=True)
    return rows


def bench_engines(model_dir: Path, iterations: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(b): torch on cuda:0, torch on the CPU and ONNX Runtime on the CPU, taking turns image by image."""
    model = open_model_dir(model_dir)
    threads = os.cpu_count() or 1
    predictors = {
        "torch cuda:0": load_predictor(model, "torch", PredictOptions(device="cuda:0")),
        f"torch cpu ({threads} threads)": load_predictor(model, "torch", PredictOptions(threads=threads)),
        f"onnx cpu ({threads} threads)": load_predictor(model, "onnx", PredictOptions(threads=threads)),
    }
    photos = [decode_image(p.read_bytes(), p.name) for p in sorted((SHARED / "images").glob("*.jpg"))]
    times: dict[str, list[float]] = {name: [] for name in predictors}
    counts: dict[str, list[int]] = {name: [] for name in predictors}
    for step in range(iterations + 3):
        photo = photos[step % len(photos)]
        for name, predictor in predictors.items():
            started = time.perf_counter()
            answer, _ = predictor.predict_image("photo", photo)
            if step >= 3:  # warm-up (CUDA kernels are chosen on first use)
                times[name].append(time.perf_counter() - started)
                counts[name].append(len(answer))
    gpu, cpu = "torch cuda:0", f"torch cpu ({threads} threads)"
    base = float(np.median(times[gpu]))
    rows = [{"engine": name, **percentiles(t), "p50_vs_gpu": round(float(np.median(t)) / base, 2)}
            for name, t in times.items()]  # fmt: skip
    agreement = {
        "images": iterations,
        "detections_gpu": sum(counts[gpu]),
        "detections_cpu": sum(counts[cpu]),
        "images_with_other_count": sum(a != b for a, b in zip(counts[gpu], counts[cpu], strict=True)),
    }
    for row in rows:
        print(f"predict {row}", flush=True)
    print(f"gpu vs cpu detections: {agreement}", flush=True)
    return rows, agreement


def bench_serving(model_dir: Path, requests: int, concurrency: list[int]) -> list[dict[str, Any]]:
    """(c): GPU workers against CPU workers on the same machine, the same client and images."""
    cores = os.cpu_count() or 1
    layouts = {
        "gpu: 2 torch workers on cuda:0, max-batch 8": ["--runtime", "torch", "--gpus", "0", "--instances", "2",
                                                        "--max-batch", "8", "--batch-timeout-ms", "2"],
        f"cpu: {cores // 4} onnx workers x 4 threads": ["--runtime", "onnx", "--instances", str(cores // 4),
                                                         "--threads", "4"],
    }  # fmt: skip
    images = [(p.name, p.read_bytes()) for p in sorted((SHARED / "images").glob("*.jpg"))]
    rows = []
    for layout, options in layouts.items():
        with ServerProcess(f"{model_dir}=yolo", *options, timeout=300) as server:
            url = f"{server.url}/predict/yolo"
            for c in concurrency:
                asyncio.run(run_load(url, images, max(16, 2 * c), c))  # warm-up
                result = asyncio.run(run_load(url, images, requests, c))
                row = {"layout": layout, **result.to_json()}
                row.pop("url")
                rows.append(row)
                print(f"serve {layout} c={c}: {result.throughput:.1f}/s p50 {result.p50_ms} p90 {result.p90_ms} "
                      f"p99 {result.p99_ms} errors {result.errors}", flush=True)  # fmt: skip
    return rows


def markdown(results: dict[str, Any]) -> str:
    lines = [f"machine: {results['machine']}", "", "| training | images/s (p50) | peak MiB | val mAP@.5 | wall s |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in results["train"]:
        lines.append(f"| {'amp' if row['amp'] else 'float32'} | {row['images_per_s_p50']} | {row['peak_mib']} | "
                     f"{row['val_map50']:.3f} | {row['wall_s']} |")  # fmt: skip
    lines += ["", "| engine (yolov3 416) | p50 ms | p90 ms | p99 ms | p50 / GPU's |", "| --- | --- | --- | --- | --- |"]
    for row in results["engines"]:
        lines.append(f"| {row['engine']} | {row['p50_ms']} | {row['p90_ms']} | {row['p99_ms']} | "
                     f"×{row['p50_vs_gpu']} |")  # fmt: skip
    lines += ["", f"GPU vs CPU detections: {results['agreement']}", "",
              "| serving | concurrency | req/s | p50 ms | p90 ms | p99 ms | errors |",
              "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in results["serve"]:
        lines.append(f"| {row['layout']} | {row['concurrency']} | {row['throughput']:.1f} | {row['p50_ms']} | "
                     f"{row['p90_ms']} | {row['p99_ms']} | {row['errors']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--images", type=int, default=600, help="generated training images (80%% train)")
    parser.add_argument("--iterations", type=int, default=60, help="timed images per engine")
    parser.add_argument("--requests", type=int, default=400, help="requests per serving point")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--parts", default="train,engines,serve", help="which of train, engines, serve to run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("torch sees no CUDA GPU here: this benchmark measures one")
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {
        "machine": f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPUs, {platform.machine()}, "
        f"torch {torch.__version__}",
        "train": [],
        "engines": [],
        "agreement": {},
        "serve": [],
    }
    with tempfile.TemporaryDirectory() as temp:
        work = Path(temp)
        if "train" in parts:
            results["train"] = bench_training(work, args.epochs, args.images)
        model_dir = new_darknet_dir(SHARED / "darknet" / "yolov3.cfg", SHARED / "darknet" / "coco.names",
                                    work / "yolov3")  # fmt: skip
        if "engines" in parts:
            results["engines"], results["agreement"] = bench_engines(model_dir, args.iterations)
        if "serve" in parts:
            concurrency = [int(c) for c in args.concurrency.split(",")]
            results["serve"] = bench_serving(model_dir, args.requests, concurrency)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    table = markdown(results)
    (args.out / "gpu.md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
