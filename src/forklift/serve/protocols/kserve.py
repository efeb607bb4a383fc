"""KServe / Triton v2 REST, with the binary tensor extension, so existing v2 clients work unchanged.

A served model takes the network input `images` (FP32, [batch, 3, height, width], RGB in [0, 1]; a segmentation
model's normalisation is that of its forklift.json) and answers its raw output: `detections` ([batch, rows,
5 + classes]: cx, cy, w, h as fractions of the input, objectness, class probabilities), `probabilities`
([batch, classes]) or `masks` (logits [batch, 1 + classes, h, w], background first).

A tabular model takes its graph's input `X` (FP32, [rows, width]: the rows as its features encode them, categories
one-hot, NaN a missing value where the model takes them) and answers `probabilities` or `scores` ([rows, classes])
or, a regressor, `predictions` ([rows, 1]); its rows are batched with other callers' as JSON rows are.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired, TypedDict

import numpy as np
from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from forklift import __version__
from forklift.model_files import tabular
from forklift.serve.pool import ModelPool
from forklift.serve.responses import HttpError
from forklift.serve.rows import output_name, output_tensor
from forklift.serve.state import ServeState, endpoint
from forklift.serve.uploads import read_body
from forklift.serve.worker import RowsJob, TensorJob
from forklift.vocabulary import Task

HEADER_LENGTH = "Inference-Header-Content-Length"
INPUT_NAME = "images"
OUTPUT_NAMES = {Task.DETECT: "detections", Task.CLASSIFY: "probabilities", Task.SEGMENT: "masks"}
DATATYPES = {"FP32": np.float32}
MODEL_VERSION = "1"  # the one version of a served model


class OutputTensor(TypedDict):
    """One output of an infer answer: its values inline (`data`) or after the JSON (`parameters`)."""

    name: str
    datatype: str
    shape: list[int]
    data: NotRequired[list[float]]
    parameters: NotRequired[dict[str, int]]


class InferAnswer(TypedDict):
    """The JSON of an infer answer; `id` echoes the request's when it has one."""

    model_name: str
    model_version: str
    outputs: list[OutputTensor]
    id: NotRequired[Any]


Parameter = StrictBool | StrictInt | StrictFloat | StrictStr  # what the v2 protocol allows as a parameter's value
Dimension = Annotated[StrictInt, Field(ge=-1, le=2**31 - 1)]


class TensorIn(BaseModel):
    """One input of an infer request: its values inline (`data`) or after the JSON (`binary_data_size`)."""

    name: str
    datatype: str
    shape: list[Dimension] = Field(max_length=8)
    data: list[Any] | None = None
    parameters: dict[str, Parameter] = Field(default_factory=dict)


class OutputWanted(BaseModel):
    name: str
    parameters: dict[str, Parameter] = Field(default_factory=dict)


class InferRequest(BaseModel):
    """The JSON of an infer request, checked before any of it is used: a malformed one is a 400 naming the field."""

    id: StrictStr | None = None
    inputs: list[TensorIn]
    outputs: list[OutputWanted] = Field(default_factory=list)
    parameters: dict[str, Parameter] = Field(default_factory=dict)


@dataclass(frozen=True)
class Signature:
    """A served model's v2 tensors (-1: any size), as its metadata lists them and its infer checks them."""

    input_name: str
    input_shape: list[int]
    output_name: str
    output_shape: list[int]
    missing_values: bool = False  # NaN in the input is a missing value (a tabular model that takes them)


def _signature(pool: ModelPool) -> Signature:
    served = pool.served
    if served.tabular is not None:
        settings = served.tabular
        columns = len(settings.classes) if settings.classification else 1
        return Signature(tabular.INPUT, [-1, settings.width], output_name(settings), [-1, columns],
                         settings.missing_values)  # fmt: skip
    if served.input_size is None:
        raise HttpError(400, f"model {pool.name!r} ({served.runtime}) takes images, not v2 tensors")
    height, width = served.input_size
    task = served.task
    classes = len(served.labels)
    output_shape = {
        Task.DETECT: [-1, -1, 5 + classes],
        Task.CLASSIFY: [-1, classes],
        Task.SEGMENT: [-1, 1 + classes, -1, -1],  # logits of background and each class, at the network's resolution
    }[task]
    return Signature(INPUT_NAME, [-1, 3, height, width], OUTPUT_NAMES[task], output_shape)


def _check_version(request: Request) -> None:
    """A served model has one version, "1" (its metadata's `versions`): another one named in the path is not here
    (404, as Triton answers), rather than answered by version 1 as if it were."""
    version = request.path_params.get("version")
    if version is not None and version != MODEL_VERSION:
        model = request.path_params["model"]
        raise HttpError(404, f"model {model!r} has no version {version!r} (its versions: {MODEL_VERSION})")


def _v2_model(request: Request) -> tuple[ModelPool, Signature]:
    state: ServeState = request.app.state.serve
    pool = state.pool(request.path_params["model"])
    _check_version(request)
    return pool, _signature(pool)


async def live(request: Request) -> Response:
    return JSONResponse({"live": True})


async def ready(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    ok = all(pool.ready for pool in state.pools.values())
    return JSONResponse({"ready": ok}, status_code=200 if ok else 503)


async def server_metadata(request: Request) -> Response:
    return JSONResponse({"name": "forklift", "version": __version__, "extensions": ["binary_tensor_data"]})


@endpoint("v2")
async def model_metadata(request: Request) -> Response:
    pool, signature = _v2_model(request)
    return JSONResponse({
        "name": pool.name,
        "versions": [MODEL_VERSION],
        "platform": f"forklift_{pool.served.runtime}",
        "inputs": [{"name": signature.input_name, "datatype": "FP32", "shape": signature.input_shape}],
        "outputs": [{"name": signature.output_name, "datatype": "FP32", "shape": signature.output_shape}],
    })  # fmt: skip


@endpoint("v2")
async def model_ready(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    name = request.path_params["model"]
    if name not in state.pools:
        raise HttpError(404, f"unknown model {name!r} (served: {', '.join(sorted(state.pools))})")
    _check_version(request)
    ok = state.pools[name].ready
    return JSONResponse({"name": name, "ready": ok}, status_code=200 if ok else 503)


def _split_body(request: Request, body: bytes) -> tuple[InferRequest, bytes]:
    length = request.headers.get(HEADER_LENGTH)
    if length is None:
        header, binary = body, b""
    elif not length.isdigit() or int(length) > len(body):
        raise HttpError(400, f"{HEADER_LENGTH}: {length!r} does not fit a body of {len(body)} bytes")
    else:
        header, binary = body[: int(length)], body[int(length) :]
    try:
        return InferRequest.model_validate_json(header), binary
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the inference request"
        raise HttpError(400, f"{where}: {first['msg']}") from exc


def _input_tensor(spec: TensorIn, binary: bytes, signature: Signature) -> np.ndarray:
    name, datatype, shape, expected_shape = spec.name, spec.datatype, spec.shape, signature.input_shape
    if name != signature.input_name:
        raise HttpError(400, f"unknown input {name!r}: this model takes {signature.input_name!r}")
    if datatype not in DATATYPES:
        raise HttpError(400, f"input {name!r}: datatype {datatype!r} is not supported (use FP32)")
    if len(shape) != len(expected_shape) or shape[1:] != expected_shape[1:]:
        raise HttpError(400, f"input {name!r}: shape {shape} does not match {expected_shape} (-1: any batch)")
    if shape[0] < 1:
        raise HttpError(400, f"input {name!r}: shape {shape} holds no rows; send a batch of 1 or more")
    count = int(np.prod(shape))
    size = spec.parameters.get("binary_data_size")
    if size is not None:
        if type(size) is not int:
            raise HttpError(400, f"input {name!r}: binary_data_size {size!r} is not a number of bytes")
        if spec.data is not None:
            raise HttpError(400, f"input {name!r}: give data or binary_data_size, not both")
        if size != count * 4:
            raise HttpError(400, f"input {name!r}: binary_data_size {size} is not shape {shape} FP32's {count * 4} "
                                 "bytes")  # fmt: skip
        if len(binary) != size:  # one input: the bytes after the JSON are its, no fewer and no more
            raise HttpError(400, f"input {name!r}: {len(binary)} bytes follow the JSON header, where "
                                 f"binary_data_size says {size}")  # fmt: skip
        values = given = np.frombuffer(binary, dtype="<f4")
    elif spec.data is None:
        raise HttpError(400, f"input {name!r}: no data (give data, or binary_data_size and the bytes after the JSON)")
    elif binary:
        raise HttpError(400, f"input {name!r}: its data is in the JSON, and {len(binary)} bytes follow it that no "
                             "input claims")  # fmt: skip
    else:
        if any(isinstance(value, list) for value in spec.data) and not _nested_as(spec.data, shape):
            raise HttpError(400, f"input {name!r}: its nested data is not shaped {shape} (or give it flat)")
        given = np.asarray(_json_numbers(spec.data, name), dtype=np.float64)  # as sent: 1e300 is named, unwarned
        if given.size != count:
            raise HttpError(400, f"input {name!r}: {given.size} values do not fill shape {shape}")
        with np.errstate(over="ignore"):
            values = given.astype(np.float32)
    bad = np.isinf(values) if signature.missing_values else ~np.isfinite(values)
    if bad.any():
        first = int(np.argmax(bad.reshape(-1)))
        where = [int(i) for i in np.unravel_index(first, shape)]
        allowed = "NaN is a missing value" if signature.missing_values else "this model takes no missing values"
        number = given.reshape(-1)[first]
        raise HttpError(400, f"input {name!r}: {number:g} at {where} is not a finite float32 number ({allowed})")
    return values.reshape(shape)


def _json_numbers(data: list[Any], name: str) -> list[float]:
    """The values of a JSON tensor, flat or nested, each a JSON number or null (a missing value, NaN): `true` or
    `"39"` are refused by position, as the rows route refuses them, where numpy would read them as 1 and 39."""
    flat: list[float] = []

    def gather(values: list[Any]) -> None:
        for value in values:
            if isinstance(value, list):
                gather(value)
            elif value is None:
                flat.append(math.nan)
            elif type(value) is float:
                flat.append(value)
            elif type(value) is int:
                try:
                    flat.append(float(value))
                except OverflowError:  # 400 digits: past float32 too, named by position as such below
                    flat.append(math.inf if value > 0 else -math.inf)
            else:
                raise HttpError(400, f"input {name!r}: data value {len(flat)} is {json.dumps(value)}, not a number")

    gather(data)
    return flat


def _nested_as(values: list[Any], shape: list[int]) -> bool:
    """Whether nested data holds lists exactly as `shape` says, row-major ([[1, 2], [3]] is no [2, 2] tensor)."""
    if len(values) != shape[0]:
        return False
    if len(shape) == 1:
        return not any(isinstance(value, list) for value in values)
    return all(isinstance(value, list) and _nested_as(value, shape[1:]) for value in values)


def _wants_binary(request: InferRequest, output_name: str) -> bool:
    for output in request.outputs:
        if output.name == output_name and "binary_data" in output.parameters:
            return _flag(output.parameters["binary_data"], f"outputs {output_name!r}: binary_data")
    return _flag(request.parameters.get("binary_data_output", False), "binary_data_output")


def _flag(value: object, name: str) -> bool:
    if type(value) is not bool:  # "false" is a string, and true as Python reads it
        raise HttpError(400, f"{name}: {json.dumps(value)} is not true or false")
    return value


async def _run(state: ServeState, pool: ModelPool, tensor: np.ndarray) -> np.ndarray:
    """The model's output for the input tensor: a tabular model's as rows, batched with other callers' rows."""
    if pool.served.tabular is not None:
        return output_tensor(await state.run(pool, RowsJob(tensor)))
    return await state.run(pool, TensorJob(tensor))


@endpoint("v2")
async def infer(request: Request) -> Response:
    state: ServeState = request.app.state.serve
    pool, signature = _v2_model(request)
    output_name = signature.output_name
    request_json, binary = _split_body(request, await read_body(request, state.options.tensor_limit))
    inputs = request_json.inputs
    if len(inputs) != 1:
        raise HttpError(400, f"this model takes one input ({signature.input_name!r}), not {len(inputs)}")
    unknown = [output.name for output in request_json.outputs if output.name != output_name]
    if unknown:
        raise HttpError(400, f"unknown output {unknown[0]!r}: this model gives {output_name!r}")
    tensor = _input_tensor(inputs[0], binary, signature)
    binary_answer = _wants_binary(request_json, output_name)
    output = np.ascontiguousarray(await _run(state, pool, tensor), dtype=np.float32)
    answer: InferAnswer = {"model_name": pool.name, "model_version": MODEL_VERSION, "outputs": []}
    if request_json.id is not None:
        answer["id"] = request_json.id
    described: OutputTensor = {"name": output_name, "datatype": "FP32", "shape": list(output.shape)}
    if not binary_answer:
        if not np.isfinite(output).all():  # JSON has no NaN: the binary form carries them
            raise HttpError(422, f"output {output_name!r} has NaN or infinite values, which JSON cannot carry: ask "
                                 f"for it as binary data (binary_data_output)")  # fmt: skip
        described["data"] = output.ravel().tolist()
        answer["outputs"].append(described)
        return JSONResponse(answer)
    data = output.tobytes()
    described["parameters"] = {"binary_data_size": len(data)}
    answer["outputs"].append(described)
    header = json.dumps(answer).encode()
    return Response(header + data, media_type="application/octet-stream", headers={HEADER_LENGTH: str(len(header))})


ROUTES = [
    Route("/v2", server_metadata, methods=["GET"]),
    Route("/v2/health/live", live, methods=["GET"]),
    Route("/v2/health/ready", ready, methods=["GET"]),
    Route("/v2/models/{model}", model_metadata, methods=["GET"]),
    Route("/v2/models/{model}/versions/{version}", model_metadata, methods=["GET"]),
    Route("/v2/models/{model}/ready", model_ready, methods=["GET"]),
    Route("/v2/models/{model}/versions/{version}/ready", model_ready, methods=["GET"]),
    Route("/v2/models/{model}/infer", infer, methods=["POST"]),
    Route("/v2/models/{model}/versions/{version}/infer", infer, methods=["POST"]),
]
