"""Error answers: JSON that names the problem, with the HTTP code that says whose fault it is."""

from __future__ import annotations

from starlette.responses import JSONResponse


class HttpError(Exception):
    """Raised anywhere in a handler; the app turns it into a JSON error response."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"status": "error", "error": message}, status_code=status, headers=headers)
