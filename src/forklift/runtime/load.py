"""Choosing and loading the engine for a model directory (an ONNX segmentation model by its forklift.json task).

Engines are imported only when chosen, and this module imports none of them, so that the CLI can offer RUNTIMES
without loading numpy or an engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forklift.errors import ForkliftError

if TYPE_CHECKING:
    from forklift.formats.model_dir import ModelDirectory
    from forklift.runtime.base import PredictOptions, Predictor
    from forklift.runtime.onnx_graph import GraphPredictor

RUNTIMES = ("onnx", "openvino", "torch", "opencv")
DEFAULT_RUNTIME = {"darknet": "openvino", "onnx": "onnx", "caffe": "opencv"}  # fastest measured (bench/predict.py)
SUPPORTED = {"darknet": ("onnx", "openvino", "torch", "opencv"), "onnx": ("onnx", "openvino"), "caffe": ("opencv",)}


def load_predictor(
    model: ModelDirectory, runtime: str | None = None, options: PredictOptions | None = None
) -> Predictor:
    from forklift.runtime.base import PredictOptions

    options = options or PredictOptions()
    runtime = runtime or DEFAULT_RUNTIME[model.kind]
    if runtime not in SUPPORTED[model.kind]:
        raise ForkliftError(
            f"{model.path}: a {model.kind} model runs with --runtime "
            f"{' or '.join(SUPPORTED[model.kind])}, not {runtime}"
        )
    if model.kind == "caffe":
        from forklift.runtime.opencv_caffe import CaffeFasterRCNNPredictor

        return CaffeFasterRCNNPredictor(model, options)
    if runtime in ("onnx", "openvino"):
        graph_predictor = _graph_predictor(runtime)
        if model.kind == "onnx" and model.config.task == "segment":
            from forklift.runtime.segment import SegmentPredictor

            return SegmentPredictor(model, options, graph_predictor.network_type)
        return graph_predictor(model, options)
    if runtime == "torch":
        from forklift.runtime.torch_runtime import TorchPredictor

        return TorchPredictor(model, options)
    from forklift.runtime.opencv_darknet import OpenCVDarknetPredictor

    return OpenCVDarknetPredictor(model, options)


def _graph_predictor(runtime: str) -> type[GraphPredictor]:
    """The class that runs an ONNX graph (a model's own or a Darknet export) on ONNX Runtime or OpenVINO."""
    if runtime == "openvino":
        from forklift.runtime.openvino_runtime import OpenVinoPredictor

        return OpenVinoPredictor
    from forklift.runtime.onnx_runtime import OnnxPredictor

    return OnnxPredictor
