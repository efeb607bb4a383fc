"""The OpenAPI description of `forklift serve`'s HTTP API, served at `GET /openapi.json`: every protocol's routes
with their parameters and bodies, the served models' names among them. For clients and their generators, for the
docs, and for the schema-driven test that sends the server whatever the description admits (no answer may be a
5xx). The v2 infer body's schema is the one the server validates with (kserve.InferRequest)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forklift import __version__
from forklift.serve.protocols.kserve import InferRequest
from forklift.serve.uploads import FIELD

Schema = dict[str, Any]

ERROR: Schema = {
    "type": "object",
    "properties": {"status": {"const": "error"}, "error": {"type": "string"}, "result": {"const": "fail"}},
    "required": ["status", "error"],
}
BINARY: Schema = {"type": "string", "format": "binary"}
JSON = "application/json"
ROW: Schema = {
    "description": "a row's values: an object by feature name, or an array in the features' order",
    "type": ["object", "array"],
}
ROWS: Schema = {  # a tabular model's body (forklift.serve.rows)
    "oneOf": [
        {
            "type": "object",
            "required": ["rows"],
            "properties": {"rows": {"type": "array", "items": ROW, "minItems": 1}},
            "additionalProperties": False,
        },
        {"type": "array", "items": ROW, "minItems": 1},
    ]
}


def _images_body(*fields: str) -> Schema:
    """Images as multipart `files` (with the form fields named), or one image as the raw body."""
    form = {
        "type": "object",
        "required": [FIELD],
        "properties": {FIELD: {"type": "array", "items": BINARY}, **{f: {"type": "string"} for f in fields}},
    }
    return {
        "required": True,
        "content": {
            "multipart/form-data": {"schema": form},
            "image/jpeg": {"schema": BINARY},
            "image/png": {"schema": BINARY},
        },
    }


def _predict_body() -> Schema:
    """Images for a model of images, JSON rows for a tabular model."""
    body = _images_body("conf")
    return {**body, "content": {**body["content"], JSON: {"schema": ROWS}}}


def _query(name: str, *, required: bool = False, schema: Schema | None = None) -> Schema:
    return {"name": name, "in": "query", "required": required, "schema": schema or {"type": "string"}}


def _operation(
    summary: str, *, parameters: Sequence[Schema] = (), body: Schema | None = None, ok: str = JSON
) -> Schema:
    operation: Schema = {
        "summary": summary,
        "parameters": list(parameters),
        "responses": {
            "200": {"description": "the answer", "content": {ok: {"schema": {}}}},
            "4XX": {"description": "what is wrong with the request", "content": {JSON: {"schema": ERROR}}},
            "503": {
                "description": "too many requests waiting, or a model not ready",
                "content": {JSON: {"schema": ERROR}},
            },
        },
    }
    if body is not None:
        operation["requestBody"] = body
    return operation


def openapi(models: list[str]) -> Schema:
    """The description of a server of `models`."""
    model = {"name": "model", "in": "path", "required": True, "schema": {"type": "string", "enum": sorted(models)}}
    version = {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}}
    conf = _query("conf", schema={"type": "number", "minimum": 0, "maximum": 1})
    infer = _operation(
        "KServe v2 inference (JSON tensors, or the binary tensor extension)",
        parameters=[model],
        body={"required": True, "content": {JSON: {"schema": {"$ref": "#/components/schemas/InferRequest"}}}},
    )
    metadata = _operation("KServe v2 model metadata: its input and output tensors", parameters=[model])
    ready = _operation("KServe v2: whether the model is ready", parameters=[model])
    paths: Schema = {
        "/predict/{model}": {
            "post": _operation(
                "forklift: detections, classes or masks of the images (an image-to-image model answers an image); "
                "a tabular model's predictions of JSON rows",
                parameters=[model, conf],
                body=_predict_body(),
            ),
            "get": _operation(
                "forklift: what the model takes and answers (a tabular model's features and the columns of its v2 "
                "tensor in order; an image model's task, labels and input size)",
                parameters=[model],
            ),
        },
        "/": {
            "post": _operation("forklift: /predict of the one model served", parameters=[conf], body=_predict_body())
        },
        "/api/dlapis/{model}": {
            "post": _operation(
                "PowerAI Vision: detect in an uploaded image", parameters=[model], body=_images_body("confthre")
            ),
            "get": _operation(
                "PowerAI Vision: detect in an image fetched by URL (hosts on --url-allow-host only)",
                parameters=[model, _query("imageUrl", required=True), _query("confthre")],
            ),
        },
        "/detect_upload": {
            "post": _operation(
                "PowerAI Vision's object-recognition deployment: detect in an upload",
                body=_images_body("model", "confthre"),
            )
        },
        "/detect_url": {
            "get": _operation(
                "PowerAI Vision's object-recognition deployment: detect in an image fetched by URL",
                parameters=[_query("url", required=True), _query("model"), _query("confthre")],
            )
        },
        "/test": {"get": _operation("PowerAI Vision's test page", ok="text/html")},
        "/live": {"get": _operation("the live page: a camera's frames answered over /stream/{model}", ok="text/html")},
        "/v2": {"get": _operation("KServe v2 server metadata")},
        "/v2/health/live": {"get": _operation("KServe v2: the server is live")},
        "/v2/health/ready": {"get": _operation("KServe v2: every model is ready")},
        "/v2/models/{model}": {"get": metadata},
        "/v2/models/{model}/versions/{version}": {"get": {**metadata, "parameters": [model, version]}},
        "/v2/models/{model}/ready": {"get": ready},
        "/v2/models/{model}/versions/{version}/ready": {"get": {**ready, "parameters": [model, version]}},
        "/v2/models/{model}/infer": {"post": infer},
        "/v2/models/{model}/versions/{version}/infer": {"post": {**infer, "parameters": [model, version]}},
        "/healthz": {"get": _operation("the models, their workers and whether they are ready")},
        "/metrics": {"get": _operation("Prometheus metrics", ok="text/plain")},
    }
    schemas = (request := InferRequest.model_json_schema(ref_template="#/components/schemas/{model}")).pop("$defs", {})
    return {
        "openapi": "3.1.0",
        "info": {"title": "forklift serve", "version": __version__},
        "paths": paths,
        "components": {"schemas": {**schemas, "InferRequest": request}},
    }
