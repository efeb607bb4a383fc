"""Saved sweep recommendations: the best layout measured for a model on a machine, for `serve --instances auto`.

Keyed by the model's files (names, sizes, modification times) and by the machine (host name and the CPUs
this process may use), so a recommendation is only reused where it was measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from forklift.atomic import write_text_atomically
from forklift.runtime.onnx_export import cache_dir
from forklift.vocabulary import Precision


@dataclass(frozen=True)
class Recommendation:
    instances: int
    threads: int
    max_batch: int
    throughput: float
    p50_ms: float
    p99_ms: float
    concurrency: int
    precision: Precision = Precision.F32


def store_path() -> Path:
    return cache_dir().parent / "recommendations.json"


def model_key(model_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.iterdir() if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def machine_key() -> str:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [os.cpu_count()]
    return f"{socket.gethostname()}:{','.join(map(str, cpus))}"


def _load() -> dict:
    try:
        return json.loads(store_path().read_text())
    except (OSError, ValueError):
        return {}


def save_recommendation(model_dir: Path, recommendation: Recommendation) -> Path:
    store = _load()
    store[f"{machine_key()}|{model_key(model_dir)}"] = {"model": str(model_dir.resolve()), **asdict(recommendation)}
    return write_text_atomically(store_path(), json.dumps(store, indent=2) + "\n")


def load_recommendation(model_dir: Path) -> Recommendation | None:
    entry = _load().get(f"{machine_key()}|{model_key(model_dir)}")
    if entry is None:
        return None
    entry.pop("model", None)
    entry["precision"] = Precision(entry.get("precision", Precision.F32))  # saved before sweeps tried precisions
    return Recommendation(**entry)
