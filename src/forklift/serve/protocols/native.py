"""forklift's own protocol: `POST /predict/{model}` (and `POST /` for a single model) -> the result JSON."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forklift.serve.responses import HttpError
from forklift.serve.state import ServeState, endpoint, parse_conf
from forklift.serve.uploads import read_images
from forklift.serve.worker import ImagesJob


@endpoint("native")
async def predict(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    pool = state.pool(request.path_params.get("model"))
    images, fields = await read_images(request, state.options.max_upload_bytes)
    conf = parse_conf(fields.get("conf") or request.query_params.get("conf"), "conf")
    prediction = await state.run(pool, ImagesJob(images, conf))
    body = prediction.to_json()
    errors = [r.error for r in prediction.results if r.error is not None]
    if errors:
        body["error"] = "; ".join(errors)
        if len(errors) == len(prediction.results):
            raise HttpError(400, body["error"])
        return JSONResponse(body, status_code=400)
    return JSONResponse(body)


ROUTES = [
    Route("/predict/{model}", predict, methods=["POST"]),
    Route("/", predict, methods=["POST"]),
]
