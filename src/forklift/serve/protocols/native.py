"""forklift's own protocol: `POST /predict/{model}` (and `POST /` for a single model) -> the result JSON, or for
an image-to-image model the answered image (JPEG, or PNG when `Accept` asks for it; `quality` sets JPEG's)."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forklift.serve.pool import ModelPool
from forklift.serve.responses import HttpError
from forklift.serve.state import ServeState, endpoint, parse_conf
from forklift.serve.uploads import read_images
from forklift.serve.worker import Encoding, ImagesJob
from forklift.vision.images import IMAGE_FORMATS
from forklift.vision.results import Prediction
from forklift.vocabulary import Task

DEFAULT_QUALITY = 90


@endpoint("native")
async def predict(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    pool = state.pool(request.path_params.get("model"))
    images, fields = await read_images(request, state.options.max_upload_bytes)
    conf = parse_conf(fields.get("conf") or request.query_params.get("conf"), "conf")
    if pool.facts.get("task") == Task.STYLE:
        return await _answer_image(request, state, pool, images, fields)
    prediction = await state.run(pool, ImagesJob(images, conf))
    body = prediction.to_json()
    errors = [r.error for r in prediction.results if r.error is not None]
    if errors:
        body["error"] = "; ".join(errors)
        if len(errors) == len(prediction.results):
            raise HttpError(400, body["error"])
        return JSONResponse(body, status_code=400)
    return JSONResponse(body)


async def _answer_image(
    request: Request, state: ServeState, pool: ModelPool, images: list[tuple[str, bytes]], fields: dict[str, str]
) -> Response:
    """One image in, its answer image out, with the stages' timing in the X-Forklift-Timing header (JSON)."""
    if len(images) != 1:
        raise HttpError(400, f"model {pool.name!r} answers one image with one image; this request has {len(images)}")
    quality = parse_quality(fields.get("quality") or request.query_params.get("quality"))
    encoding = Encoding(image_format=answer_format(request.headers.get("accept", "")), quality=quality)
    prediction: Prediction = await state.run(pool, ImagesJob(images, None, encoding))
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


def parse_quality(text: str | None) -> int:
    if not text:
        return DEFAULT_QUALITY
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise HttpError(400, f"quality={text!r} is not a whole number from 1 to 100")
    return int(text)


ROUTES = [
    Route("/predict/{model}", predict, methods=["POST"]),
    Route("/", predict, methods=["POST"]),
]
