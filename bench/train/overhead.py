"""forklift's training loop against a plain PyTorch loop: the same slim yolov3-tiny, data, batch and optimiser.

The issue's figure: forklift's loop (progress bar, warm-up and cosine schedule, gradient clipping, the
mixed-precision wrapper, loss bookkeeping, metrics.csv, TensorBoard, a checkpoint per epoch) costs under 10 % of
training throughput. Rounds run the two, one epoch each, so that both see the same machine, and who goes first
alternates; reported are the p50 images/s of each and their ratio. forklift's figure is its metrics.csv
`images_per_s` (the epoch's batches); the checkpoint written after each epoch is timed on its own and added.

    .venv/bin/python bench/train/overhead.py [--rounds 3] [--n 400] [--batch 16]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from plain_loop import plain_images_per_s
from run import RESULTS, SHARED, SIZE

from forklift.data.synth import CLASSES, synth_shapes
from forklift.train.settings import TrainSettings
from forklift.train.small_cfg import slim_cfg
from forklift.train.trainer import train


def forklift_epoch(data: Path, cfg: Path, out: Path, batch: int, lr: float) -> tuple[float, float, int]:
    """(images/s of one forklift epoch, seconds its checkpoint took to write, images in the epoch)."""
    train(TrainSettings.of(data=data, cfg=cfg, epochs=1, batch=batch, lr=lr, seed=0, val_every=1000), out)
    with (out / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        (row,) = list(csv.DictReader(handle))
    checkpoint = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    started = time.perf_counter()
    torch.save(checkpoint, out / "checkpoints" / "timed.pt")
    seconds = float(row["seconds"])
    return float(row["images_per_s"]), time.perf_counter() - started, round(float(row["images_per_s"]) * seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=400, help="images generated (80%% train)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.002)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="forklift-overhead-"))
    data, cfg = work / "data", work / "slim.cfg"
    synth_shapes(data, args.n, SIZE, seed=0)
    cfg.write_text(slim_cfg(SHARED / "darknet" / "yolov3-tiny.cfg", len(CLASSES), SIZE)[0], encoding="utf-8")
    plain, ours, saves = [], [], []
    for k in range(args.rounds):  # who goes first alternates: the second of a pair finds warmer caches
        for turn in ("plain", "forklift") if k % 2 == 0 else ("forklift", "plain"):
            if turn == "plain":
                plain.append(plain_images_per_s(data, cfg, args.batch, args.lr, skip=0))  # as forklift's epoch
                continue
            rate, save_seconds, images = forklift_epoch(data, cfg, work / f"run{k}", args.batch, args.lr)
            ours.append(images / (images / rate + save_seconds))
            saves.append(save_seconds)
        print(f"round {k + 1}: plain {plain[-1]:.1f} images/s, forklift {ours[-1]:.1f} (checkpoint {saves[-1]:.3f} s)")
    p50_plain, p50_ours = statistics.median(plain), statistics.median(ours)
    summary = {
        "rounds": args.rounds,
        "images": args.n,
        "size": SIZE,
        "batch": args.batch,
        "plain_images_per_s": [round(v, 2) for v in plain],
        "forklift_images_per_s": [round(v, 2) for v in ours],
        "checkpoint_seconds": [round(v, 3) for v in saves],
        "p50_plain": round(p50_plain, 2),
        "p50_forklift": round(p50_ours, 2),
        "ratio": round(p50_ours / p50_plain, 3),
        "overhead_percent": round(100 * (1 - p50_ours / p50_plain), 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "overhead.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"p50 images/s: plain {p50_plain:.1f}, forklift {p50_ours:.1f}; ratio {summary['ratio']:.3f} "
          f"(overhead {summary['overhead_percent']:.1f} %, goal < 10 %)")  # fmt: skip


if __name__ == "__main__":
    main()
