"""A worker process: pinned to its CPU set, one model loaded, answering batches sent over a pipe.

It runs in its own process (spawned, so no state leaks from the server) because inference engines hold
the GIL or their own thread pools: one process per CPU set is what lets instances scale across cores.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection

import numpy as np

from forklift.system.pinning import pin_process
from forklift.vision.results import Prediction
from forklift.vision.style_adjust import StyleAdjust
from forklift.vocabulary import Precision, Runtime


@dataclass(frozen=True)
class WorkerPlace:
    """Where one worker runs: its CPUs (empty: not pinned), the memory node to bind (None: leave it to the
    kernel, as on a single-node machine) and its thread count."""

    cpus: tuple[int, ...]
    node: int | None
    threads: int
    gpu: int | None = None  # the CUDA device its model runs on (torch engine), else the CPU


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to start: the model, its engine, where and how wide it runs, its image-size limit."""

    model_dir: str
    runtime: Runtime | None
    place: WorkerPlace
    max_pixels: int
    precision: Precision | None = None


@dataclass(frozen=True)
class Encoding:
    """How a worker encodes an image-to-image model's answers: encoding in the worker keeps it off the server's
    event loop, and the pipe carries a few kilobytes instead of the raw image."""

    image_format: str = "jpeg"  # a key of forklift.vision.images.IMAGE_FORMATS
    quality: int = 90


@dataclass(frozen=True)
class ImagesJob:
    """Encoded images from one or more requests, all with the same score threshold (and answer encoding)."""

    images: list[tuple[str, bytes]]
    conf: float | None
    encoding: Encoding | None = None
    style: StyleAdjust | None = None  # image-to-image models: None is the model's full answer


@dataclass(frozen=True)
class TensorJob:
    """A network input tensor (KServe v2): the raw network output is returned."""

    tensor: np.ndarray


def _pin(spec: WorkerSpec) -> None:
    """CPU affinity first (so every thread the engine starts inherits it), and threads = CPUs."""
    pin_process(spec.place.cpus, threads=spec.place.threads, node=spec.place.node)


def _encode_images(prediction: Prediction, encoding: Encoding) -> None:
    from forklift.vision.images import encode_image

    for result in prediction.results:
        if result.image is not None:
            result.encoded = encode_image(result.image, image_format=encoding.image_format, quality=encoding.quality)
            result.image = None


def serve_worker(spec: WorkerSpec, connection: Connection) -> None:
    """Entry point of the worker process: load, say ready (with the model's facts), then answer jobs."""
    _pin(spec)
    from forklift.errors import ForkliftError
    from forklift.model_files.model_dir import open_model_dir
    from forklift.runtime.base import FixedInput, PredictOptions
    from forklift.runtime.load import load_predictor

    try:
        model = open_model_dir(spec.model_dir)
        device = "cpu" if spec.place.gpu is None else f"cuda:{spec.place.gpu}"
        options = PredictOptions(
            threads=spec.place.threads, max_pixels=spec.max_pixels, spin=False, precision=spec.precision, device=device
        )
        predictor = load_predictor(model, spec.runtime, options)
    except ForkliftError as exc:
        connection.send(("failed", str(exc)))
        return
    default_conf = predictor.conf
    facts = {
        "runtime": predictor.runtime,
        "precision": predictor.options.precision,
        "task": predictor.task,
        "labels": model.labels,
        "input": [predictor.input_height, predictor.input_width] if isinstance(predictor, FixedInput) else None,
        "device": device,
        "pid": os.getpid(),
    }
    connection.send(("ready", facts))
    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):
            return
        try:
            if isinstance(job, TensorJob):
                if not isinstance(predictor, FixedInput):
                    raise ForkliftError(f"{model.format} models take images, not tensors")
                outputs = predictor.infer(list(job.tensor))
                connection.send(("ok", np.stack(outputs)))
                continue
            predictor.conf = default_conf if job.conf is None else job.conf
            predictor.options = replace(predictor.options, style=job.style or StyleAdjust())
            prediction = predictor.predict(job.images)
            if job.encoding is not None:
                _encode_images(prediction, job.encoding)
            connection.send(("ok", prediction))
        except ForkliftError as exc:
            connection.send(("error", str(exc)))
        except Exception:  # a bug in one batch must not kill the worker; the server answers 500
            connection.send(("crash", traceback.format_exc(limit=5)))
