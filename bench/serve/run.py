"""Serving benchmark: forklift serve against the in-process ceiling, the original design and LitServe.

yolov3-tiny at 416x416 (seeded random weights), the sample JPEGs of ../shared/data/images/ in turn:

  (a) ONNX Runtime in this process, forklift's predictor (decode + letterbox + infer + NMS), threads {1,2} x
      batch {1,2,4,8}: the best images/s is the ceiling; its "latency at concurrency c" is the time of one
      batch of c images at the best thread count;
  (b) `forklift serve` with its default engine for Darknet models (OpenVINO, float32): layouts (instances x
      threads x max-batch) measured at the highest concurrency, the fastest whose p99 <= 1.5 x p50 is chosen
      (the fastest of all when none is);
  (c) the original design: Flask + waitress, PyTorch eager, 2 one-thread instances behind NGINX (least_conn);
  (d) LitServe with ONNX Runtime through the same predictor.

(b), (c) and (d) run at the same time (idle while another is measured) and take turns per concurrency
point, with the same client (forklift.loadtest.post.run_load) and a short warm-up before each point. Writes
results.csv, results.json and serve.png to --out.

    .venv/bin/python bench/serve/run.py [--requests 240] [--concurrency 1,4,16] [--out bench/results/serve]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from forklift.deployment.serving import nginx_conf
from forklift.errors import ForkliftError
from forklift.loadtest.post import LoadResult, run_load
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.fresh_weights import new_darknet_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.runtime.onnx_export import export_darknet
from forklift.serve.process import free_port, wait_until_answering
from forklift.shared_data import shared_data_root
from forklift.system.placement import Instance, Plan

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SHARED = shared_data_root()
PACKAGES = ("forklift", "onnxruntime", "openvino", "torch", "numpy", "starlette", "uvicorn", "httpx",
            "python-multipart", "flask", "waitress", "litserve", "fastapi", "matplotlib")  # fmt: skip
IN_PROCESS_IMAGES = 96  # per (threads, batch) of (a)
LITSERVE = {"workers": 2, "threads": 1, "max-batch": 1, "batch-timeout-ms": 0, "api-servers": 1}
Images = list[tuple[str, bytes]]
Row = dict[str, Any]


# --- the client ------------------------------------------------------------------------------------------------


def load(url: str, images: Images, count: int, concurrency: int) -> LoadResult:
    """forklift's own load generator, each POST carrying the next photo in turn."""
    return asyncio.run(run_load(url, images, count, concurrency))


# --- servers ---------------------------------------------------------------------------------------------------


def busy_cpu() -> float:
    """CPU seconds the whole machine has been busy (all processes, ours and others')."""
    ticks = [int(t) for t in Path("/proc/stat").read_text().split()[1:9]]  # user nice system idle iowait irq ...
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def session_cpu(sessions: set[int]) -> dict[int, float]:
    """CPU seconds (user + system) of each live process in the given sessions, by pid."""
    ticks, cpu = os.sysconf("SC_CLK_TCK"), {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[3]) in sessions:
                cpu[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return cpu


@dataclass
class Server:
    """A system under test, its processes (each started in its own session) and where to send images."""

    system: str
    layout: str
    url: str
    processes: list[subprocess.Popen] = field(default_factory=list)
    front: set[int] = field(default_factory=set)  # pids whose CPU is reported apart (HTTP front, not inference)

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of (all its processes, its front processes)."""
        cpu = session_cpu({p.pid for p in self.processes})
        return sum(cpu.values()), sum(v for pid, v in cpu.items() if pid in self.front)


def start(command: list[str], health: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a process in its own session and wait until `health` answers 200."""
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, **(env or {})})  # fmt: skip
    try:
        wait_until_answering(health, process, log, timeout=300)
    except ForkliftError:
        stop(process)
        raise
    return process


def stop(process: subprocess.Popen) -> None:
    """SIGTERM the process (servers drain), then whatever is left of its session (children it did not stop)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=40)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not session_cpu({process.pid}):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        time.sleep(2)
    if process.poll() is None:
        process.wait()


@contextlib.contextmanager
def forklift_serve(model: Path, work: Path, instances: int, threads: int, max_batch: int) -> Iterator[Server]:
    port = free_port()
    command = [str(Path(sys.executable).with_name("forklift")), "serve", f"{model}=yolo", "--port", str(port),
               "--instances", str(instances), "--threads", str(threads), "--max-batch", str(max_batch)]  # fmt: skip
    process = start(command, f"http://127.0.0.1:{port}/healthz", work / f"forklift-{port}.log")
    layout = f"{instances} instances x {threads} threads, max-batch {max_batch}"
    try:
        yield Server("b", layout, f"http://127.0.0.1:{port}/predict/yolo", [process], {process.pid})
    finally:
        stop(process)


@contextlib.contextmanager
def flask_nginx(model: Path, work: Path, instances: int = 2) -> Iterator[Server]:
    ports, processes = [free_port() for _ in range(instances)], []
    try:
        for port in ports:
            command = [sys.executable, str(HERE / "flask_app.py"), str(model), "--port", str(port)]
            log = work / f"flask-{port}.log"
            processes.append(start(command, f"http://127.0.0.1:{port}/healthz", log, {"OMP_NUM_THREADS": "1"}))
        prefix = work / "nginx"
        prefix.mkdir(mode=0o755)
        port = free_port()
        upstream = Plan(tuple(Instance(i, p, 0, (), 1) for i, p in enumerate(ports)), 1, (), "flask instances")
        (prefix / "nginx.conf").write_text(nginx_conf(upstream, listen=port, runtime_dir=prefix))
        command = ["nginx", "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", str(prefix / "error.log"),
                   "-g", "daemon off;"]  # fmt: skip
        nginx = start(command, f"http://127.0.0.1:{port}/healthz", prefix / "stdout.log")
        processes.append(nginx)
        layout = f"NGINX least_conn -> {instances} x (Flask + waitress threads=1, PyTorch eager 1 thread)"
        yield Server("c", layout, f"http://127.0.0.1:{port}/predict/yolo", processes, set(session_cpu({nginx.pid})))
    finally:
        for process in reversed(processes):
            stop(process)


@contextlib.contextmanager
def litserve(model: Path, work: Path) -> Iterator[Server]:
    port = free_port()
    options = [str(v) for k, v in LITSERVE.items() for v in (f"--{k}", v)]
    command = [sys.executable, str(HERE / "litserve_app.py"), str(model), "--port", str(port), *options]
    process = start(command, f"http://127.0.0.1:{port}/health", work / f"litserve-{port}.log")
    layout = ", ".join(f"{k} {v}" for k, v in LITSERVE.items())
    try:
        yield Server("d", f"LitServe: {layout}", f"http://127.0.0.1:{port}/predict", [process])
    finally:
        stop(process)


def measure(server: Server, images: Images, concurrency: list[int], requests: int, phase: str) -> list[Row]:
    """Throughput, latency and CPU of a running server at each concurrency point, after a short warm-up."""
    rows = []
    for c in concurrency:
        load(server.url, images, max(8, 2 * c), c)
        (server_before, front_before), client_before, busy_before = server.cpu(), time.process_time(), busy_cpu()
        result = load(server.url, images, requests, c)
        client, busy = time.process_time() - client_before, busy_cpu() - busy_before
        server_after, front_after = server.cpu()
        server_cpu, front_cpu = server_after - server_before, front_after - front_before
        row = {"phase": phase, "system": server.system, "layout": server.layout, **result.to_json()}
        row.pop("url")
        row.update(
            p99_over_p50=round(result.p99_ms / result.p50_ms, 2) if result.p50_ms else None,
            server_cpu_ms=round(1000 * server_cpu / requests, 1),
            front_cpu_ms=round(1000 * front_cpu / requests, 1) if server.front else None,
            client_cpu_ms=round(1000 * client / requests, 1),
            other_cpus=round(max(0.0, busy - server_cpu - client) / result.seconds, 2),  # others' load, in cores
        )
        rows.append(row)
        print(row_line(row), flush=True)
    return rows


# --- (a) in process --------------------------------------------------------------------------------------------


def in_process(model: Path, images: Images, concurrency: list[int], requests: int) -> tuple[list[Row], list[Row]]:
    """(a): images/s per (threads, batch), then batch-of-c timings at the best thread count."""
    directory, grid = open_model_dir(model), []
    photos = itertools.cycle(images)
    for threads in (1, 2):
        predictor = load_predictor(directory, "onnx", PredictOptions(threads=threads))
        for batch in (1, 2, 4, 8):
            for _ in range(2):
                predictor.predict([next(photos) for _ in range(batch)])
            start = time.perf_counter()
            for _ in range(IN_PROCESS_IMAGES // batch):
                predictor.predict([next(photos) for _ in range(batch)])
            seconds = time.perf_counter() - start
            row = {"phase": "ceiling", "system": "a", "layout": f"{threads} threads, batch {batch}",
                   "requests": IN_PROCESS_IMAGES, "ok": IN_PROCESS_IMAGES, "errors": 0, "seconds": round(seconds, 3),
                   "throughput": round(IN_PROCESS_IMAGES / seconds, 2)}  # fmt: skip
            grid.append(row)
            print(row_line(row), flush=True)
    best = max(grid, key=lambda r: r["throughput"])
    threads = int(best["layout"].split()[0])
    predictor = load_predictor(directory, "onnx", PredictOptions(threads=threads))
    rows = []
    for c in concurrency:
        batches = [[next(photos) for _ in range(c)] for _ in range(max(8, requests // c) + 2)]
        times = []
        for batch in batches:
            start = time.perf_counter()
            predictor.predict(batch)
            times.append(time.perf_counter() - start)
        times = times[2:]  # warm-up
        ms = np.asarray(times) * 1000
        p50, p90, p99 = (round(float(v), 2) for v in np.percentile(ms, [50, 90, 99]))
        row = {"phase": "compare", "system": "a", "layout": f"{threads} threads, one batch of c images",
               "concurrency": c, "requests": c * len(times), "ok": c * len(times), "errors": 0,
               "seconds": round(sum(times), 3), "p50_ms": p50, "p90_ms": p90, "p99_ms": p99,
               "max_ms": round(float(ms.max()), 2), "mean_ms": round(float(ms.mean()), 2),
               "throughput": round(c * len(times) / sum(times), 2), "p99_over_p50": round(p99 / p50, 2)}  # fmt: skip
        rows.append(row)
        print(row_line(row), flush=True)
    return grid, rows


# --- (b) layout ------------------------------------------------------------------------------------------------


def choose_layout(model: Path, work: Path, images: Images, c: int, requests: int) -> tuple[tuple[int, ...], list[Row]]:
    """Each layout that fits the CPUs, at concurrency c; the fastest with p99 <= 1.5 x p50, else the fastest."""
    cpus = len(os.sched_getaffinity(0))
    layouts = [(i, t, b) for i in (1, 2) for t in (1, 2) for b in (1, 4, 8) if i * t <= cpus]
    rows = []
    for layout in layouts:
        with forklift_serve(model, work, *layout) as server:
            (row,) = measure(server, images, [c], requests, "layouts")
        rows.append({**row, "instances": layout[0], "threads": layout[1], "max_batch": layout[2]})
    steady = [r for r in rows if r["errors"] == 0 and r["p99_ms"] <= 1.5 * r["p50_ms"]]
    best = max(steady or rows, key=lambda r: r["throughput"])
    return (best["instances"], best["threads"], best["max_batch"]), rows


# --- report ----------------------------------------------------------------------------------------------------

NAMES = {"a": "(a) ONNX Runtime in process", "b": "(b) forklift serve", "c": "(c) NGINX + Flask + torch",
         "d": "(d) LitServe + ONNX Runtime"}  # fmt: skip


def row_line(row: Row) -> str:
    if "concurrency" not in row:
        return f"{NAMES[row['system']]:<30} {row['layout']:<44} {row['throughput']:7.1f} images/s"
    line = (
        f"{NAMES[row['system']]:<30} c={row['concurrency']:<3} {row['throughput']:7.1f} req/s  p50 {row['p50_ms']:7.1f}"
        f"  p90 {row['p90_ms']:7.1f}  p99 {row['p99_ms']:7.1f} ms  p99/p50 {row['p99_over_p50']:.2f}  "
        f"errors {row['errors']}"
    )
    if "server_cpu_ms" in row:
        line += f"  server CPU {row['server_cpu_ms']} ms/req  others {row['other_cpus']} CPUs"
    return line


def ratios(ceiling: float, compare: list[Row]) -> dict[str, Any]:
    by = {(r["system"], r["concurrency"]): r for r in compare}
    points = sorted({r["concurrency"] for r in compare})
    top = points[-1]
    b = by["b", top]
    out: dict[str, Any] = {
        "concurrency": top,
        "b_over_a": round(b["throughput"] / ceiling, 2),
        "b_over_c": round(b["throughput"] / by["c", top]["throughput"], 2),
        "b_over_d": round(b["throughput"] / by["d", top]["throughput"], 2),
        "b_p99_over_p50": {c: by["b", c]["p99_over_p50"] for c in points},
    }
    out["goals"] = {
        "b >= 0.9 a": out["b_over_a"] >= 0.9,
        "b >= 2 c": out["b_over_c"] >= 2,
        "b ahead of d": out["b_over_d"] > 1,
        "b p99 <= 1.5 p50 (every point)": all(v <= 1.5 for v in out["b_p99_over_p50"].values()),
    }
    out["per_point"] = {
        c: {f"b_over_{s}": round(by["b", c]["throughput"] / by[s, c]["throughput"], 2) for s in "acd"} for c in points
    }
    return out


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    versions = {}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return {"cores": len(os.sched_getaffinity(0)), "cpu": cpu, "machine": platform.machine(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version(), "nginx": nginx, "packages": versions}  # fmt: skip


def plot(compare: list[Row], ceiling: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for system in "abcd":
        rows = sorted((r for r in compare if r["system"] == system), key=lambda r: r["concurrency"])
        x = [r["concurrency"] for r in rows]
        style = {"linestyle": ":"} if system == "a" else {}
        left.plot(x, [r["throughput"] for r in rows], marker="o", label=NAMES[system], **style)
        right.plot(x, [r["p99_ms"] for r in rows], marker="o", label=NAMES[system], **style)
    left.axhline(ceiling, color="gray", linestyle="--", linewidth=1, label="(a) ceiling (best threads x batch)")
    left.set(xscale="log", ylabel="images/s", xlabel="concurrency", title="Throughput", ylim=(0, None))
    right.set(xscale="log", yscale="log", ylabel="p99 latency, ms", xlabel="concurrency", title="p99 latency")
    right.yaxis.set_major_formatter(ScalarFormatter())
    right.yaxis.set_minor_formatter(ScalarFormatter())
    points = sorted({r["concurrency"] for r in compare})
    for axis in (left, right):
        axis.set_xticks(points, [str(p) for p in points])
        axis.grid(alpha=0.3)
    left.legend(fontsize=8)
    figure.suptitle("yolov3-tiny 416, sample JPEGs in turn; (a) latency = one batch of c images", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def write(out: Path, rows: list[Row], summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r if k != "error_codes"))
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore", restval="")
        writer.writeheader()
        writer.writerows(rows)
    (out / "results.json").write_text(json.dumps({**summary, "rows": rows}, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=240, help="requests per measured point")
    parser.add_argument("--concurrency", default="1,4,16", help="requests in flight, comma-separated")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "serve")
    args = parser.parse_args()
    concurrency = sorted(int(c) for c in args.concurrency.split(","))
    images = [(p.name, p.read_bytes()) for p in sorted((SHARED / "images").glob("*.jpg"))]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="forklift-bench-serve-") as temp:
        work = Path(temp)
        model = new_darknet_dir(SHARED / "darknet" / "yolov3-tiny.cfg", SHARED / "darknet" / "coco.names",
                                work / "yolov3-tiny", seed=1)  # fmt: skip
        export_darknet(open_model_dir(model), model / "yolov3-tiny.onnx")
        grid, compare = in_process(model, images, concurrency, args.requests)
        ceiling = max(r["throughput"] for r in grid)
        layout, searched = choose_layout(model, work, images, concurrency[-1], args.requests)
        print(f"(b) layout: {layout[0]} instances x {layout[1]} threads, max-batch {layout[2]}", flush=True)
        with contextlib.ExitStack() as stack:
            systems = (forklift_serve(model, work, *layout), flask_nginx(model, work), litserve(model, work))
            servers = [stack.enter_context(system) for system in systems]
            for turn, c in enumerate(concurrency):  # the systems take turns; who starts rotates
                for server in servers[turn % 3 :] + servers[: turn % 3]:
                    compare += measure(server, images, [c], args.requests, "compare")
    compare.sort(key=lambda r: (r["system"], r["concurrency"]))
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "model": "yolov3-tiny 416x416, seeded random weights (seed 1)",
        "images": [name for name, _ in images],
        "requests_per_point": args.requests,
        "ceiling_images_per_s": ceiling,
        "b_layout": {"instances": layout[0], "threads": layout[1], "max_batch": layout[2]},
        "ratios": ratios(ceiling, compare),
        "seconds": round(time.monotonic() - started, 1),
    }
    write(args.out, grid + searched + compare, summary)
    plot(compare, ceiling, args.out / "serve.png")
    print("\n" + "\n".join(row_line(r) for r in compare))
    print(json.dumps(summary["ratios"], indent=2))
    print(f"took {summary['seconds']:.0f} s; wrote {args.out}/results.csv, results.json, serve.png")


if __name__ == "__main__":
    main()
