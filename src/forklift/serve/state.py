"""What every handler shares: the served models' pools, the options and the metrics."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any, overload

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from forklift.errors import ForkliftError
from forklift.runtime.tabular import RowsAnswer
from forklift.serve.config import ServeOptions
from forklift.serve.metrics import Metrics
from forklift.serve.pool import ModelPool, QueueFull, WorkerCrashed, WorkerFailed
from forklift.serve.responses import HttpError, error_response
from forklift.serve.worker import ImagesJob, Job, RowsJob, TensorJob
from forklift.vision.results import Prediction

RETRY_AFTER_S = "1"
PROTOCOL_ERRORS = {"powerai": {"result": "fail"}}  # what a protocol's clients read in an error besides ours


class ServeState:
    def __init__(self, pools: dict[str, ModelPool], options: ServeOptions, metrics: Metrics) -> None:
        self.pools = pools
        self.options = options
        self.metrics = metrics

    def pool(self, name: str | None, *, naming: str = "as /predict/{model}") -> ModelPool:
        """The named model's pool; without a name, the only one (or a 400 that lists the choices and says how the
        route names one: `naming`)."""
        served = ", ".join(sorted(self.pools))
        if name is None:
            if len(self.pools) != 1:
                raise HttpError(400, f"several models are served ({served}): name one, {naming}")
            name = next(iter(self.pools))
        if name not in self.pools:
            raise HttpError(404, f"unknown model {name!r} (served: {served})")
        pool = self.pools[name]
        if not pool.ready:
            raise HttpError(503, f"model {name!r} is not ready yet", {"Retry-After": RETRY_AFTER_S})
        return pool

    @overload
    async def run(self, pool: ModelPool, job: ImagesJob) -> Prediction: ...
    @overload
    async def run(self, pool: ModelPool, job: TensorJob) -> np.ndarray: ...
    @overload
    async def run(self, pool: ModelPool, job: RowsJob) -> RowsAnswer: ...
    async def run(self, pool: ModelPool, job: Job) -> Any:
        """Queue the job and give its answer; overload, crashes and bad input become HTTP errors that say so."""
        try:
            return await pool.submit(job)
        except QueueFull as exc:
            raise HttpError(503, f"{exc}; retry later", {"Retry-After": RETRY_AFTER_S}) from exc
        except WorkerCrashed as exc:
            raise HttpError(500, f"model {pool.name!r}: {exc} while answering; it is being restarted") from exc
        except WorkerFailed as exc:
            raise HttpError(500, f"model {pool.name!r}: internal error: {str(exc).strip().splitlines()[-1]}") from exc
        except ForkliftError as exc:
            raise HttpError(400, str(exc)) from exc


Handler = Callable[[Request], Awaitable[Response]]


def endpoint(protocol: str) -> Callable[[Handler], Handler]:
    """Count and time each request, and turn HttpError into its JSON answer."""

    def wrap(handler: Handler) -> Handler:
        @wraps(handler)
        async def handle(request: Request) -> Response:
            state: ServeState = request.app.state.serve
            model = request.path_params.get("model") or (next(iter(state.pools)) if len(state.pools) == 1 else "")
            model = model if model in state.pools else "unknown"  # no label per made-up name
            start = time.perf_counter()
            try:
                response = await handler(request)
            except HttpError as exc:
                response = error_response(exc.status, exc.message, exc.headers, extra=PROTOCOL_ERRORS.get(protocol))
            state.metrics.latency.labels(model, protocol).observe(time.perf_counter() - start)
            state.metrics.requests.labels(model, protocol, str(response.status_code)).inc()
            return response

        return handle

    return wrap


def parse_conf(text: str | None, name: str) -> float | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError as exc:
        raise HttpError(400, f"{name}={text!r} is not a number") from exc
    if not 0.0 <= value <= 1.0:
        raise HttpError(400, f"{name}={value} is not between 0 and 1")
    return value
