"""Serving a forest: rows/s and latency through `forklift serve` (JSON rows on /predict, KServe v2 binary tensors)
against ONNX Runtime on the same graph in this process, at batch 1 and 64 rows a request.

A RandomForestClassifier (50 trees of depth 8) is fitted on the dense generated set and written as a tabular model
directory. In process, `TabularModel.answer` runs the graph on encoded rows (the ceiling: no HTTP, no JSON). Through
the server, ``--clients`` concurrent clients (httpx, one connection each) post JSON rows, then v2 binary tensors, for
``--seconds`` per point (the bodies are encoded before the clock starts: the clients share the machine with the
server, and their own encoding is not the server's cost); the server reads them, batches the callers' rows and
answers. Both use the same threads (``--threads``: one instance of that many threads for the server).

    .venv/bin/python bench/ml/serve_forest.py [--threads 2] [--clients 8] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from forklift.serve.process import free_port, wait_until_answering

BATCHES = (1, 64)
BODIES = 64  # distinct request bodies, JSON-encoded before the clock starts, sent in turn


def percentiles(seconds: list[float]) -> str:
    p50, p90, p99 = (1000 * float(np.percentile(seconds, q)) for q in (50, 90, 99))
    return f"{p50:.2f} / {p90:.2f} / {p99:.2f} ms"


def fitted_forest(folder: Path, rows: int) -> tuple[Path, np.ndarray]:
    from forklift.ml import RandomForestClassifier
    from forklift.ml.datasets import make_dense_classification
    from forklift.ml.model_directory import write_directory
    from forklift.model_files.tabular import Feature, TabularSettings

    X, y = make_dense_classification(n_samples=rows)
    model = RandomForestClassifier(n_estimators=50, max_depth=8, n_jobs=2, random_state=0).fit(X, y)
    settings = TabularSettings(
        estimator="RandomForestClassifier",
        features=tuple(Feature(f"f{i}") for i in range(X.shape[1])),
        classes=(0, 1),
        probabilities=True,
        missing_values=True,
        target="y",
    )
    write_directory(model, settings, folder / "forest")
    return folder / "forest", X.astype(np.float32)


def in_process(directory: Path, X: np.ndarray, batch: int, seconds: float, threads: int) -> tuple[float, list[float]]:
    from forklift.model_files.model_dir import open_model_dir
    from forklift.runtime.tabular import TabularModel

    model = TabularModel(open_model_dir(directory), threads=threads)
    times, done, start = [], 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        rows = X[done % (len(X) - batch) :][:batch]
        began = time.perf_counter()
        model.answer(rows)
        times.append(time.perf_counter() - began)
        done += batch
    return done / (time.perf_counter() - start), times


def json_rows(X: np.ndarray, batch: int) -> list[tuple[bytes, dict[str, str]]]:
    """forklift's own protocol: ``{"rows": [[...], ...]}``."""
    return [
        (json.dumps({"rows": X[k * batch :][:batch].tolist()}).encode(), {"content-type": "application/json"})
        for k in range(BODIES)
    ]


def v2_binary(X: np.ndarray, batch: int) -> list[tuple[bytes, dict[str, str]]]:
    """KServe v2 with the binary tensor extension (as tritonclient sends it): a JSON header, then the rows' float32
    bytes; the probabilities asked for as binary too."""
    bodies = []
    for k in range(BODIES):
        data = np.ascontiguousarray(X[k * batch :][:batch], dtype=np.float32).tobytes()
        header = json.dumps({
            "inputs": [{"name": "X", "shape": [batch, X.shape[1]], "datatype": "FP32",
                        "parameters": {"binary_data_size": len(data)}}],
            "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}],
        }).encode()  # fmt: skip
        length = {"Inference-Header-Content-Length": str(len(header)), "content-type": "application/octet-stream"}
        bodies.append((header + data, length))
    return bodies


async def through_server(
    url: str, bodies: list[tuple[bytes, dict[str, str]]], batch: int, seconds: float, clients: int
) -> tuple[float, list[float]]:
    times: list[float] = []
    rows_done = 0
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        nonlocal rows_done
        async with httpx.AsyncClient(timeout=30) as http:
            request = index
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                content, headers = bodies[request % BODIES]
                response = await http.post(url, content=content, headers=headers)
                response.raise_for_status()
                times.append(time.perf_counter() - began)
                rows_done += batch
                request += clients

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return rows_done / (time.perf_counter() - start), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rows", type=int, default=50_000, help="rows the forest is fitted on")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        directory, X = fitted_forest(Path(folder), args.rows)
        port = free_port()
        command = [str(Path(sys.executable).with_name("forklift")), "serve", f"{directory}=forest", "--port",
                   str(port), "--instances", "1", "--threads", str(args.threads), "--max-batch", "256"]  # fmt: skip
        log = Path(folder) / "serve.log"
        with log.open("wb") as out:
            server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until_answering(f"http://127.0.0.1:{port}/healthz", server, log)
            base = f"http://127.0.0.1:{port}"
            protocols = {
                "JSON rows": (f"{base}/predict/forest", json_rows),
                "v2 binary": (f"{base}/v2/models/forest/infer", v2_binary),
            }
            for batch in BATCHES:
                rate, times = in_process(directory, X, batch, args.seconds, args.threads)
                print(f"batch {batch:>3} | ONNX Runtime in process: {rate:,.0f} rows/s, {percentiles(times)}")
                for protocol, (url, encode) in protocols.items():
                    bodies = encode(X, batch)
                    served, served_times = asyncio.run(through_server(url, bodies, batch, args.seconds, args.clients))
                    print(
                        f"batch {batch:>3} | forklift serve, {protocol}, {args.clients} clients: {served:,.0f} rows/s "
                        f"({served / rate:.2f}x in process), {percentiles(served_times)} a request",
                        flush=True,
                    )
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
