"""Errors the API answers as JSON: `{"status": "error", "error": "..."}` with a 4xx code, one line naming the
input and the problem, as everywhere in forklift."""

from __future__ import annotations


class AppError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
