"""An ONNX graph to INT8 with NNCF's post-training quantisation: a QDQ graph (QuantizeLinear / DequantizeLinear
around the quantised layers) that ONNX Runtime and OpenVINO both run with their INT8 kernels, or where NNCF's
ONNX backend fails, an OpenVINO IR from its OpenVINO backend.

Only the layers up to the last weighted ones (convolutions, matrix products) are quantised: what follows them is
decoding (box arithmetic, sigmoids, softmax, resizing of masks), where 8 bits would move boxes and scores while
saving almost no time. The graph keeps the source's metadata, with the digest of the model files it was made
from, so an INT8 graph beside changed weights is never used.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from forklift.atomic import written_atomically
from forklift.errors import ForkliftError
from forklift.model_files.precision import INT8_GRAPHS
from forklift.runtime.onnx_export import IR_FACTS, META_SOURCE
from forklift.vocabulary import Runtime

WEIGHTED = ("Conv", "ConvTranspose", "MatMul", "Gemm")
Validation = tuple[Iterable[Any], Callable[[Any, Iterable[Any]], float]]  # val items, measure(graph, items)
FLOAT_LAYERS = 3  # most layers accuracy control may keep in float: past that INT8 is little faster than bf16
# Nodes NNCF's ONNX backend fails on (its statistics pass loses the inputs of torchvision's RoI heads), found after
# 18 s of a two-stage detector's calibration: a graph with one goes to the OpenVINO backend at once.
ONNX_BACKEND_FAILS_ON = ("RoiAlign",)


def decode_tail(graph: onnx.GraphProto) -> list[str]:
    """The nodes no weighted layer depends on: everything after the network's last convolutions."""
    producer = {output: node for node in graph.node for output in node.output}
    feeding: set[str] = set()
    stack = [node for node in graph.node if node.op_type in WEIGHTED]
    while stack:
        node = stack.pop()
        if node.name in feeding:
            continue
        feeding.add(node.name)
        stack.extend(producer[name] for name in node.input if name in producer)
    return [node.name for node in graph.node if node.name not in feeding]


def quantize_graph(
    source: Path,
    inputs: list[np.ndarray],
    directory: Path,
    *,
    digest: str,
    runtime: Runtime = Runtime.OPENVINO,
    onnx_backend: bool = True,
    validation: Validation | None = None,
    max_drop: float = 0.01,
) -> Path:
    """Quantise `source` with ranges from `inputs` and write it as `directory`'s INT8 graph. With `validation`
    (items and a function that measures a graph on them), NNCF's accuracy control keeps the layers that cost most
    of the metric in float (up to FLOAT_LAYERS of them) until the drop is within `max_drop`.

    NNCF's ONNX backend makes a QDQ ONNX graph. Where it fails (its statistics pass breaks the shape arithmetic of
    torchvision's RoI heads) and the graph is for OpenVINO, its OpenVINO backend makes an OpenVINO IR instead;
    `onnx_backend=False` goes there at once (a second pass on a graph the first found the ONNX backend fails on)."""
    import nncf
    import onnxruntime

    nncf.set_log_level(logging.WARNING)  # its INFO lines name every node it leaves alone
    proto = onnx.load(str(source))
    facts = {entry.key: entry.value for entry in proto.metadata_props} | {META_SOURCE: digest}
    tail = decode_tail(proto.graph)
    name = proto.graph.input[0].name
    blocker = next((node for node in proto.graph.node if node.op_type in ONNX_BACKEND_FAILS_ON), None)
    if onnx_backend and blocker is not None and runtime == Runtime.OPENVINO:
        _say_openvino(source, f"its {blocker.op_type} node {blocker.name}")
        onnx_backend = False
    if onnx_backend:
        onnxruntime.set_default_logger_severity(4)  # a failed session's error comes back as one line, below
        try:
            graph = _quantize(
                proto, nncf.Dataset(inputs, lambda tensor: {name: tensor}), len(inputs), tail, validation, max_drop
            )
            return save_graph(graph, directory, facts=facts)
        except Exception as exc:  # NNCF and the ONNX Runtime session it runs raise their own untyped errors
            if runtime != Runtime.OPENVINO:
                raise ForkliftError(f"{source}: NNCF cannot quantise it: {_first_line(exc)}") from exc
            _say_openvino(source, _first_line(exc)[:120])
        finally:
            onnxruntime.set_default_logger_severity(2)  # ONNX Runtime's default: warnings
    with tempfile.TemporaryDirectory(prefix="forklift-ir-") as scratch:
        try:
            graph = _openvino_graph(source, Path(scratch))
            graph = _quantize(graph, nncf.Dataset(inputs), len(inputs), tail, validation, max_drop)
        except Exception as exc:  # as above, from OpenVINO's side
            raise ForkliftError(f"{source}: NNCF cannot quantise it: {_first_line(exc)}") from exc
        return save_graph(graph, directory, facts=facts)


@contextlib.contextmanager
def _progress_on_stderr() -> Iterator[None]:
    """NNCF's progress bars and log lines on stderr while it works: on stdout they came before the report that
    `--json` prints there, so the output was not JSON."""
    from nncf.common.logging import nncf_logger

    outs = (sys.stdout, sys.__stdout__)
    handlers = [h for h in nncf_logger.handlers if isinstance(h, logging.StreamHandler) and h.stream in outs]
    streams = [handler.setStream(sys.stderr) for handler in handlers]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)


def _quantize(
    graph: Any, calibration: Any, size: int, tail: list[str], validation: Validation | None, max_drop: float
) -> Any:
    """NNCF's quantisation of an ONNX or OpenVINO graph, with accuracy control when there is a validation."""
    import nncf

    scope = nncf.IgnoredScope(names=tail, validate=False)
    if validation is None:
        with _progress_on_stderr():
            return nncf.quantize(graph, calibration, subset_size=size, ignored_scope=scope)
    items, measure = validation
    with _progress_on_stderr():
        return nncf.quantize_with_accuracy_control(
            graph,
            calibration,
            nncf.Dataset(items),
            lambda candidate, chosen: (measure(candidate, chosen), None),
            max_drop=max_drop,
            subset_size=size,
            ignored_scope=scope,
            advanced_accuracy_restorer_parameters=nncf.AdvancedAccuracyRestorerParameters(
                max_num_iterations=FLOAT_LAYERS, num_ranking_workers=1
            ),
        )


def _openvino_graph(source: Path, scratch: Path) -> Any:
    """The ONNX graph as OpenVINO reads it, written out and read back: OpenVINO keeps nodes no output depends on
    as consumers of live ones, and NNCF's graph builder fails on those; the IR written holds only the live ones."""
    import openvino as ov

    core = ov.Core()
    ov.save_model(core.read_model(str(source)), scratch / "model.xml", compress_to_fp16=False)
    return core.read_model(str(scratch / "model.xml"))


def _say_openvino(source: Path, reason: str) -> None:
    print(
        f"NNCF's ONNX backend cannot quantise {source.name} ({reason}); using its OpenVINO backend, whose INT8 model "
        "runs on OpenVINO only",
        flush=True,
    )


def _first_line(exc: Exception) -> str:
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:300]


def save_graph(graph: Any, directory: Path, *, facts: dict[str, str]) -> Path:
    """Write `directory`'s INT8 graph (atomically): a QDQ ONNX graph with `facts` as its metadata, or an OpenVINO
    IR with them in its rt_info. The other kind, if there, is removed, so a directory has one INT8 graph."""
    onnx_path, ir_path = (directory / name for name in INT8_GRAPHS)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(graph, onnx.ModelProto):
        del graph.metadata_props[:]
        for key, value in facts.items():
            entry = graph.metadata_props.add()
            entry.key, entry.value = key, value
        with written_atomically(onnx_path) as partial:
            onnx.save(graph, str(partial))
        ir_path.unlink(missing_ok=True)
        ir_path.with_suffix(".bin").unlink(missing_ok=True)
        return onnx_path
    import openvino as ov

    for key, value in facts.items():
        graph.set_rt_info(value, [IR_FACTS, key])
    partial = ir_path.with_name(f".{ir_path.stem}.partial.xml")
    ov.save_model(graph, partial, compress_to_fp16=False)
    partial.with_suffix(".bin").replace(ir_path.with_suffix(".bin"))  # the IR reads the .bin named as its .xml
    partial.replace(ir_path)
    onnx_path.unlink(missing_ok=True)
    return ir_path
