"""Reading images out of a request: multipart `files`, or a raw image body; bounded in size."""

from __future__ import annotations

from starlette.datastructures import UploadFile
from starlette.requests import Request

from forklift.serve.responses import HttpError

FIELD = "files"


def _check_declared_size(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"request body of {int(declared)} bytes is over the upload limit of {limit} bytes")


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused as soon as it passes the limit (chunked bodies have no length to check first)."""
    _check_declared_size(request, limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"request body is over the upload limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_form(request: Request, limit: int):
    _check_declared_size(request, limit)
    try:
        return await request.form(max_files=256, max_part_size=limit)
    except HttpError:
        raise
    except Exception as exc:  # Starlette raises its own parse errors with a message worth passing on
        raise HttpError(400, f"cannot parse the multipart form: {exc}") from exc


async def read_images(request: Request, limit: int) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """(name, bytes) of each uploaded image and the form's other fields (confthre, ...)."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await read_form(request, limit)
        files = [f for f in form.getlist(FIELD) if isinstance(f, UploadFile)]
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not files:
            present = ", ".join(sorted(form.keys())) or "none"
            raise HttpError(400, f"no '{FIELD}' field with an image in the multipart form (fields: {present})")
        images = [(f.filename or f"{FIELD}[{i}]", await f.read()) for i, f in enumerate(files)]
        return images, fields
    body = await read_body(request, limit)
    if not body:
        raise HttpError(400, f"empty request body: send an image, or multipart/form-data with a '{FIELD}' field")
    return [("body", body)], {}
