"""Large model support on a segmentation net: how much bigger a training step fits, and what swapping costs.

(a) At a fixed batch, the largest square resolution (a multiple of 32) at which one training step of a
torchvision segmentation net (weights=None) fits in device memory, without and with `forklift.lms.swapping`:
doubling until a step runs out of memory, then bisecting. (b) The p50 time of a training step at two sizes
that fit both ways, without and with swapping, and the overhead. Writes bench/results/lms/lms.csv and lms.md
and prints the table.

    .venv/bin/python bench/lms/run.py                        # GPU: fcn_resnet50, batch 8, 600 and 700 px
    .venv/bin/python bench/lms/run.py --device cpu --tiny    # smoke test: disk tier, 64 and 96 px, < 1 minute

--tiny runs torch on one CPU thread unless --threads says otherwise: on a shared CPU, OpenMP threads that spin
while another process holds a core make step times swing by several times from one step to the next.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torchvision

import forklift.lms

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "lms"
STEP = 32  # resolutions searched are multiples of the nets' output stride


@dataclass(frozen=True)
class Setup:
    """What one run trains: the net, its device and batch, and the swapping settings."""

    model: str
    classes: int
    device: torch.device
    batch: int
    lms: forklift.lms.Settings


class Trainer:
    """One net and optimizer, reused for every step so that only activations change from try to try."""

    def __init__(self, setup: Setup) -> None:
        torch.manual_seed(0)
        builder = getattr(torchvision.models.segmentation, setup.model)
        self.net = builder(weights=None, weights_backbone=None, num_classes=setup.classes).to(setup.device).train()
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        self.setup = setup

    def step(self, size: int, swap: bool) -> tuple[float, forklift.lms.Stats | None]:
        """Seconds for one step at `size`×`size` (forward, loss, backward, update), and the swapping stats."""
        setup = self.setup
        images = torch.randn(setup.batch, 3, size, size, device=setup.device)
        labels = torch.randint(setup.classes, (setup.batch, size, size), device=setup.device)
        synchronize(setup.device)
        start = time.perf_counter()
        block = forklift.lms.swapping(**setup.lms) if swap else contextlib.nullcontext()
        with block as stats:
            loss = torch.nn.functional.cross_entropy(self.net(images)["out"], labels)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
        self.optimizer.step()
        synchronize(setup.device)
        return time.perf_counter() - start, stats

    def fits(self, size: int, swap: bool) -> bool:
        """Whether one step at `size` runs without running out of device (or pinned host) memory."""
        fitted = True
        try:
            self.step(size, swap)
        except torch.OutOfMemoryError:
            fitted = False
        except RuntimeError as exc:  # pinned host allocations fail with a plain CUDA error
            if "out of memory" not in str(exc):
                raise
            fitted = False
        self.optimizer.zero_grad(set_to_none=True)  # after the except clauses, which held the failed step's frames
        release(self.setup.device)
        return fitted


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release(device: torch.device) -> None:
    """Free what a failed try left, so the next try starts from the same memory."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def largest(fits: Callable[[int], bool], start: int, cap: int) -> int:
    """The largest multiple of STEP up to `cap` for which `fits` holds (0 if none): double, then bisect."""
    low, size, top = 0, max(start // STEP, 1), cap // STEP  # in units of STEP; `fits` holds at low (or low is 0)
    while fits(size * STEP):
        low = size
        if size == top:
            return size * STEP
        size = min(2 * size, top)
    high = size  # the first size that did not fit
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle * STEP):
            low = middle
        else:
            high = middle
    return low * STEP


def compare(trainer: Trainer, size: int, steps: int) -> list[dict[str, object]]:
    """p50 step time and peak device memory without and with swapping; the modes take turns step by step, so
    that the noise of a shared machine falls on both. The first step of each mode is a warm-up."""
    device = trainer.setup.device
    times: dict[bool, list[float]] = {False: [], True: []}
    peaks: dict[bool, int | None] = {False: None, True: None}
    summary = ""
    for k in range(steps + 1):
        for swap in (False, True):
            release(device)
            seconds, stats = trainer.step(size, swap)
            if k:
                times[swap].append(seconds)
            if device.type == "cuda":
                peaks[swap] = max(peaks[swap] or 0, torch.cuda.max_memory_allocated(device))
            if stats is not None:
                summary = stats.summary()
    rows = [
        {"size": size, "lms": swap, "p50_s": sorted(t)[len(t) // 2], "peak_mib": peaks[swap] and peaks[swap] >> 20}
        for swap, t in times.items()
    ]
    print(f"{size}px: {rows}; last step with lms: {summary}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (pinned-memory tier) or cpu (disk tier)")
    parser.add_argument("--tiny", action="store_true", help="smoke test: tiny sizes, two steps, no size search")
    parser.add_argument("--model", default="fcn_resnet50", help="a torchvision.models.segmentation builder")
    parser.add_argument("--classes", type=int, default=19)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--sizes", type=int, nargs=2, default=[600, 700], help="the two sizes timed both ways")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per size and mode")
    parser.add_argument("--search-from", type=int, default=512)
    parser.add_argument("--search-cap", type=int, default=8192)
    parser.add_argument("--min-bytes", type=int, default=1 << 20)
    parser.add_argument("--keep-last", type=int, default=2)
    parser.add_argument("--host-limit-gib", type=float, default=64.0, help="most pinned host memory to swap to")
    parser.add_argument("--spill-dir", type=Path, default=None, help="disk tier directory (default: temp)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: its default; 1 with --tiny)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.threads or args.tiny:
        torch.set_num_threads(args.threads or 1)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU here; use --device cpu --tiny for the smoke test")
    if args.tiny:
        args.batch, args.sizes, args.steps = min(args.batch, 2), [64, 96], 2
    lms: forklift.lms.Settings = {"min_bytes": args.min_bytes, "keep_last": args.keep_last}
    if device.type == "cuda":
        lms.update(tier="cuda", spill_limit=int(args.host_limit_gib * (1 << 30)))
    else:
        lms.update(tier="disk", spill_dir=args.spill_dir)
    trainer = Trainer(Setup(args.model, args.classes, device, args.batch, lms))

    rows = [row for size in args.sizes for row in compare(trainer, size, args.steps)]
    largest_sizes = {}
    if device.type == "cuda" and not args.tiny:
        for swap in (False, True):
            largest_sizes[swap] = largest(lambda s, swap=swap: trainer.fits(s, swap), args.search_from, args.search_cap)
            print(f"largest size at batch {args.batch}, lms={swap}: {largest_sizes[swap]} px", flush=True)

    machine = f"{platform.node()} {platform.machine()}, torch {torch.__version__}"
    if device.type == "cuda":
        machine += f", {torch.cuda.get_device_name(device)}"
    lines = [
        f"{args.model}, {args.classes} classes, batch {args.batch}, device {device} ({machine})",
        "",
        "| size | p50 without lms | p50 with lms | overhead | peak device MiB without / with |",
        "| --- | --- | --- | --- | --- |",
    ]
    for plain, swapped in zip(rows[::2], rows[1::2], strict=True):
        overhead = 100 * (swapped["p50_s"] / plain["p50_s"] - 1)
        lines.append(
            f"| {plain['size']}×{plain['size']} | {plain['p50_s']:.3f} s | {swapped['p50_s']:.3f} s | "
            f"{overhead:+.0f} % | {plain['peak_mib'] or 'n/a'} / {swapped['peak_mib'] or 'n/a'} |"
        )
    if largest_sizes:
        ratio = (largest_sizes[True] / largest_sizes[False]) ** 2 if largest_sizes[False] else float("inf")
        lines += [
            "",
            f"largest size at batch {args.batch}: {largest_sizes[False]} px without lms, {largest_sizes[True]} px "
            f"with lms ({ratio:.1f}× the pixels)",
        ]
    table = "\n".join(lines)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lms.md").write_text(table + "\n", encoding="utf-8")
    with open(args.out / "lms.csv", "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=["size", "lms", "p50_s", "peak_mib"])
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
