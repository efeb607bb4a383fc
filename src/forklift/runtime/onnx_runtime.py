"""ONNX Runtime: the default CPU engine, for ONNX models and exported Darknet models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from forklift.errors import ForkliftError
from forklift.runtime.base import PredictOptions
from forklift.runtime.onnx_graph import GraphPredictor, Network
from forklift.system.topology import available_cpus
from forklift.vocabulary import Runtime


def open_session(path: Path, threads: int | None, spin: bool = True) -> ort.InferenceSession:
    """`spin=False` lets idle intra-op threads sleep: a server's workers wait between requests, and spinning
    threads then burn the CPU other workers and the HTTP front need (measured: 45-54 ms of CPU a request
    with spinning, 37-41 ms without, for yolov3-tiny in 1 worker x 2 threads)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or available_cpus()
    options.inter_op_num_threads = 1
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime raises its own untyped errors for bad files
        raise ForkliftError(f"{path}: ONNX Runtime cannot load it: {str(exc).splitlines()[0]}") from exc


def _sizes(shape: list) -> list[int | None]:
    """ONNX Runtime names dynamic axes by strings (or None); only whole numbers are sizes."""
    return [d if isinstance(d, int) else None for d in shape]


class OnnxRuntimeNetwork(Network):
    runtime = Runtime.ONNX

    def __init__(self, path: Path, options: PredictOptions) -> None:
        if path.suffix == ".xml":
            raise ForkliftError(
                f"{path}: an OpenVINO IR (NNCF quantised this graph with its OpenVINO backend); "
                "run it with --runtime openvino"
            )
        self.session = open_session(path, options.threads, spin=options.spin)
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        facts = self.session.get_modelmeta().custom_metadata_map
        self.declare(path, [_sizes(i.shape) for i in inputs], {o.name: _sizes(o.shape) for o in outputs}, facts)
        self.input_name = inputs[0].name

    def run(self, batch: np.ndarray) -> np.ndarray:
        (out,) = self.session.run(None, {self.input_name: batch})
        return out


class OnnxPredictor(GraphPredictor):
    runtime = Runtime.ONNX
    network_type = OnnxRuntimeNetwork
