"""A tabular model's rows over HTTP: the JSON body of `POST /predict/{model}` read into the matrix its graph takes,
and its answer as JSON or as a v2 output tensor.

The server encodes rows itself, before they are queued: encoding is cheap, and a bad row is refused (400, one line
naming the row and the feature) without taking a worker's turn or a place in a batch of other callers' rows.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
from starlette.requests import Request

from forklift.errors import ForkliftError
from forklift.model_files.tabular import TabularSettings, encode_records
from forklift.runtime.tabular import RowsAnswer
from forklift.serve.responses import HttpError
from forklift.vision.results import Timing

ROWS_KEY = "rows"
BODY = '{"rows": [...]}'


def sends_json(request: Request) -> bool:
    """Whether the request says its body is JSON: rows, which a model of images refuses before reading them."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def parse_rows(body: bytes, settings: TabularSettings) -> np.ndarray:
    """`{"rows": [...]}` or a bare list of rows, each an object by feature name or an array in the features' order,
    as the graph's float32 input."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:  # its message names the line and column, or the nesting's limit
        if exc.doc[exc.pos : exc.pos + 3] in ("NaN", "Inf"):  # -Infinity's too: at its I (pos counts characters)
            raise HttpError(400, f"the body is not JSON ({exc}): NaN and Infinity are no JSON numbers; send null "
                                 "for a missing value") from exc  # fmt: skip
        raise HttpError(400, f"the body is not JSON ({exc}): send {BODY}") from exc
    try:
        return encode_records(settings, _records(document))
    except ForkliftError as exc:
        raise HttpError(400, str(exc)) from exc


def _records(document: Any) -> list[Any]:
    if isinstance(document, dict):
        unknown = [key for key in document if key != ROWS_KEY]
        if unknown:
            raise HttpError(400, f"unknown key {unknown[0]!r}: the body is {BODY} or a list of rows")
        if ROWS_KEY not in document:
            raise HttpError(400, f"no {ROWS_KEY!r} in the body: send {BODY}")
        document = document[ROWS_KEY]
    if not isinstance(document, list):
        given = json.dumps(document)[:80]
        raise HttpError(400, f"the rows are a JSON array (of objects by feature name, or of arrays), not {given}")
    if not document:
        raise HttpError(400, f"no rows: send {BODY} with at least one row")
    return document


def output_name(settings: TabularSettings) -> str:
    """What the answer calls its numbers: class probabilities, class scores (a classifier without probabilities,
    such as the SVM), or predicted values (a regressor)."""
    if not settings.classification:
        return "predictions"
    return "probabilities" if settings.probabilities else "scores"


def output_tensor(answer: RowsAnswer) -> np.ndarray:
    """The v2 output: the class scores [rows, classes], or the predicted values [rows, 1]."""
    if answer.scores is not None:
        return answer.scores
    return np.asarray(answer.predictions, dtype=np.float32).reshape(-1, 1)


def rows_json(answer: RowsAnswer, settings: TabularSettings, *, preprocessing_s: float) -> dict[str, Any]:
    """The native answer: `{"status": "OK", "predictions": [...], "probabilities" (or "scores"): [[...]],
    "classes": [...], "timing": {...}}`; a regressor's has no scores or classes."""
    numbers = output_tensor(answer)
    if not np.isfinite(numbers).all():  # JSON has no NaN or infinity: inputs far beyond what the model was fitted on
        row = int(np.flatnonzero(~np.isfinite(numbers).all(axis=1))[0])
        raise HttpError(422, f"row {row}: the model's answer is not finite (an input far out of its range?)")
    body: dict[str, Any] = {"status": "OK", "predictions": answer.predictions}
    if answer.scores is not None:
        body[output_name(settings)] = answer.scores.tolist()
        body["classes"] = list(settings.classes)
    body["timing"] = Timing(preprocessing=preprocessing_s, inference=answer.timing.inference).to_json()
    return body
