"""PowerAI Vision's inference API, so existing clients work unchanged.

`POST /api/dlapis/{model}` (multipart `files`, optional `confthre`) and `GET /api/dlapis/{model}?imageUrl=`,
plus the object-recognition deployment's `GET /test`, `POST /detect_upload` and `GET /detect_url?url=`.
Fetching by URL is off unless hosts are allowed (`--url-allow-host`), bounded in size and time.
"""

from __future__ import annotations

import asyncio
import html
from urllib.parse import urlsplit

import httpx
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from forklift.runtime.base import RequestOptions
from forklift.serve.config import DEFAULT_PORTS, UrlFetch
from forklift.serve.responses import HttpError
from forklift.serve.state import ServeState, endpoint, parse_conf
from forklift.serve.uploads import pixels_within, read_images
from forklift.serve.worker import ImagesJob
from forklift.vision.results import Prediction


def _test_page(image_models: list[str]) -> str:
    """The deployment's try-it page: an image sent to the model chosen (a tabular model takes no image)."""
    if not image_models:
        return ("<!doctype html><title>forklift</title><h1>forklift</h1><p>No image model is served here: the tabular "
                "models answer <code>POST /predict/{model}</code> with JSON rows.</p>")  # fmt: skip
    options = "".join(f"<option>{html.escape(name)}</option>" for name in image_models)
    return f"""<!doctype html><title>forklift</title><h1>forklift: try an image</h1>
<form action="/detect_upload" method="post" enctype="multipart/form-data">
<label>model <select name="model">{options}</select></label>
<input type="file" name="files" accept="image/*" required> <input type="submit" value="Detect"></form>"""


def _classified(prediction: Prediction, model: str) -> dict:
    result = prediction.results[0]
    if result.error is not None:
        raise HttpError(400, result.error)
    if result.segments is not None:  # the API has boxes and labels only; a mask would be silently dropped
        raise HttpError(
            400, f"model {model!r} segments images; PowerAI Vision's API has no masks (POST /predict/{model})"
        )
    classified = [
        {"label": d.label, "confidence": round(d.score, 4),
         "xmin": round(d.x1), "ymin": round(d.y1), "xmax": round(d.x2), "ymax": round(d.y2)}
        for d in result.detections or []
    ] + [{"label": c.label, "confidence": round(c.score, 4)} for c in result.classes or []]  # fmt: skip
    return {"webAPIId": model, "imageUrl": "", "classified": classified, "result": "success"}


async def fetch_image(url: str, settings: UrlFetch) -> tuple[str, bytes]:
    """Download an image from an allowed host, refusing redirects, big bodies and slow servers.

    `settings.timeout_s` bounds the whole fetch (connect, headers and body), not only each read: httpx's timeout
    restarts on every chunk, so a host dripping a byte a second would otherwise hold the fetch open far beyond it.
    """
    if not settings.enabled:
        raise HttpError(403, "fetching images by URL is off on this server (start it with --url-allow-host HOST)")
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or not url.isprintable():
        raise HttpError(400, f"{url!r} is not an http(s) URL")
    if not any(origin.admits(parts.scheme, parts.hostname, port) for origin in settings.allowed):
        where = f"{parts.hostname}:{port or DEFAULT_PORTS[parts.scheme]}"
        raise HttpError(403, f"{where} is not on this server's URL allow-list")
    try:
        async with (
            asyncio.timeout(settings.timeout_s),  # the whole fetch; httpx's timeout below bounds each step
            httpx.AsyncClient(timeout=settings.timeout_s, follow_redirects=False) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise HttpError(502, f"{url}: the image host answered {response.status_code}")
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > settings.max_bytes:
                    raise HttpError(413, f"{url}: over the URL size limit of {settings.max_bytes} bytes")
                chunks.append(chunk)
    except (TimeoutError, httpx.TimeoutException) as exc:
        raise HttpError(504, f"{url}: no answer within {settings.timeout_s:g} s") from exc
    except httpx.InvalidURL as exc:
        raise HttpError(400, f"{url!r} is not an http(s) URL ({exc})") from exc
    except httpx.HTTPError as exc:
        raise HttpError(502, f"{url}: cannot fetch: {exc}") from exc
    return parts.path.rsplit("/", 1)[-1] or parts.hostname, b"".join(chunks)


async def _detect(
    request: Request, model: str | None, images: list[tuple[str, bytes]], conf_text: str | None, *, naming: str
) -> Response:
    state: ServeState = request.app.state.serve
    pool = state.pool(model, naming=naming)
    conf = parse_conf(conf_text, "confthre")
    pixels = pixels_within(images[:1], state.options.max_pixels)
    prediction = await state.run(pool, ImagesJob(images[:1], RequestOptions(conf=conf), pixels=pixels))
    return JSONResponse(_classified(prediction, pool.name))


async def _from_upload(request: Request, model: str | None) -> Response:
    state: ServeState = request.app.state.serve
    images, fields = await read_images(request, state.options.upload_limit)
    naming = "with the form field model (-F model=NAME)"
    return await _detect(request, model or fields.get("model"), images, fields.get("confthre"), naming=naming)


async def _from_url(request: Request, model: str | None, parameter: str) -> Response:
    url = request.query_params.get(parameter)
    if not url:
        raise HttpError(400, f"GET {request.url.path} needs ?{parameter}=")
    image = await fetch_image(url, request.app.state.serve.options.url_fetch)
    return await _detect(request, model, [image], request.query_params.get("confthre"), naming="with ?model=NAME")


@endpoint("powerai")
async def dlapis_post(request: Request) -> Response:
    return await _from_upload(request, request.path_params["model"])


@endpoint("powerai")
async def dlapis_get(request: Request) -> Response:
    return await _from_url(request, request.path_params["model"], "imageUrl")


@endpoint("powerai")
async def detect_upload(request: Request) -> Response:
    return await _from_upload(request, None)


@endpoint("powerai")
async def detect_url(request: Request) -> Response:
    return await _from_url(request, request.query_params.get("model"), "url")


async def test_page(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    return HTMLResponse(_test_page(sorted(name for name, pool in state.pools.items() if pool.served.tabular is None)))


ROUTES = [
    Route("/api/dlapis/{model}", dlapis_post, methods=["POST"]),
    Route("/api/dlapis/{model}", dlapis_get, methods=["GET"]),
    Route("/test", test_page, methods=["GET"]),
    Route("/detect_upload", detect_upload, methods=["POST"]),
    Route("/detect_url", detect_url, methods=["GET"]),
]
