"""What forklift's HTTP/1.1 protocol costs: h11 with bounded heads and deadlines (forklift.serve.http_protocol, both
servers' since issue 36) against uvicorn's default parser, httptools, side by side in one run.

The same app under each: `POST /upload` reads a multipart upload the way `forklift serve` does
(forklift.serve.uploads.read_images) and answers a small JSON, no inference, so that the protocol's share is what
is measured. The client is forklift's load generator (`forklift post`'s run_load) sending dog.jpg (160 KB) from
../shared/data/images; the two servers take turns for `--rounds` rounds. Per round and server: requests/s,
p50/p90/p99 latency, and the server process's CPU per request (from /proc). Writes results.json to --out.

    .venv/bin/python bench/serve/http_protocol.py [--requests 2000] [--concurrency 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from forklift.loadtest.post import run_load
from forklift.serve.process import free_port, wait_until_answering
from forklift.shared_data import shared_data_root

SERVER = """
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from forklift.serve.http_protocol import http_config
from forklift.serve.uploads import read_images

async def upload(request):
    images, _ = await read_images(request, 20 * 2**20)
    return JSONResponse({"bytes": sum(len(data) for _, data in images)})

async def ready(request):
    return JSONResponse({"ready": True})

app = Starlette(routes=[Route("/upload", upload, methods=["POST"]), Route("/", ready)])
port, protocol = int(sys.argv[1]), sys.argv[2]
if protocol == "h11-forklift":
    config = http_config(app, host="127.0.0.1", port=port, log_level="warning")
else:
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http="httptools", log_level="warning")
uvicorn.Server(config).run()
"""
PROTOCOLS = ("h11-forklift", "httptools")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/http_protocol"))
    args = parser.parse_args()
    image = ("dog.jpg", (shared_data_root() / "images" / "dog.jpg").read_bytes())
    args.out.mkdir(parents=True, exist_ok=True)
    servers = {}
    for protocol in PROTOCOLS:
        port, log = free_port(), args.out / f"{protocol}.log"
        with log.open("wb") as written:
            process = subprocess.Popen([sys.executable, "-c", SERVER, str(port), protocol], stdout=written,
                                       stderr=subprocess.STDOUT)  # fmt: skip
        servers[protocol] = (port, process)
        wait_until_answering(f"http://127.0.0.1:{port}/", process, log, timeout=30)
    rows = []
    try:
        for round_number in range(args.rounds):
            order = PROTOCOLS if round_number % 2 == 0 else PROTOCOLS[::-1]
            for protocol in order:
                port, process = servers[protocol]
                url = f"http://127.0.0.1:{port}/upload"
                asyncio.run(run_load(url, [image], 200, args.concurrency))  # warm-up
                cpu = _cpu_seconds(process.pid)
                started = time.perf_counter()
                result = asyncio.run(run_load(url, [image], args.requests, args.concurrency))
                wall = time.perf_counter() - started
                cpu_ms = (_cpu_seconds(process.pid) - cpu) * 1000 / args.requests
                rows.append({"round": round_number, "protocol": protocol, "errors": result.errors,
                             "requests_per_s": args.requests / wall, "p50_ms": result.p50_ms,
                             "p90_ms": result.p90_ms, "p99_ms": result.p99_ms, "server_cpu_ms": cpu_ms})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    finally:
        for _, process in servers.values():
            process.terminate()
            process.wait()
    summary = {
        protocol: {key: statistics.median(r[key] for r in rows if r["protocol"] == protocol)
                   for key in ("requests_per_s", "p50_ms", "p90_ms", "p99_ms", "server_cpu_ms")}
        for protocol in PROTOCOLS
    }  # fmt: skip
    ratio = summary["h11-forklift"]["server_cpu_ms"] / summary["httptools"]["server_cpu_ms"]
    (args.out / "results.json").write_text(json.dumps({"rows": rows, "median": summary, "cpu_ratio": ratio}, indent=1))
    for protocol, figures in summary.items():
        print(protocol, {key: round(value, 2) for key, value in figures.items()})
    print(f"server CPU per request, h11-forklift / httptools: x{ratio:.2f}")


if __name__ == "__main__":
    main()
