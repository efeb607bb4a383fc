"""`forklift serve`: build the worker pools for each model from a placement, then run the HTTP server.

SIGTERM or Ctrl-C stops accepting connections, lets in-flight requests finish (up to the drain timeout),
then stops the workers.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

import uvicorn

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.serve.app import build_app
from forklift.serve.config import ServeOptions
from forklift.serve.http_protocol import http_config
from forklift.serve.metrics import Metrics
from forklift.serve.pool import ModelPool
from forklift.serve.state import ServeState
from forklift.serve.worker import WorkerPlace, WorkerSpec
from forklift.vocabulary import Precision, Runtime


@dataclass(frozen=True)
class ServedModel:
    """One `MODEL_DIR[=NAME]` argument and where each of its workers runs."""

    name: str
    model_dir: str
    runtime: Runtime | None
    places: list[WorkerPlace]
    precision: Precision | None = None  # None: the model's own (forklift.json), else f32


def parse_model_argument(text: str) -> tuple[str, str]:
    """`models/yolov3=yolo` -> (directory, name); the name defaults to the directory's name."""
    directory, _, name = text.partition("=")
    model = open_model_dir(directory)
    name = name or model.name
    if "/" in name or name in (".", ".."):  # no URL reaches it: /predict/{name} is one path segment
        raise ForkliftError(f"{text}: the model name {name!r} is not one URL path segment; name it with DIR=NAME")
    return directory, name


def check_names(names: list[str]) -> None:
    """Each served model answers under its own name: two alike are refused (before anything starts)."""
    if len(set(names)) != len(names):
        raise ForkliftError(f"two served models have the same name ({', '.join(names)}); name them with DIR=NAME")


def build_state(models: list[ServedModel], options: ServeOptions) -> ServeState:
    metrics = Metrics()
    check_names([m.name for m in models])
    pools = {}
    for model in models:
        specs = [
            WorkerSpec(model.model_dir, model.runtime, place, options.max_pixels, model.precision)
            for place in model.places
        ]
        pools[model.name] = ModelPool(
            model.name,
            specs,
            metrics,
            max_batch=options.max_batch,
            batch_timeout_s=options.batch_timeout_ms / 1000.0,
            queue_size=options.queue_size,
            max_pixels=options.max_pixels,
        )
    return ServeState(pools, options, metrics)


class DrainingServer(uvicorn.Server):
    """Uvicorn's server, but a drained stop after SIGTERM exits 0 rather than dying by the signal."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


def serve(
    models: list[ServedModel],
    options: ServeOptions,
    *,
    listening: list[socket.socket],
    ready: Callable[[], None] = lambda: None,
) -> None:
    """Serve `models` on `listening` (bound to options.host and options.port: see forklift.serve.listening);
    `ready` is called once every worker has loaded its model. A model that cannot load (a precision its runtime
    lacks, a model never quantised) stops the server and is raised here, as the ForkliftError it is."""
    failed: list[ForkliftError] = []

    def started(error: ForkliftError | None) -> None:
        if error is None:
            ready()
        else:
            failed.append(error)
            server.should_exit = True

    app = build_app(build_state(models, options), started=started)
    config = http_config(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        timeout_graceful_shutdown=int(options.drain_timeout_s),
        limit_concurrency=None,
        backlog=2048,
    )
    server = DrainingServer(config)
    server.run(sockets=listening)
    if failed:
        raise failed[0]
