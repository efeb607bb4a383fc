"""The app's ASGI application: the API routers under /api (documented at /openapi.json and /docs), errors as
JSON, and the built front end (a single-page app: any other path answers its index.html)."""

from __future__ import annotations

import collections
import contextlib
import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from forklift import __version__
from forklift.app import schemas
from forklift.app.autolabel import AutoLabeler
from forklift.app.columns import TextRefused
from forklift.app.config import AppConfig, make_data_dir
from forklift.app.database import make_engine, session_factory, upgrade
from forklift.app.deploy import restore
from forklift.app.devices import machine_devices
from forklift.app.headers import SecurityHeaders
from forklift.app.jobs import JobRunner
from forklift.app.limits import LimitedBodies, multipart_refusal
from forklift.app.local_guard import LocalOnly
from forklift.app.login_guard import LoginGuard
from forklift.app.routes import (
    augmentation,
    autolabel,
    datasets,
    deployments,
    images,
    jobs,
    labels,
    models,
    session,
    transfer,
    users,
    videos,
)
from forklift.app.security import Sessions, secret_key
from forklift.app.storage import Storage
from forklift.errors import out_of_space
from forklift.serve.responses import HttpError, error_response

STATIC = Path(__file__).resolve().parent / "static"
ERRORS_DOCUMENTED: dict[int | str, dict[str, Any]] = {  # /openapi.json: every error's body, as error_response sends it
    status: {"model": schemas.ErrorOut, "description": said}
    for status, said in (
        (401, "not logged in (no session, token or a revoked one)"),
        (403, "the role or CSRF token"),
        (404, "no such record"),
        (409, "a stale version, a name taken, or something running"),
        (413, "a body or file over its limit"),
        (422, "an input refused: where, and why"),
        (429, "too many attempts or streams: Retry-After says when"),
    )
}
PARAMETER = re.compile(r"\{[^}]+\}")  # a path parameter in an OpenAPI path template
ENUM_MEMBER = re.compile(r"<\w+\.\w+: '([^']*)'>")  # how pydantic names an enum's member among the choices
NOT_A_FILE = re.compile(r"Value error, Expected UploadFile, received: .*")  # FastAPI's words for a text field
NOT_BUILT = """<!doctype html><title>forklift app</title><p>The front end is not built: run <code>make webapp</code>
(npm) in the repository, then start <code>forklift app</code> again. The API is described at
<a href="/openapi.json">/openapi.json</a>."""


def create_app(config: AppConfig) -> FastAPI:
    """The app over `config`'s data directory and database (migrated to the newest schema first)."""
    make_data_dir(config.data_dir)
    engine = make_engine(config.db_url)
    upgrade(engine)

    @contextlib.asynccontextmanager
    async def lifespan(started: FastAPI) -> AsyncIterator[None]:
        started.state.jobs.start()  # training jobs and auto-label runs are followed while the app serves
        started.state.autolabel.start()
        threading.Thread(target=restore, args=(started.state.sessionmaker, config.data_dir, started.state.deploying,
                                               config.host), daemon=True).start()  # fmt: skip
        yield
        started.state.jobs.stop()
        started.state.autolabel.stop()

    app = FastAPI(title="forklift app", version=__version__, summary="Data sets, labelling and video frames.",
                  lifespan=lifespan, responses=ERRORS_DOCUMENTED, docs_url=None, redoc_url=None)  # fmt: skip
    app.state.config = config
    app.state.engine = engine
    app.state.sessionmaker = session_factory(engine)
    app.state.storage = Storage(config.data_dir)
    app.state.storage.sweep_partials()
    app.state.jobs = JobRunner(app.state.sessionmaker, config.data_dir, devices=machine_devices(config.jobs_per_device),
                               slots=config.jobs_per_device)  # fmt: skip
    app.state.autolabel = AutoLabeler(app.state.sessionmaker, config.data_dir, host=config.host)
    app.state.event_streams = collections.Counter()  # open job event streams by account (routes.jobs.MAX_STREAMS)
    app.state.deploying = threading.Lock()  # deployments restored at start, or undeployed: one at a time
    app.state.login_guard = LoginGuard()
    app.state.sessions = Sessions(secret_key(config.data_dir), config.session_hours)
    routers = (session, users, datasets, images, labels, videos, transfer, augmentation, jobs, models, deployments,
               autolabel)  # fmt: skip
    for module in routers:
        app.include_router(module.router)
    app.add_exception_handler(HttpError, _app_error)  # type: ignore[arg-type]
    app.add_exception_handler(TextRefused, _text_refused)  # type: ignore[arg-type]
    app.add_exception_handler(OSError, _no_space)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_middleware(LimitedBodies, config=config)  # bodies past their route's limit: 413 before they are spooled
    if config.local:  # no login: the machine's browser must not be steered into acting as its admin
        app.add_middleware(LocalOnly)
    app.add_middleware(SecurityHeaders)  # nosniff everywhere (the guard's refusals too), a policy on the pages

    @app.get("/docs", include_in_schema=False)
    def api_page() -> Response:
        """The API described by /openapi.json, in the front end's copy of Swagger UI (FastAPI's loads a CDN's)."""
        page = STATIC / "docs.html"
        return FileResponse(page) if page.is_file() else HTMLResponse(NOT_BUILT)

    @app.get("/{path:path}", include_in_schema=False)
    def front_end(path: str) -> Response:
        if path.startswith("api/"):
            raise HttpError(404, f"/{path}: no such API route (see /docs)")
        wanted = (STATIC / path).resolve()
        if path and wanted.is_file() and wanted.is_relative_to(STATIC):
            return FileResponse(wanted)
        index = STATIC / "index.html"
        return FileResponse(index) if index.is_file() else HTMLResponse(NOT_BUILT)

    return app


def _app_error(_request: Request, exc: HttpError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.headers)


def _text_refused(_request: Request, exc: TextRefused) -> JSONResponse:
    return error_response(422, str(exc))


def _no_space(request: Request, exc: OSError) -> JSONResponse:
    """507 for a write the disk had no room for (storage removes what it had half written); any other OSError is
    a bug, and goes on to the server's 500 with its traceback logged."""
    if not out_of_space(exc):
        raise exc
    return error_response(507, f"{request.method} {request.url.path}: no space left on the server's disk (nothing of "
                               f"what failed was kept; free some space and try again)")  # fmt: skip


def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    if exc.status_code == 400 and request.headers.get("content-type", "").startswith("multipart/form-data"):
        return error_response(*multipart_refusal(request.method, request.url.path, str(exc.detail)))
    if exc.status_code == 405:  # Starlette's Allow names the first route of the path only: the API's, as documented
        allowed = sorted({method.upper() for template, operations in request.app.openapi()["paths"].items()
                          if re.fullmatch(PARAMETER.sub("[^/]+", template), request.url.path)
                          for method in operations})  # fmt: skip
        return error_response(405, f"{request.method} {request.url.path}: not taken (it takes {', '.join(allowed)})",
                              {"Allow": ", ".join(allowed)})  # fmt: skip
    return error_response(exc.status_code, str(exc.detail), dict(exc.headers or {}))


def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with the first problem in one line: where it is (body.name, query.limit...) and what is wrong."""
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()))
    said = ENUM_MEMBER.sub(r"'\1'", str(first.get("msg", "invalid")))  # a choice as it is sent, not Python's repr
    said = NOT_A_FILE.sub("a file is expected here (a part with a file name), not a text field", said)
    return error_response(422, f"{where}: {said}")
