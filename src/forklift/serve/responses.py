"""Error answers of forklift's HTTP servers (`forklift serve` and the app): JSON that names the problem,
`{"status": "error", "error": "..."}`, with the HTTP code that says whose fault it is."""

from __future__ import annotations

from starlette.responses import JSONResponse


class HttpError(Exception):
    """Raised anywhere in a handler (or a dependency); the server turns it into `error_response`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None, *, extra: dict[str, str] | None = None
) -> JSONResponse:
    """The JSON every error is answered with: one line naming the input and the problem (and what a protocol's
    clients also look for, `extra`: PowerAI Vision's `"result": "fail"`)."""
    body = {"status": "error", "error": message, **(extra or {})}
    return JSONResponse(body, status_code=status, headers=headers)
