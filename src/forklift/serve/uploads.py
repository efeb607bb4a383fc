"""Reading images out of a request: multipart `files`, or a raw image body; bounded in size."""

from __future__ import annotations

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.types import Message

from forklift.serve.config import BodyLimit
from forklift.serve.responses import HttpError
from forklift.vision.images import declared_pixels

FIELD = "files"


def sends_images(request: Request) -> bool:
    """Whether the request's body is a multipart upload or an image (its Content-Type says so)."""
    content_type = request.headers.get("content-type", "").lower()
    return content_type.startswith(("multipart/", "image/"))


def _too_large(limit: BodyLimit, size: int | None = None) -> HttpError:
    body = "request body" if size is None else f"request body of {size:,} bytes"
    return HttpError(413, f"{body} is over this server's limit of {limit.size:,} bytes ({limit.option})")


def _check_declared_size(request: Request, limit: BodyLimit) -> None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit.size:
        raise _too_large(limit, int(declared))


async def read_body(request: Request, limit: BodyLimit) -> bytes:
    """The raw body, refused as soon as it passes the limit (chunked bodies have no length to check first)."""
    _check_declared_size(request, limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit.size:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_form(request: Request, limit: BodyLimit):
    """The multipart form, its bytes counted as they arrive: a chunked body (no length to check first) is refused
    as soon as it passes the limit, before its files are spooled whole."""
    _check_declared_size(request, limit)
    received = 0

    async def counted() -> Message:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit.size:
                raise _too_large(limit)
        return message

    try:
        return await Request(request.scope, counted).form(max_files=256, max_part_size=limit.size)
    except HttpError:
        raise
    except Exception as exc:  # Starlette raises its own parse errors with a message worth passing on
        raise HttpError(400, f"cannot parse the multipart form: {exc}") from exc


def pixels_within(images: list[tuple[str, bytes]], max_pixels: int) -> int:
    """The pixels the request's images declare together (headers only); a 413 past `max_pixels`, since a worker
    decodes all of a request's images before it infers (a small PNG can declare 100 million pixels)."""
    total = sum(declared_pixels(data) for _, data in images)
    if total > max_pixels:
        raise HttpError(413, f"the request's {len(images)} image(s) have {total:,} pixels together, over the limit "
                             f"of {max_pixels:,} a request may have (--max-pixels)")  # fmt: skip
    return total


def _no_files(fields: list[str]) -> str:
    """Why a multipart form gave no image, as the person can act on it."""
    if FIELD in fields:
        return f"the multipart form's '{FIELD}' field is text, not a file: send the image as a file (-F {FIELD}=@a.jpg)"
    if not fields:
        return "the multipart form holds no field: is the body cut short, or its boundary not the Content-Type's?"
    return f"no '{FIELD}' field with an image in the multipart form (fields: {', '.join(fields)})"


async def read_images(request: Request, limit: BodyLimit) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """(name, bytes) of each uploaded image and the form's other fields (confthre, ...)."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await read_form(request, limit)
        files = [f for f in form.getlist(FIELD) if isinstance(f, UploadFile)]
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not files:
            raise HttpError(400, _no_files(sorted(form.keys())))
        images = [(f.filename or f"{FIELD}[{i}]", await f.read()) for i, f in enumerate(files)]
        return images, fields
    body = await read_body(request, limit)
    if not body:
        raise HttpError(400, f"empty request body: send an image, or multipart/form-data with a '{FIELD}' field")
    return [("body", body)], {}
