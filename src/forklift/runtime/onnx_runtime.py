"""ONNX Runtime: the default CPU engine (fastest measured here), for ONNX models and exported Darknet models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from forklift.errors import ForkliftError
from forklift.formats.model_dir import ModelDirectory
from forklift.runtime.base import PredictOptions
from forklift.runtime.onnx_export import META_CLASSES, META_TASK, OUTPUT_NAMES, onnx_for_darknet
from forklift.runtime.yolo import YoloPredictor
from forklift.system.topology import available_cpus


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


def input_size(model: ModelDirectory, path: Path, shape: list) -> tuple[int, int]:
    """The network's input width and height: from the graph when fixed, else from forklift.json."""
    if all(isinstance(d, int) for d in shape[2:]):
        return shape[3], shape[2]
    width, height = model.config.input_width, model.config.input_height
    if not (width and height):
        raise ForkliftError(f"{path}: the input size is dynamic; set input_width/input_height in forklift.json")
    return width, height


class OnnxPredictor(YoloPredictor):
    runtime = "onnx"

    def __init__(self, model: ModelDirectory, options: PredictOptions) -> None:
        path = onnx_for_darknet(model) if model.kind == "darknet" else model.files["onnx"]
        self.session = open_session(path, options.threads, spin=options.spin)
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        if len(inputs) != 1 or len(outputs) != 1:
            raise ForkliftError(f"{path}: expected one input and one output, found {len(inputs)} and {len(outputs)}")
        self.input_name = inputs[0].name
        shape, out_shape = inputs[0].shape, outputs[0].shape
        facts = self.session.get_modelmeta().custom_metadata_map
        task = facts.get(META_TASK)
        task = task or {v: k for k, v in OUTPUT_NAMES.items()}.get(outputs[0].name) or model.config.task
        if task is None:
            raise ForkliftError(
                f'{path}: unknown output layout; set "task" in forklift.json (detect: rows of '
                "cx, cy, w, h, objectness, class probabilities; classify: class probabilities)"
            )
        if task == "segment":  # load_predictor picks the segment engine by forklift.json's task
            raise ForkliftError(f'{path}: a segmentation model; set "task": "segment" in its forklift.json')
        width, height = input_size(model, path, shape)
        width_of_rows = out_shape[-1] if isinstance(out_shape[-1], int) else None
        if META_CLASSES in facts:
            classes = int(facts[META_CLASSES])
        elif width_of_rows is not None:
            classes = width_of_rows - 5 if task == "detect" else width_of_rows
        else:
            raise ForkliftError(f"{path}: the number of classes is not in the output shape {out_shape}")
        super().__init__(model, options, (width, height), task, classes)

    def infer(self, tensors: list[np.ndarray]) -> list[np.ndarray]:
        (out,) = self.session.run(None, {self.input_name: np.stack(tensors)})
        return list(out)
