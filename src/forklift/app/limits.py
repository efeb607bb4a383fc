"""How big a request may be, checked while it arrives.

Starlette writes a multipart form to temporary files whole before a route runs, so a route's own check of a file's
size (`storage.copy_limited`) comes after the disk has taken all of it. This ASGI middleware refuses a body past its
route's limit first: at once when its Content-Length says so, else (a chunked body) as soon as the bytes counted
pass it; the answer is a 413 naming the route and the limit. An upload's limit is the app's limit of what it
carries plus a little for the multipart headers, so that a file just past its own limit is still refused by name
by the route; any other request's body (JSON) has `max_json_bytes`.

Starlette's multipart parser also takes at most MAX_FILES files per request; past that its 400 becomes a 413 that
says how many a request may carry, and a form it cannot read says why it may be (`multipart_refusal`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from python_multipart.multipart import DEFAULT_MAX_HEADER_SIZE
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from forklift.app.config import AppConfig, size_text
from forklift.app.security import COOKIE, api_token
from forklift.serve.responses import error_response

MULTIPART_SLACK = 64 * 1024  # bytes of boundaries and part headers around an upload's one file
MAX_FILES = 1000  # files in one multipart request: Starlette's parser's default, which the app keeps
_STARLETTE_TOO_MANY_FILES = "Too many files."  # how Starlette's 400 for that begins
_STARLETTE_UNREADABLE = "Invalid multipart data."  # Starlette's 400 for whatever python-multipart refuses

# (a POST's path, the AppConfig limit of what it carries, what it carries, room for the multipart headers)
_UPLOADS = (
    (re.compile(r"/api/datasets/[^/]+/images"), "max_batch_bytes", "an image upload (all its files)", 0),
    (re.compile(r"/api/datasets/[^/]+/videos"), "max_video_bytes", "a video", MULTIPART_SLACK),
    (re.compile(r"/api/datasets/[^/]+/import"), "max_zip_bytes", "a zip to import", MULTIPART_SLACK),
    (re.compile(r"/api/models/import"), "max_zip_bytes", "a model's zip", MULTIPART_SLACK),
    (re.compile(r"/api/deployments/[^/]+/predict"), "max_image_bytes", "an image", MULTIPART_SLACK),
)


@dataclass(frozen=True)
class BodyLimit:
    limit: int  # bytes, as configured and as the refusal says it
    slack: int  # bytes more a body may have: the multipart headers around the upload
    what: str  # what the route takes, as the refusal names it
    upload: bool = False  # a file upload, which Starlette spools to disk before the route checks who asks


def body_limit(config: AppConfig, method: str, path: str) -> BodyLimit:
    """The most bytes the body of a request to `path` may have: `limit` + `slack`."""
    if method == "POST":
        for pattern, limit, what, slack in _UPLOADS:
            if pattern.fullmatch(path):
                return BodyLimit(int(getattr(config, limit)), slack, what, upload=True)
    return BodyLimit(config.max_json_bytes, 0, "a request")


class BodyTooLarge(HTTPException):
    """Raised by the counting `receive`: FastAPI lets an HTTPException out of its body parsing as it is (any other
    error becomes a 400), so the app's handler answers it as JSON."""


class LimitedBodies:
    """ASGI middleware: a request whose body is past its route's limit (`body_limit`) gets a 413."""

    def __init__(self, app: ASGIApp, *, config: AppConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(self.config, scope["method"], scope["path"])
        most = limit.limit + limit.slack
        refusal = (f"{scope['method']} {scope['path']}: the request's body is larger than the limit of "
                   f"{size_text(limit.limit)} for {limit.what}")  # fmt: skip
        if limit.upload and not self.config.local and not await _has_credentials(scope):
            await error_response(401, "log in first (uploads are read from a session or an API token only)")(
                scope, receive, send
            )
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > most:
            await error_response(413, refusal)(scope, receive, send)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > most:
                    raise BodyTooLarge(413, refusal)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:  # a route that answered before reading all of its body: nothing more can be said
                raise
            await error_response(413, refusal)(scope, receive, send)


async def _has_credentials(scope: Scope) -> bool:
    """Whether a request carries an API token this app issued or a session cookie signed by this app: checked
    again in full by the route (`security.authenticate`); here so that nobody without either makes the server
    spool a file (a made-up token included)."""
    connection = HTTPConnection(scope)
    header = connection.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return await run_in_threadpool(_token_known, scope["app"].state.sessionmaker, header[7:].strip())
    cookie = connection.cookies.get(COOKIE)
    return cookie is not None and scope["app"].state.sessions.read(cookie) is not None


def _token_known(sessions: sessionmaker[Session], token: str) -> bool:
    with sessions() as session:
        return api_token(session, token) is not None


def multipart_refusal(method: str, path: str, detail: str) -> tuple[int, str]:
    """The status and message for Starlette's 400 `detail` on a multipart form: more than MAX_FILES files is a 413
    that says how many a request may carry; a form it could not read says what the parser refuses (its own words
    name no part)."""
    where = f"{method} {path}"
    if detail.startswith(_STARLETTE_TOO_MANY_FILES):
        return 413, f"{where}: more than {MAX_FILES} files in one request; send at most {MAX_FILES} at a time"
    if detail == _STARLETTE_UNREADABLE:
        return 400, (f"{where}: the multipart form could not be read: a part is malformed, or one of its header lines "
                     f"is over {DEFAULT_MAX_HEADER_SIZE:,} bytes (a file name that long)")  # fmt: skip
    return 400, f"{where}: {detail}"
