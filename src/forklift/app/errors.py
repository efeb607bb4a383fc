"""Errors the API answers as JSON: `{"status": "error", "error": "..."}` with a 4xx code, one line naming the
input and the problem, as everywhere in forklift."""

from __future__ import annotations

from starlette.responses import JSONResponse


class AppError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str) -> JSONResponse:
    """The JSON every error of the API is answered with."""
    return JSONResponse({"status": "error", "error": message}, status_code=status)
