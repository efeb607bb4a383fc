"""A model's pool of pinned worker processes, fed from one bounded queue with dynamic batching.

Each worker has an asyncio task that takes the next request from the model's queue, adds whatever else is
waiting (up to `max_batch` images, or a tabular model's rows, waiting at most `batch_timeout`), and sends the
batch to its process.
A full queue refuses at once (the server answers 503 with Retry-After) instead of piling up; a crashed
worker fails its batch's requests with an error and is started again.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from forklift.errors import ForkliftError
from forklift.runtime.tabular import RowsAnswer
from forklift.serve.metrics import Metrics
from forklift.serve.worker import (
    Answer,
    Answered,
    Crashed,
    ImagesJob,
    Job,
    LoadFailed,
    Ready,
    Refused,
    RowsJob,
    ServedModel,
    TensorJob,
    WorkerReply,
    WorkerSpec,
    serve_worker,
)
from forklift.vision.results import Prediction

START_TIMEOUT_S = 300.0
log = logging.getLogger("forklift.serve")


class QueueFull(Exception):
    """The model's queue is at its bound: the caller should retry later."""


class WorkerCrashed(Exception):
    """The worker process died while answering; it is being restarted."""


class WorkerFailed(Exception):
    """The batch raised inside the worker (a bug, not bad input)."""


@dataclass
class Request:
    """One caller's job, waiting for its share of a batch's answer."""

    job: Job
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)

    @property
    def items(self) -> int:
        """What the request adds to a batch: its images, tensors or rows."""
        job = self.job
        if isinstance(job, ImagesJob):
            return len(job.images)
        return len(job.tensor if isinstance(job, TensorJob) else job.rows)


class Worker:
    """One process and the pipe to it; calls are blocking and run in the worker's own thread."""

    def __init__(self, spec: WorkerSpec, index: int) -> None:
        self.spec = spec
        self.index = index
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"worker-{index}")
        self.process: multiprocessing.process.BaseProcess | None = None
        self.connection: Connection | None = None
        self.served: ServedModel | None = None

    def start(self) -> ServedModel:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        self.process = context.Process(target=serve_worker, args=(self.spec, theirs), daemon=True)
        self.process.start()
        theirs.close()
        self.connection = ours
        if not ours.poll(START_TIMEOUT_S):
            self.stop()
            raise ForkliftError(f"{self.spec.model_dir}: worker {self.index} did not start in {START_TIMEOUT_S:.0f} s")
        try:
            said: Ready | LoadFailed = ours.recv()
        except EOFError as exc:
            raise ForkliftError(f"{self.spec.model_dir}: worker {self.index} died while loading the model") from exc
        if isinstance(said, LoadFailed):
            raise ForkliftError(said.message)
        self.served = said.model
        return said.model

    def call(self, job: Job) -> WorkerReply:
        assert self.connection is not None
        try:
            self.connection.send(job)
            return self.connection.recv()
        except (EOFError, OSError) as exc:
            raise WorkerCrashed(f"worker {self.index} (pid {self.process.pid if self.process else '?'}) died") from exc

    def stop(self) -> None:
        """Close the pipe (the worker ends when it reads the end), then kill one still busy after 5 s: a
        worker ignores SIGTERM and SIGINT, which are the server's to drain on."""
        if self.connection is not None:
            self.connection.close()
        if self.process is not None and self.process.is_alive():
            self.process.join(timeout=5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)


class ModelPool:
    """The workers of one served model and the queue in front of them."""

    def __init__(
        self,
        name: str,
        specs: list[WorkerSpec],
        metrics: Metrics,
        *,
        max_batch: int = 8,
        batch_timeout_s: float = 0.0,
        queue_size: int = 64,
        max_pixels: int = 100_000_000,
    ) -> None:
        self.name = name
        self.workers = [Worker(spec, index) for index, spec in enumerate(specs)]
        self.metrics = metrics
        self.max_batch = max_batch
        self.max_pixels = max_pixels  # decoded at once in a worker: requests join a batch while they fit
        self.batch_timeout_s = batch_timeout_s
        self.queue: asyncio.Queue[Request] = asyncio.Queue(maxsize=queue_size)
        self.tasks: list[asyncio.Task] = []
        self.ready = False

    @property
    def served(self) -> ServedModel:
        """What the pool's workers serve, as the first one said when it started (the pool must be started)."""
        served = self.workers[0].served
        if served is None:
            raise RuntimeError(f"model {self.name!r}: its pool has not started")
        return served

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(w.thread, w.start) for w in self.workers))
        self.tasks = [asyncio.create_task(self._serve(w), name=f"{self.name}-{w.index}") for w in self.workers]
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for worker in self.workers:
            worker.stop()
            worker.thread.shutdown(wait=False)

    async def submit(self, job: Job) -> Any:
        """Queue a job and wait for its answer; QueueFull at once when the bound is reached."""
        request = Request(job, asyncio.get_running_loop().create_future())
        try:
            self.queue.put_nowait(request)
        except asyncio.QueueFull as exc:
            self.metrics.rejected.labels(self.name).inc()
            raise QueueFull(f"model {self.name!r}: {self.queue.maxsize} requests already waiting") from exc
        self.metrics.queue_depth.labels(self.name).set(self.queue.qsize())
        return await request.future

    def _batch_limit(self) -> int:
        """At most this many images (or rows) per batch. With a batch timeout, ``max_batch``: the worker waits
        for more until the batch is full or the time is up, as it was asked to. Without one, the waiting work
        split evenly over the workers: one worker taking every waiting request while another idles would make
        those requests wait for each other; an even split keeps latencies alike (p99 near p50) and still batches
        under heavy load.
        """
        if self.batch_timeout_s > 0:
            return self.max_batch
        return max(1, min(self.max_batch, -(-(self.queue.qsize() + 1) // len(self.workers))))

    async def _next_batch(self, first: Request) -> tuple[list[Request], Request | None]:
        """`first` plus what is waiting and can share its batch; a request that cannot is handed back."""
        batch, items = [first], first.items
        if isinstance(first.job, TensorJob):
            return batch, None
        pixels = _pixels(first.job)
        deadline = time.perf_counter() + self.batch_timeout_s
        limit = self._batch_limit()
        while items < limit:
            try:
                if self.queue.empty() and self.batch_timeout_s > 0:
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        break
                    candidate = await asyncio.wait_for(self.queue.get(), remaining)
                else:
                    candidate = self.queue.get_nowait()
            except (asyncio.QueueEmpty, TimeoutError):
                break
            if not _batch_together(first.job, candidate.job):
                return batch, candidate
            if pixels + _pixels(candidate.job) > self.max_pixels:  # the worker would hold too many decoded pixels
                return batch, candidate
            batch.append(candidate)
            items += candidate.items
            pixels += _pixels(candidate.job)
        return batch, None

    async def _serve(self, worker: Worker) -> None:
        loop = asyncio.get_running_loop()
        held: Request | None = None
        while True:
            first = held if held is not None else await self.queue.get()
            batch, held = await self._next_batch(first)
            self.metrics.queue_depth.labels(self.name).set(self.queue.qsize())
            live = [r for r in batch if not r.future.done()]  # callers that gave up need no answer
            if not live:
                continue
            job = _merge(live)
            self.metrics.batch_size.labels(self.name).observe(sum(r.items for r in live))
            try:
                reply = await loop.run_in_executor(worker.thread, worker.call, job)
            except WorkerCrashed as exc:
                _fail(live, exc)
                await self._restart(worker)
                continue
            self.metrics.worker_batches.labels(self.name, str(worker.index)).inc()
            match reply:
                case Answered(answer):
                    _answer(live, answer, self.metrics, self.name)
                case Refused(message):
                    _fail(live, ForkliftError(message))
                case Crashed(trace):
                    _fail(live, WorkerFailed(trace))

    async def _restart(self, worker: Worker) -> None:
        """Start the worker again, retrying with back-off while it fails (the other workers keep serving)."""
        self.metrics.worker_restarts.labels(self.name).inc()
        delay = 0.5
        while True:
            worker.stop()
            try:
                await asyncio.get_running_loop().run_in_executor(worker.thread, worker.start)
                return
            except ForkliftError as exc:
                log.error("model %s: worker %d failed to restart (%s); retrying in %.1f s", self.name, worker.index,
                          exc, delay)  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)


def _merge(requests: list[Request]) -> Job:
    """The one job of a batch from `_next_batch`: a tensor job goes alone, image jobs with one threshold (and
    answer encoding and style adjustment) merge, and rows merge into one matrix."""
    first = requests[0].job
    if isinstance(first, TensorJob):
        return first
    if isinstance(first, RowsJob):
        parts = [request.job.rows for request in requests if isinstance(request.job, RowsJob)]
        assert len(parts) == len(requests), "_next_batch batches rows only with rows"
        return RowsJob(np.concatenate(parts))
    images: list[tuple[str, bytes]] = []
    pixels = 0
    for request in requests:
        assert isinstance(request.job, ImagesJob), "_next_batch batches image jobs only with image jobs"
        images.extend(request.job.images)
        pixels += request.job.pixels
    return ImagesJob(images, first.request, first.encoding, pixels)


def _batch_together(first: Job, other: Job) -> bool:
    """Whether `other` may join `first`'s batch: rows with rows, image jobs with the same request options and answer
    encoding; never kinds mixed, never a tensor job."""
    if isinstance(first, RowsJob):
        return isinstance(other, RowsJob)
    if isinstance(first, ImagesJob) and isinstance(other, ImagesJob):
        return (first.request, first.encoding) == (other.request, other.encoding)
    return False


def _pixels(job: Job) -> int:
    return job.pixels if isinstance(job, ImagesJob) else 0


def _fail(requests: list[Request], error: Exception) -> None:
    for request in requests:
        if not request.future.done():
            request.future.set_exception(error)


def _answer(requests: list[Request], payload: Answer, metrics: Metrics, model: str) -> None:
    """Each request its share of the batch's answer, by the offsets of its items; a tensor job's went alone."""
    if isinstance(payload, np.ndarray):
        requests[0].future.set_result(payload)
        return
    for stage, seconds in payload.timing.to_json().items():
        metrics.stage.labels(model, stage).observe(seconds)
    offset = 0
    for request in requests:
        start, offset = offset, offset + request.items
        share: Prediction | RowsAnswer = (
            payload.rows(start, offset)
            if isinstance(payload, RowsAnswer)
            else Prediction(payload.results[start:offset], payload.timing)
        )
        if not request.future.done():
            request.future.set_result(share)
