"""Headers that keep what people upload from acting as the app.

Every answer says `X-Content-Type-Options: nosniff` (a browser takes the declared type, never a guess from the
bytes) and carries a Content-Security-Policy: the app's pages may run only the app's own scripts, from its own
origin, and be framed by no one (the API's page, /docs, included: its Swagger UI is the front end's own copy).
A user's file is answered by `user_file`: a type from what the app found it to be (else
`application/octet-stream`) and a policy that runs nothing, so a file made to look like a page stays a file.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi.responses import FileResponse, StreamingResponse
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
FILE_POLICY = "default-src 'none'; sandbox"  # a user's file: nothing in it runs, even opened on its own

# the types of the files the app stores, by the suffix the app gave them (never the uploader's)
MEDIA_TYPES = {
    ".jpg": "image/jpeg", ".png": "image/png", ".bmp": "image/bmp", ".tif": "image/tiff", ".webp": "image/webp",
    ".gif": "image/gif", ".mp4": "video/mp4", ".webm": "video/webm", ".mkv": "video/x-matroska",
    ".avi": "video/x-msvideo", ".mpg": "video/mpeg", ".ts": "video/mp2t", ".ogv": "video/ogg",
}  # fmt: skip
UNKNOWN = "application/octet-stream"


def attachment(filename: str) -> str:
    """A download's Content-Disposition: the name as it is for browsers (RFC 6266's `filename*`, UTF-8) and an
    ASCII one for clients without it. A header is Latin-1: a data set named in other letters (`日本`) made a 500."""
    plain = re.sub(r"[^A-Za-z0-9._-]+", "-", filename).strip("-.") or "download"
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(filename, safe='')}"


class StreamThenRemove(StreamingResponse):
    """A download made in a scratch folder, removed once the answer is over, however it ended (sent, the client
    gone, or failed before its first byte, when a background task never runs and the copy stayed)."""

    def __init__(self, content: Iterable[bytes], *, scratch: Path, **options: Any) -> None:
        super().__init__(content, **options)
        self.scratch = scratch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)


def user_file(path: Path, *, headers: dict[str, str] | None = None) -> FileResponse:
    """A file a person uploaded (or the app made from one), answered as what it is and nothing more."""
    return FileResponse(path, media_type=MEDIA_TYPES.get(path.suffix.lower(), UNKNOWN),
                        headers={**(headers or {}), "Content-Security-Policy": FILE_POLICY})  # fmt: skip


class SecurityHeaders:
    """ASGI middleware: nosniff on every answer, the page policy on every answer that has none of its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                if "content-security-policy" not in headers:
                    headers["Content-Security-Policy"] = PAGE_POLICY
            await send(message)

        await self.app(scope, receive, with_headers)
