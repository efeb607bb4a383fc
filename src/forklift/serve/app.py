"""The Starlette app: every protocol's routes over the served models' pools, plus /metrics and /healthz."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forklift.errors import ForkliftError
from forklift.serve.openapi import openapi
from forklift.serve.protocols import kserve, native, powerai, stream
from forklift.serve.responses import error_response
from forklift.serve.state import ServeState

log = logging.getLogger("forklift.serve")


async def healthz(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    models = {
        name: {
            "ready": pool.ready,
            "workers": len(pool.workers),
            "pids": [w.served.pid if w.served else None for w in pool.workers],
            "cpus": [list(w.spec.place.cpus) for w in pool.workers],
            **(pool.served.to_json() if pool.ready else {}),
        }
        for name, pool in state.pools.items()
    }
    ok = all(pool.ready for pool in state.pools.values())
    return JSONResponse({"status": "OK" if ok else "starting", "models": models}, status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")


async def openapi_document(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    return JSONResponse(openapi(list(state.pools)))


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method the path takes: Starlette's Allow names its first route's only
        routes = [route for route in request.app.routes if isinstance(route, Route)]
        allowed = {
            method for route in routes if route.path_regex.fullmatch(request.url.path) for method in route.methods or ()
        }
        headers["Allow"] = ", ".join(sorted(allowed))
    return error_response(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", headers)


async def server_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


def build_app(state: ServeState, *, started: Callable[[ForkliftError | None], None] | None = None) -> Starlette:
    """The app; `started` hears when every model's workers are up (None), or the error of one that cannot load:
    handed there (to be said in one line as the server stops) rather than raised, which the HTTP server would log
    as a traceback."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            try:
                await asyncio.gather(*(pool.start() for pool in state.pools.values()))
            except ForkliftError as exc:
                if started is None:
                    raise
                started(exc)
            else:
                if started is not None:
                    started(None)
            yield
        finally:
            await asyncio.gather(*(pool.stop() for pool in state.pools.values()))

    routes = [
        *native.ROUTES,
        *powerai.ROUTES,
        *kserve.ROUTES,
        *stream.ROUTES,
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi_document, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.serve = state
    return app
