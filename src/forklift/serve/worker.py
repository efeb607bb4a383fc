"""A worker process: pinned to its CPU set, one model loaded, answering batches sent over a pipe.

It runs in its own process (spawned, so no state leaks from the server) because inference engines hold
the GIL or their own thread pools: one process per CPU set is what lets instances scale across cores.
"""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

import numpy as np

from forklift.model_files.tabular import TabularSettings
from forklift.runtime.tabular import RowsAnswer
from forklift.system.pinning import pin_process
from forklift.vision.results import Prediction
from forklift.vocabulary import ModelFormat, Precision, Runtime, Task

if TYPE_CHECKING:
    from forklift.model_files.model_dir import ModelDirectory
    from forklift.runtime.base import RequestOptions


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
    """Encoded images from one or more requests, all with the same request options (and answer encoding)."""

    images: list[tuple[str, bytes]]
    request: RequestOptions
    encoding: Encoding | None = None
    pixels: int = 0  # what the images' headers declare, together: a batch holds at most max_pixels of them


@dataclass(frozen=True)
class TensorJob:
    """A network input tensor (KServe v2): the raw network output is returned."""

    tensor: np.ndarray


@dataclass(frozen=True)
class RowsJob:
    """A tabular model's rows from one or more requests, encoded as its graph takes them (float32 [N, width])."""

    rows: np.ndarray


Job = ImagesJob | TensorJob | RowsJob
Answer = Prediction | np.ndarray | RowsAnswer  # an ImagesJob's, a TensorJob's (the raw network output), a RowsJob's


@dataclass(frozen=True)
class ServedModel:
    """What a worker says of its model once loaded: the server's protocols and /healthz answer from it."""

    runtime: Runtime
    precision: Precision
    task: Task
    labels: list[str]
    input_size: tuple[int, int] | None  # height, width of a network that takes tensors of one size, else None
    device: str
    pid: int
    tabular: TabularSettings | None = None  # a tabular model's features and classes: the server encodes its rows

    def to_json(self) -> dict:
        """For /healthz: everything but the labels and the pid (listed per worker); a tabular model's features."""
        size = None if self.input_size is None else list(self.input_size)
        features = {} if self.tabular is None else {"features": list(self.tabular.names)}
        return {"runtime": self.runtime, "precision": self.precision, "task": self.task, "input": size,
                "device": self.device, **features}  # fmt: skip


# What a worker sends back over its pipe: once Ready or LoadFailed, then for each job one of the others.
@dataclass(frozen=True)
class Ready:
    model: ServedModel


@dataclass(frozen=True)
class LoadFailed:
    message: str  # the model cannot be loaded: one line naming the file and the problem


@dataclass(frozen=True)
class Answered:
    answer: Answer


@dataclass(frozen=True)
class Refused:
    message: str  # the job's input is wrong (the caller's fault: 4xx)


@dataclass(frozen=True)
class Crashed:
    traceback: str  # the job raised something unexpected (a bug: 500); the worker goes on


WorkerReply = Answered | Refused | Crashed


def _pin(spec: WorkerSpec) -> None:
    """CPU affinity first (so every thread the engine starts inherits it), and threads = CPUs."""
    pin_process(spec.place.cpus, threads=spec.place.threads, node=spec.place.node)


def _encode_images(prediction: Prediction, encoding: Encoding) -> None:
    from forklift.vision.images import encode_image

    for result in prediction.results:
        if result.image is not None:
            result.encoded = encode_image(result.image, image_format=encoding.image_format, quality=encoding.quality)
            result.image = None


Answerer = Callable[[Job], Answer]  # a loaded model answering one job; ForkliftError: the job's input is wrong


def _load(spec: WorkerSpec) -> tuple[ServedModel, Answerer]:
    from forklift.model_files.model_dir import open_model_dir

    model = open_model_dir(spec.model_dir)
    if model.format == ModelFormat.TABULAR:
        return _load_tabular(spec, model)
    return _load_images(spec, model)


def _load_images(spec: WorkerSpec, model: ModelDirectory) -> tuple[ServedModel, Answerer]:
    """A model of images on the engine asked for: it answers images, and tensors where its input has one size."""
    from forklift.errors import ForkliftError
    from forklift.runtime.base import FixedInput, PredictOptions
    from forklift.runtime.load import load_predictor

    device = "cpu" if spec.place.gpu is None else f"cuda:{spec.place.gpu}"
    options = PredictOptions(
        threads=spec.place.threads, max_pixels=spec.max_pixels, spin=False, precision=spec.precision, device=device
    )
    predictor = load_predictor(model, spec.runtime, options)
    assert predictor.runtime is not None and predictor.options.precision is not None  # load_predictor sets both
    served = ServedModel(
        runtime=predictor.runtime,
        precision=predictor.options.precision,
        task=predictor.task,
        labels=model.labels,
        input_size=(predictor.input_height, predictor.input_width) if isinstance(predictor, FixedInput) else None,
        device=device,
        pid=os.getpid(),
    )

    def answer(job: Job) -> Answer:
        if isinstance(job, RowsJob):
            raise ForkliftError(f"a {model.format} model takes images, not rows of features")
        if isinstance(job, TensorJob):
            if not isinstance(predictor, FixedInput):
                raise ForkliftError(f"{model.format} models take images, not tensors")
            return np.stack(predictor.infer(list(job.tensor)))
        prediction = predictor.predict(job.images, job.request)
        if job.encoding is not None:
            _encode_images(prediction, job.encoding)
        return prediction

    return served, answer


def _load_tabular(spec: WorkerSpec, model: ModelDirectory) -> tuple[ServedModel, Answerer]:
    """A tabular model's graph on ONNX Runtime (on the CPU, in float32: what forklift.ml exports): it answers rows."""
    from forklift.errors import ForkliftError
    from forklift.runtime.tabular import TabularModel

    if spec.place.gpu is not None:
        raise ForkliftError(f"{model.path}: a tabular model runs on the CPU (ONNX Runtime), not GPU {spec.place.gpu}")
    if spec.runtime not in (None, Runtime.ONNX):
        raise ForkliftError(f"{model.path}: a tabular model runs with --runtime {Runtime.ONNX}, not {spec.runtime}")
    if spec.precision not in (None, Precision.F32):
        raise ForkliftError(f"{model.path}: a tabular model computes in {Precision.F32}, not {spec.precision}")
    tabular = TabularModel(model, threads=spec.place.threads)
    served = ServedModel(
        runtime=Runtime.ONNX,
        precision=Precision.F32,
        task=Task.TABULAR,
        labels=[str(c) for c in tabular.settings.classes],
        input_size=None,
        device="cpu",
        pid=os.getpid(),
        tabular=tabular.settings,
    )

    def answer(job: Job) -> Answer:
        if not isinstance(job, RowsJob):
            raise ForkliftError("a tabular model answers rows of features (JSON rows or v2 tensor 'X'), not images")
        return tabular.answer(job.rows)

    return served, answer


def serve_worker(spec: WorkerSpec, connection: Connection) -> None:
    """Entry point of the worker process: load, say Ready (with what it serves), then answer jobs.

    Ctrl-C (SIGINT to the terminal's whole process group) and a service manager's SIGTERM to every process
    are the server's to act on: it drains, and the requests in flight need their workers until it closes the
    pipe, which ends this loop.
    """
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    _pin(spec)
    from forklift.errors import ForkliftError

    try:
        served, answer = _load(spec)
    except ForkliftError as exc:
        connection.send(LoadFailed(str(exc)))
        return
    connection.send(Ready(served))
    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):
            return
        reply: WorkerReply
        try:
            reply = Answered(answer(job))
        except ForkliftError as exc:
            reply = Refused(str(exc))
        except Exception:  # a bug in one batch must not kill the worker; the server answers 500
            reply = Crashed(traceback.format_exc(limit=5))
        try:
            connection.send(reply)
        except OSError:  # the server stopped waiting (it closed the pipe)
            return
