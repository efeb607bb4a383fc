"""forklift's own protocol: `POST /predict/{model}` (and `POST /` for a single model) -> the result JSON, or for
an image-to-image model the answered image (JPEG, or PNG when `Accept` asks for it; `quality` sets JPEG's,
`strength` and `keep_colour` how the answer is applied). A tabular model takes JSON rows instead of images
(`{"rows": [...]}`, see `forklift.serve.rows`) and answers their predictions. `GET /predict/{model}` describes
what the model takes and answers."""

from __future__ import annotations

import json
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forklift.errors import ForkliftError
from forklift.model_files.tabular import TabularSettings
from forklift.runtime.base import RequestOptions
from forklift.serve.pool import ModelPool
from forklift.serve.responses import HttpError
from forklift.serve.rows import BODY, parse_rows, rows_json, sends_json
from forklift.serve.state import ServeState, endpoint, parse_conf
from forklift.serve.uploads import FIELD, pixels_within, read_body, read_images, sends_images
from forklift.serve.worker import Encoding, ImagesJob, RowsJob
from forklift.vision.images import IMAGE_FORMATS
from forklift.vision.results import Prediction
from forklift.vision.style_adjust import StyleAdjust
from forklift.vocabulary import Task

DEFAULT_QUALITY = 90


@endpoint("native")
async def predict(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    pool = state.pool(request.path_params.get("model"))
    if pool.served.tabular is not None:
        return await _answer_rows(request, state, pool, pool.served.tabular)
    if sends_json(request):
        raise HttpError(400, f"model {pool.name!r} takes images (multipart '{FIELD}' or an image body), not JSON rows")
    images, fields = await read_images(request, state.options.upload_limit)
    conf = parse_conf(fields.get("conf") or request.query_params.get("conf"), "conf")
    if pool.served.task == Task.STYLE:
        return await _answer_image(request, state, pool, images, fields)
    pixels = pixels_within(images, state.options.max_pixels)
    prediction = await state.run(pool, ImagesJob(images, RequestOptions(conf=conf), pixels=pixels))
    body = prediction.to_json()
    errors = [r.error for r in prediction.results if r.error is not None]
    if errors:
        body["error"] = "; ".join(errors)
        if len(errors) == len(prediction.results):
            raise HttpError(400, body["error"])
        return JSONResponse(body, status_code=400)
    return JSONResponse(body)


@endpoint("native")
async def describe(request: Request) -> Response:
    """What a model takes and answers, for a client to build its requests from: a tabular model's features and the
    columns of its v2 tensor in order; an image model's task, labels and input size."""
    state: ServeState = request.app.state.serve
    pool = state.pool(request.path_params.get("model"))
    served = pool.served
    if served.tabular is None:
        size = None if served.input_size is None else list(served.input_size)
        return JSONResponse({"name": pool.name, "task": served.task, "labels": served.labels, "input_size": size})
    settings = served.tabular
    written = settings.to_json()  # as forklift.json holds them
    described = {key: written[key] for key in ("estimator", "target", "classes", "features", "missing_values")}
    return JSONResponse({"name": pool.name, "task": served.task, **described, "v2_columns": list(settings.columns)})


async def _answer_rows(request: Request, state: ServeState, pool: ModelPool, settings: TabularSettings) -> Response:
    """JSON rows in, their predictions out; the rows are encoded here, so a bad one never reaches a worker."""
    if sends_images(request):
        raise HttpError(400, f"model {pool.name!r} is a tabular model: it takes JSON rows ({BODY}), not images")
    body = await read_body(request, state.options.upload_limit)
    start = time.perf_counter()
    rows = parse_rows(body, settings)
    preprocessing_s = time.perf_counter() - start
    answer = await state.run(pool, RowsJob(rows))
    return JSONResponse(rows_json(answer, settings, preprocessing_s=preprocessing_s))


async def _answer_image(
    request: Request, state: ServeState, pool: ModelPool, images: list[tuple[str, bytes]], fields: dict[str, str]
) -> Response:
    """One image in, its answer image out, with the stages' timing in the X-Forklift-Timing header (JSON)."""
    if len(images) != 1:
        raise HttpError(400, f"model {pool.name!r} answers one image with one image; this request has {len(images)}")

    def field(name: str) -> str | None:
        return fields.get(name) or request.query_params.get(name)

    quality = parse_quality(field("quality"))
    encoding = Encoding(image_format=answer_format(request.headers.get("accept", "")), quality=quality)
    style = parse_style(field("strength"), field("keep_colour"))
    pixels = pixels_within(images, state.options.max_pixels)
    prediction: Prediction = await state.run(pool, ImagesJob(images, RequestOptions(style=style), encoding, pixels))
    (result,) = prediction.results
    if result.error is not None or result.encoded is None:
        raise HttpError(400, result.error or f"model {pool.name!r} gave no image")
    media_type = IMAGE_FORMATS[encoding.image_format][1]
    timing = json.dumps(prediction.timing.to_json(), separators=(",", ":"))
    return Response(result.encoded, media_type=media_type, headers={"X-Forklift-Timing": timing})


def answer_format(accept: str) -> str:
    """PNG when the client accepts PNG and not JPEG, else JPEG (smaller, and what a video frame wants)."""
    kinds = {part.split(";")[0].strip() for part in accept.split(",")}
    return "png" if "image/png" in kinds and "image/jpeg" not in kinds else "jpeg"


def parse_style(strength: str | None, keep_colour: str | None) -> StyleAdjust:
    """`strength` 0..1 (default 1) and `keep_colour` 0/1 (or true/false)."""
    try:
        value = 1.0 if not strength else float(strength)
        keep = (keep_colour or "0").lower()
        if keep not in ("0", "1", "true", "false"):
            raise ForkliftError(f"keep_colour={keep_colour!r}: give 1 or 0")
        return StyleAdjust(value, keep in ("1", "true"))
    except ValueError as exc:
        raise HttpError(400, f"strength={strength!r} is not a number from 0 to 1") from exc
    except ForkliftError as exc:
        raise HttpError(400, str(exc)) from exc


def parse_quality(text: str | None) -> int:
    if not text:
        return DEFAULT_QUALITY
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise HttpError(400, f"quality={text!r} is not a whole number from 1 to 100")
    return int(text)


ROUTES = [
    Route("/predict/{model}", predict, methods=["POST"]),
    Route("/predict/{model}", describe, methods=["GET"]),
    Route("/", predict, methods=["POST"]),
]
