"""`.caffemodel` files with random weights, for tests and for trying a Caffe net without its trained weights.

No trained caffemodel can be downloaded here and Caffe itself is not installed, so the schema below declares
just the fields a caffemodel needs, with the field numbers of Caffe's `caffe.proto` (NetParameter.name = 1,
.layer = 100; LayerParameter.name = 1, .type = 2, .blobs = 7; BlobProto.data = 5, .shape = 7;
BlobShape.dim = 1).
`BlobProto.data` is Caffe's packed `repeated float`: on the wire one length-delimited run of little-endian
float32, which is what a `bytes` field holds, so it is declared as bytes and filled from numpy in one copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from forklift.errors import ForkliftError
from forklift.model_files.prototxt import Message, Value, read_prototxt

_PACKAGE = "forklift.caffemodel"
_F = descriptor_pb2.FieldDescriptorProto


class _Field(NamedTuple):
    """One field of caffe.proto that the writer needs: its name, number, type, label and message type (or "")."""

    name: str
    number: int
    kind: int
    label: int
    message: str = ""


# message -> its fields
_SCHEMA: dict[str, tuple[_Field, ...]] = {
    "BlobShape": (_Field("dim", 1, _F.TYPE_INT64, _F.LABEL_REPEATED),),
    "BlobProto": (
        _Field("data", 5, _F.TYPE_BYTES, _F.LABEL_OPTIONAL),
        _Field("shape", 7, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, "BlobShape"),
    ),
    "LayerParameter": (
        _Field("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL),
        _Field("type", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL),
        _Field("blobs", 7, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "BlobProto"),
    ),
    "NetParameter": (
        _Field("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL),
        _Field("layer", 100, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "LayerParameter"),
    ),
}

# Network inputs are mean-subtracted 0..255 pixels (std ≈ 60 on photos): layers that read them also divide
# their weights by this, so activations stay near 1 and random box deltas stay small enough to decode.
INPUT_STD = 60.0
# Weightless layers that keep their input's shape, and weightless layers whose outputs no weighted layer of a
# supported net reads. Any other type may have weights this writer does not know, so it is refused.
_ELEMENTWISE = frozenset({"ReLU", "LRN", "Dropout", "Softmax", "Sigmoid", "TanH"})
_OPAQUE = frozenset({"Python", "Proposal", "Concat", "Eltwise", "Flatten", "Slice"})
_WEIGHTLESS = _ELEMENTWISE | _OPAQUE | {"Pooling", "ROIPooling", "Reshape", "Input"}


@cache
def _net_parameter_class() -> type[Any]:
    """NetParameter built from `_SCHEMA` in a private pool (no protoc step, no clash with other protos)."""
    file = descriptor_pb2.FileDescriptorProto(name="forklift_caffemodel.proto", package=_PACKAGE)
    for message_name, fields in _SCHEMA.items():
        message = file.message_type.add(name=message_name)
        for field in fields:
            entry = message.field.add(name=field.name, number=field.number, type=field.kind, label=field.label)
            if field.message:
                entry.type_name = f".{_PACKAGE}.{field.message}"
            if field.kind == _F.TYPE_INT64:
                entry.options.packed = True
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.NetParameter"))


@dataclass(frozen=True)
class _Features:
    """What flows along a blob, as far as weight shapes need it: channels, and H*W where it is fixed."""

    channels: int | None
    spatial: int | None = None


@dataclass(frozen=True)
class LayerWeights:
    """The blobs one layer needs: their shapes (weights first, then bias) and the weights' fan-in."""

    layer: str
    type: str
    shapes: list[tuple[int, ...]]
    fan_in: int
    reads_input: bool


def _int(layer: Message, block: str, key: str, default: int | None = None) -> int:
    value = layer.block(block).get(key, default)
    if not isinstance(value, int):
        raise ForkliftError(f"layer {layer.get('name')!r}: needs an integer {block}.{key}")
    return value


def _whole(value: Value, where: str) -> int:
    """A field that must be a whole number, so a block or a text there is a clear error rather than int()'s."""
    if not isinstance(value, int):
        raise ForkliftError(f"{where}: needs an integer, found {value!r}")
    return value


def _known(layer: Message, value: int | None) -> int:
    if value is None:
        raise ForkliftError(f"layer {layer.get('name')!r}: cannot infer its input's size to shape its weights")
    return value


def _weights(layer: Message, kind: str, features: _Features) -> tuple[list[tuple[int, ...]], int, _Features]:
    """Blob shapes, fan-in and output features of a Convolution or InnerProduct layer."""
    block = "convolution_param" if kind == "Convolution" else "inner_product_param"
    outputs = _int(layer, block, "num_output")
    channels = _known(layer, features.channels)
    weight: tuple[int, ...]
    if kind == "Convolution":
        sizes = layer.block(block).get_all("kernel_size")
        where = f"layer {layer.get('name')!r}: {block}.kernel_size"
        kernel_h = _whole(sizes[0], where) if sizes else _int(layer, block, "kernel_h")
        kernel_w = _whole(sizes[-1], where) if sizes else _int(layer, block, "kernel_w")
        per_group = channels // _int(layer, block, "group", 1)
        weight, out = (outputs, per_group, kernel_h, kernel_w), _Features(outputs)
    else:
        weight, out = (outputs, channels * _known(layer, features.spatial)), _Features(outputs, 1)
    bias = [] if str(layer.block(block).get("bias_term", "true")) == "false" else [(outputs,)]
    return [weight, *bias], math.prod(weight[1:]), out


def _passed_on(layer: Message, kind: str, features: _Features) -> _Features:
    """Output features of a weightless layer."""
    if kind == "ROIPooling":
        pooled = _int(layer, "roi_pooling_param", "pooled_h") * _int(layer, "roi_pooling_param", "pooled_w")
        return _Features(features.channels, pooled)
    if kind == "Reshape":
        dims = layer.block("reshape_param").block("shape").get_all("dim")
        channels = dims[1] if len(dims) > 1 else -1  # 0 copies the input's, -1 is inferred at run time
        if channels == 0:
            return features
        return _Features(channels if isinstance(channels, int) and channels > 0 else None)
    if kind == "Input":
        dims = layer.block("input_param").block("shape").get_all("dim")
        where = f"layer {layer.get('name')!r}: input_param.shape.dim"
        return _Features(_whole(dims[1], where) if len(dims) > 1 else None)
    if kind in _ELEMENTWISE:
        return features
    return _Features(features.channels if kind == "Pooling" else None)


def _input_features(net: Message) -> dict[str, _Features]:
    """Channels of the inputs declared at the top (`input` with `input_shape` or `input_dim`)."""
    shapes = [[_whole(d, "input_shape.dim") for d in shape.get_all("dim")] for shape in net.messages("input_shape")]
    dims = [_whole(d, "input_dim") for d in net.get_all("input_dim")]
    shapes = shapes or [dims[i : i + 4] for i in range(0, len(dims), 4)]
    names = [str(name) for name in net.get_all("input")]
    return {name: _Features(shape[1] if len(shape) > 1 else None) for name, shape in zip(names, shapes, strict=False)}


def weight_shapes(net: Message, source: str = "<prototxt>") -> list[LayerWeights]:
    """Every Convolution / InnerProduct layer's blob shapes, following channels from the inputs."""
    blobs = _input_features(net)
    inputs = set(blobs) | {
        str(top) for layer in net.messages("layer") if layer.get("type") == "Input" for top in layer.get_all("top")
    }
    found = []
    for layer in net.messages("layer"):
        kind = str(layer.get("type"))
        bottoms = [str(bottom) for bottom in layer.get_all("bottom")]
        features = blobs.get(bottoms[0], _Features(None)) if bottoms else _Features(None)
        try:
            if kind in ("Convolution", "InnerProduct"):
                shapes, fan_in, out = _weights(layer, kind, features)
                found.append(LayerWeights(str(layer.get("name")), kind, shapes, fan_in, bottoms[0] in inputs))
            elif kind in _WEIGHTLESS:
                out = _passed_on(layer, kind, features)
            else:
                raise ForkliftError(f"layer {layer.get('name')!r}: no random weights for type {kind!r}")
        except ForkliftError as exc:
            raise ForkliftError(f"{source}: {exc}") from exc
        for top in layer.get_all("top"):
            blobs[str(top)] = out
    return found


def _random_blobs(weights: LayerWeights, rng: np.random.Generator) -> list[np.ndarray]:
    """He-scaled Gaussian weights (std sqrt(2 / fan_in)) and zero biases."""
    std = math.sqrt(2.0 / weights.fan_in) / (INPUT_STD if weights.reads_input else 1.0)
    weight = rng.standard_normal(weights.shapes[0], dtype=np.float32) * np.float32(std)
    return [weight, *(np.zeros(shape, dtype=np.float32) for shape in weights.shapes[1:])]


def _checked_overrides(
    layers: list[LayerWeights], overrides: Mapping[str, Sequence[np.ndarray]], source: str
) -> dict[str, list[np.ndarray]]:
    """Overrides must name weighted layers and have their shapes (checked before any weights are drawn)."""
    by_name = {weights.layer: weights for weights in layers}
    unknown = sorted(set(overrides) - set(by_name))
    if unknown:
        raise ForkliftError(f"{source}: no weighted layer named {', '.join(map(repr, unknown))} to override")
    for name, blobs in overrides.items():
        shapes = [tuple(blob.shape) for blob in blobs]
        if shapes != by_name[name].shapes:
            raise ForkliftError(f"{source}: layer {name!r} has blobs of shapes {by_name[name].shapes}, not {shapes}")
    return {name: list(blobs) for name, blobs in overrides.items()}


def write_random_caffemodel(
    prototxt_path: str | Path,
    out_path: str | Path,
    seed: int = 0,
    overrides: Mapping[str, Sequence[np.ndarray]] | None = None,
) -> None:
    """Random weights for every weighted layer of the prototxt; `overrides` gives some layers' blobs instead.

    Each layer draws from its own stream (seed, layer index): an override leaves the other layers unchanged.
    """
    source = str(prototxt_path)
    prototxt = read_prototxt(Path(prototxt_path))
    layers = weight_shapes(prototxt, source)
    given = _checked_overrides(layers, overrides or {}, source)
    net = _net_parameter_class()(name=str(prototxt.get("name", "")))
    for index, weights in enumerate(layers):
        blobs = given.get(weights.layer) or _random_blobs(weights, np.random.default_rng([seed, index]))
        layer = net.layer.add(name=weights.layer, type=weights.type)
        for blob in blobs:
            data = np.ascontiguousarray(blob, dtype="<f4").tobytes()
            layer.blobs.add(data=data).shape.dim.extend(blob.shape)
    Path(out_path).write_bytes(net.SerializeToString())


def read_caffemodel(path: str | Path) -> dict[str, list[np.ndarray]]:
    """Layer name -> its blobs, for files with packed float data and `shape` (as Caffe and this writer do)."""
    net = _net_parameter_class()()
    try:
        net.ParseFromString(Path(path).read_bytes())
    except (OSError, DecodeError) as exc:
        raise ForkliftError(f"{path}: cannot read the caffemodel: {exc}") from exc
    return {
        layer.name: [np.frombuffer(b.data, dtype="<f4").reshape(tuple(b.shape.dim)) for b in layer.blobs]
        for layer in net.layer
    }
