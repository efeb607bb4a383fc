"""Train a tiny YOLO from scratch on the generated shapes set under a wall-clock budget, then measure it.

The training issue's figures: on `forklift data synth shapes` at 320x320, a tiny YOLO trained from scratch on
this machine's CPU cores should reach mAP@.5 >= 0.90 within 15 minutes of training. This generates the set,
writes a slimmer yolov3-tiny cfg (`forklift.train.small_cfg`), picks the epochs that fit the budget from a short
measured probe of the training step, trains with `forklift.train.trainer.train` (which also stops at the budget), and
evaluates the model on val through the torch and the onnx runtimes (their mAPs must agree within 0.005).
Writes bench/results/train/train.json and prints a table.

    .venv/bin/python bench/train/run.py [--minutes 15] [--n 800] [--batch 16] [--lr 0.002] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
from plain_loop import plain_images_per_s

from forklift.data.check import check_dataset
from forklift.data.synth import CLASSES, synth_shapes
from forklift.evaluation.evaluate import evaluate
from forklift.shared_data import shared_data_root
from forklift.train.settings import RunOptions, TrainSettings
from forklift.train.small_cfg import slim_cfg
from forklift.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]
SHARED = shared_data_root()
RESULTS = ROOT / "bench" / "results" / "train"
SIZE = 320
# yolov3-tiny's convolution widths -> this benchmark's (the heads' filters are set by set_classes for 5 classes).
TOLERANCE = 0.005  # torch vs onnx mAP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="training budget (the probe is not counted)")
    parser.add_argument("--n", type=int, default=800, help="images generated (80%% train, 10%% val, 10%% test)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--epochs", type=int, default=0, help="0: as many as the probe says fit the budget")
    parser.add_argument("--val-every", type=int, default=4, help="measure val every N epochs (and at the last)")
    parser.add_argument("--work", type=Path, default=None, help="folder for the data and the run (default: temp)")
    args = parser.parse_args()

    work = Path(args.work or tempfile.mkdtemp(prefix="forklift-train-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data, out, cfg = work / "data", work / "run", work / "yolov3-tiny-slim.cfg"
    started = time.perf_counter()
    synth_shapes(data, args.n, SIZE, seed=0)
    synth_seconds = time.perf_counter() - started
    text, changes = slim_cfg(SHARED / "darknet" / "yolov3-tiny.cfg", len(CLASSES), SIZE)
    cfg.write_text(text, encoding="utf-8")
    budget = args.minutes * 60
    train_count = sum(image.split == "train" for image in check_dataset(data).dataset.images)
    per_image = 1 / plain_images_per_s(data, cfg, args.batch, args.lr, steps=6)
    epochs = args.epochs or max(1, math.floor(budget / (per_image * train_count * 1.05)))
    print(f"{train_count} train images, probe {1 / per_image:.1f} images/s -> {epochs} epochs in {budget:.0f} s")

    started = time.perf_counter()
    settings = TrainSettings.of(
        data=data, cfg=cfg, epochs=epochs, batch=args.batch, lr=args.lr, seed=0, val_every=args.val_every
    )
    train(settings, out, RunOptions(time_budget_s=budget))
    train_seconds = time.perf_counter() - started  # includes writing the model dir and train()'s own val eval

    rows = (out / "metrics.csv").read_text(encoding="utf-8").splitlines()
    header, last = rows[0].split(","), rows[-1].split(",")
    metrics = [dict(zip(header, row.split(","), strict=True)) for row in rows[1:]]
    epoch_seconds = sum(float(m["seconds"]) for m in metrics)
    images_per_s = sum(float(m["images_per_s"]) * float(m["seconds"]) for m in metrics) / epoch_seconds
    runtimes = {}
    for runtime in ("torch", "onnx"):
        t0 = time.perf_counter()
        result = evaluate(out, data, split="val", runtime=runtime)
        runtimes[runtime] = {
            "map50": round(result.metrics.map50, 4),
            "map": round(result.metrics.map, 4),
            "images": result.images,
            "eval_seconds": round(time.perf_counter() - t0, 1),
        }
    difference = max(abs(runtimes["torch"][k] - runtimes["onnx"][k]) for k in ("map50", "map"))
    summary = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "data": {"n": args.n, "size": SIZE, "seed": 0, "train": train_count, "synth_seconds": round(synth_seconds, 1)},
        "cfg": {"source": "yolov3-tiny.cfg", "changes": changes},
        "settings": {"epochs_planned": epochs, "batch": args.batch, "lr": args.lr, "budget_s": budget},
        "epochs_run": len(metrics),
        "train_minutes": round(epoch_seconds / 60, 2),
        "wall_minutes_incl_export": round(train_seconds / 60, 2),
        "images_per_s": round(images_per_s, 1),
        "probe_images_per_s": round(1 / per_image, 1),
        "final_loss": dict(zip(header[1:5], last[1:5], strict=True)),
        "runtimes": runtimes,
        "torch_onnx_max_difference": round(difference, 4),
        "runtimes_agree": difference < TOLERANCE,
        "elapsed_minutes_at_last_epoch": round(float(metrics[-1]["elapsed"]) / 60, 2),
        "goal_map50_0_90_met": runtimes["onnx"]["map50"] >= 0.90 and float(metrics[-1]["elapsed"]) <= budget,
        "metrics": metrics,
        "work": str(work),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "train.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

    print(f"\ncfg: {', '.join(changes)}")
    print(f"data: {args.n} images at {SIZE} ({train_count} train), batch {args.batch}, lr {args.lr}")
    print(f"{'runtime':<8} {'mAP@.5':>8} {'mAP':>8} {'epochs':>7} {'minutes':>8} {'images/s':>9}")
    for runtime, r in runtimes.items():
        print(
            f"{runtime:<8} {r['map50']:>8.4f} {r['map']:>8.4f} {len(metrics):>7} "
            f"{summary['train_minutes']:>8.2f} {summary['images_per_s']:>9.1f}"
        )
    print(f"torch vs onnx: max difference {difference:.4f} ({'<' if difference < TOLERANCE else '>='} {TOLERANCE})")
    print(f"goal mAP@.5 >= 0.90 in {args.minutes:g} min: {'met' if summary['goal_map50_0_90_met'] else 'not met'}")


if __name__ == "__main__":
    main()
