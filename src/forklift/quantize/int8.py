"""An ONNX graph to INT8 with NNCF's post-training quantisation: a QDQ graph (QuantizeLinear / DequantizeLinear
around the quantised layers) that ONNX Runtime and OpenVINO both run with their INT8 kernels.

Only the layers up to the last weighted ones (convolutions, matrix products) are quantised: what follows them is
decoding (box arithmetic, sigmoids, softmax, resizing of masks), where 8 bits would move boxes and scores while
saving almost no time. The graph keeps the source's metadata, with the digest of the model files it was made
from, so an INT8 graph beside changed weights is never used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from forklift.atomic import written_atomically
from forklift.errors import ForkliftError
from forklift.runtime.onnx_export import META_SOURCE

WEIGHTED = ("Conv", "ConvTranspose", "MatMul", "Gemm")
FLOAT_LAYERS = 3  # most layers accuracy control may keep in float: past that INT8 is little faster than bf16


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
    out: Path,
    *,
    digest: str,
    validation: tuple[Iterable[Any], Callable[[onnx.ModelProto, Iterable[Any]], float]] | None = None,
    max_drop: float = 0.01,
) -> Path:
    """Quantise `source` with ranges from `inputs` and write it to `out`. With `validation` (items and a function
    that measures a graph on them), NNCF's accuracy control keeps the layers that cost most of the metric in
    float (up to FLOAT_LAYERS of them) until the drop is within `max_drop`."""
    import nncf

    nncf.set_log_level(logging.WARNING)  # its INFO lines name every node it leaves alone
    proto = onnx.load(str(source))
    name = proto.graph.input[0].name
    calibration = nncf.Dataset(inputs, lambda tensor: {name: tensor})
    scope = nncf.IgnoredScope(names=decode_tail(proto.graph), validate=False)
    try:
        if validation is None:
            quantised = nncf.quantize(proto, calibration, subset_size=len(inputs), ignored_scope=scope)
        else:
            items, measure = validation
            quantised = nncf.quantize_with_accuracy_control(
                proto,
                calibration,
                nncf.Dataset(items),
                lambda graph, chosen: (measure(graph, chosen), None),
                max_drop=max_drop,
                subset_size=len(inputs),
                ignored_scope=scope,
                advanced_accuracy_restorer_parameters=nncf.AdvancedAccuracyRestorerParameters(
                    max_num_iterations=FLOAT_LAYERS, num_ranking_workers=1
                ),
            )
    except Exception as exc:  # NNCF and the ONNX Runtime session it runs raise their own untyped errors
        reason = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise ForkliftError(f"{source}: NNCF cannot quantise it: {reason[:300]}") from exc
    facts = {entry.key: entry.value for entry in proto.metadata_props}
    return save_graph(quantised, out, facts={**facts, META_SOURCE: digest})


def save_graph(graph: onnx.ModelProto, out: Path, *, facts: dict[str, str]) -> Path:
    """Write the graph to `out` (atomically) with `facts` as its metadata, replacing what it carried."""
    del graph.metadata_props[:]
    for key, value in facts.items():
        entry = graph.metadata_props.add()
        entry.key, entry.value = key, value
    with written_atomically(out) as partial:
        onnx.save(graph, str(partial))
    return out
