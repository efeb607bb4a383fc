"""OpenVINO's CPU plugin: the same ONNX graph as ONNX Runtime, about 10 % faster on yolov3-tiny here.

Compiled for float32 results unless bf16 is asked for: on CPUs with bf16 (AVX512-BF16, AMX) the plugin otherwise
computes in bf16 by default, and scores then differ from ONNX Runtime's and PyTorch's by up to 50 % relative on
random weights, so bf16 is a choice a model's measured drop supports (`forklift models quantize`), never silent.
An INT8 graph's quantised layers run in INT8 whatever the hint; the hint covers the layers left in float.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

from forklift.errors import ForkliftError
from forklift.runtime.base import PredictOptions
from forklift.runtime.onnx_export import metadata
from forklift.runtime.onnx_graph import GraphPredictor, Network, Shape
from forklift.system.topology import available_cpus
from forklift.vocabulary import Precision, Runtime


def compile_config(threads: int | None, precision: Precision | None = None) -> dict[str, object]:
    """f32 unless bf16 is asked for (see the module's note), one stream that answers each call as soon as it can,
    and no thread pinning of OpenVINO's own: a serve worker is pinned by forklift already, and unpinned workers
    that each pinned their threads would all take the first CPUs. The CPU plugin has no switch for busy-waiting
    (its threads sleep when idle), so `PredictOptions.spin` changes nothing here."""
    return {
        "INFERENCE_PRECISION_HINT": "bf16" if precision == Precision.BF16 else "f32",
        "INFERENCE_NUM_THREADS": threads or available_cpus(),
        "PERFORMANCE_HINT": "LATENCY",
        "ENABLE_CPU_PINNING": False,
    }


def _sizes(shape: ov.PartialShape) -> Shape:
    return [d.get_length() if d.is_static else None for d in shape]


def _reason(exc: RuntimeError) -> str:
    """The first line of OpenVINO's message that is not its "Exception from <source file>" trace."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return next((line for line in lines if line and not line.startswith("Exception from")), type(exc).__name__)


class OpenVinoNetwork(Network):
    runtime = Runtime.OPENVINO

    def __init__(self, path: Path, options: PredictOptions) -> None:
        core = ov.Core()
        try:
            graph = core.read_model(str(path))
            compiled = core.compile_model(graph, "CPU", compile_config(options.threads, options.precision))
        except RuntimeError as exc:  # OpenVINO reports bad files and unsupported operators as RuntimeError
            raise ForkliftError(f"{path}: OpenVINO cannot load it: {_reason(exc)}") from exc
        outputs = {o.get_any_name(): _sizes(o.get_partial_shape()) for o in graph.outputs}
        self.declare(path, [_sizes(i.get_partial_shape()) for i in graph.inputs], outputs, metadata(path))
        self.request = compiled.create_infer_request()

    def run(self, batch: np.ndarray) -> np.ndarray:
        return self.request.infer({0: batch}, share_inputs=True)[0]


class OpenVinoPredictor(GraphPredictor):
    runtime = Runtime.OPENVINO
    network_type = OpenVinoNetwork
