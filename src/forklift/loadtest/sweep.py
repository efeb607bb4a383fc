"""`forklift sweep`: serve a model in each layout, load it at each concurrency, and recommend the best.

The original deployment was tuned by hand: 2 to 90 instances, 240 parallel requests, reading max and average inference
times. A sweep does that measurement in one command and keeps the answer: the layout (instances, threads, batch, and
precision where the model directory carries a checked INT8 or bf16) with the highest throughput whose p99 latency meets
the SLO (or the highest throughput when no SLO is given), saved for `forklift serve --instances auto` on this machine.
"""

from __future__ import annotations

import asyncio
import csv
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from forklift.loadtest.post import LoadResult, read_images, run_load
from forklift.model_files.model_dir import open_model_dir
from forklift.serve.process import ServerProcess
from forklift.serve.recommendation import Recommendation, save_recommendation
from forklift.system.topology import available_cpus
from forklift.vocabulary import Precision, Runtime

WARM_UP_REQUESTS = 8


@dataclass(frozen=True)
class Layout:
    instances: int
    threads: int
    max_batch: int
    precision: Precision = Precision.F32

    def __str__(self) -> str:
        return f"{self.instances}x{self.threads} threads, batch {self.max_batch}, {self.precision}"


@dataclass(frozen=True)
class SweepRow:
    instances: int
    threads: int
    max_batch: int
    concurrency: int
    throughput: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    precision: Precision = Precision.F32


def layouts(
    instances: list[int], threads: list[int], batches: list[int], precisions: list[Precision]
) -> tuple[list[Layout], list[Layout]]:
    """The layouts that fit this machine's CPUs (instances x threads), and those skipped."""
    cpus = available_cpus()
    every = [Layout(i, t, b, p) for p in precisions for i in instances for t in threads for b in batches]
    return [lay for lay in every if lay.instances * lay.threads <= cpus], [
        lay for lay in every if lay.instances * lay.threads > cpus
    ]


def _measure(url: str, images: list[tuple[str, bytes]], requests: int, concurrency: int) -> LoadResult:
    asyncio.run(run_load(url, images, WARM_UP_REQUESTS, concurrency))
    return asyncio.run(run_load(url, images, requests, concurrency))


def recommend(rows: list[SweepRow], slo_ms: float | None) -> SweepRow | None:
    """Highest throughput among error-free points within the SLO; ties go to the lower p99."""
    eligible = [r for r in rows if r.errors == 0 and (slo_ms is None or r.p99_ms <= slo_ms)]
    return max(eligible, key=lambda r: (r.throughput, -r.p99_ms), default=None)


def run_sweep(
    model_dir: Path,
    images: list[Path],
    candidates: list[Layout],
    *,
    concurrency: list[int],
    requests: int,
    runtime: Runtime | None,
) -> list[SweepRow]:
    model = open_model_dir(model_dir)
    data = read_images(images)
    rows: list[SweepRow] = []
    progress = tqdm(total=len(candidates) * len(concurrency), desc="sweep", unit="point", disable=None)
    for layout in candidates:
        args: list[str | Path] = [f"{model_dir}={model.name}", "--instances", str(layout.instances)]
        args += ["--threads", str(layout.threads), "--cpus-per-instance", str(layout.threads)]
        args += ["--max-batch", str(layout.max_batch), "--queue-size", str(max(64, 2 * max(concurrency)))]
        args += ["--precision", layout.precision]
        if runtime:
            args += ["--runtime", runtime]
        with ServerProcess(*args) as server:
            url = f"{server.url}/predict/{model.name}"
            for c in concurrency:
                progress.set_postfix_str(f"{layout}, {c} in flight")
                result = _measure(url, data, requests, c)
                rows.append(
                    SweepRow(
                        layout.instances,
                        layout.threads,
                        layout.max_batch,
                        c,
                        result.throughput,
                        result.p50_ms,
                        result.p90_ms,
                        result.p99_ms,
                        result.max_ms,
                        result.errors,
                        layout.precision,
                    )
                )
                progress.update()
    progress.close()
    return rows


def write_results(rows: list[SweepRow], out: Path) -> list[Path]:
    """sweep.csv, and PNG plots of throughput and p99 latency against concurrency, one line per layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    table = out / "sweep.csv"
    with table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    written = [table]
    for metric, label in (
        ("throughput", "requests / s"),
        ("p99_ms", "p99 latency (ms)"),
        ("p50_ms", "p50 latency (ms)"),
    ):
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for layout in sorted({(r.instances, r.threads, r.max_batch, r.precision) for r in rows}):
            points = [r for r in rows if (r.instances, r.threads, r.max_batch, r.precision) == layout]
            axes.plot(
                [p.concurrency for p in points],
                [getattr(p, metric) for p in points],
                marker="o",
                label=str(Layout(*layout)),
            )
        axes.set_xlabel("requests in flight")
        axes.set_ylabel(label)
        axes.set_xscale("log", base=2)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
        figure.tight_layout()
        path = out / f"sweep-{metric.removesuffix('_ms')}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def keep(model_dir: Path, best: SweepRow) -> Path:
    recommendation = Recommendation(
        best.instances,
        best.threads,
        best.max_batch,
        best.throughput,
        best.p50_ms,
        best.p99_ms,
        best.concurrency,
        best.precision,
    )
    return save_recommendation(model_dir, recommendation)
