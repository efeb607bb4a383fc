"""Choosing and loading the engine for a model directory (an ONNX segmentation model by its forklift.json task)."""

from __future__ import annotations

from forklift.errors import ForkliftError
from forklift.formats.model_dir import ModelDirectory
from forklift.runtime.base import PredictOptions, Predictor

RUNTIMES = ("onnx", "torch", "opencv")
DEFAULT_RUNTIME = {"darknet": "onnx", "onnx": "onnx", "caffe": "opencv"}
SUPPORTED = {"darknet": ("onnx", "torch", "opencv"), "onnx": ("onnx",), "caffe": ("opencv",)}


def load_predictor(
    model: ModelDirectory, runtime: str | None = None, options: PredictOptions | None = None
) -> Predictor:
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
    if model.kind == "onnx" and model.config.task == "segment":
        from forklift.runtime.segment import SegmentPredictor

        return SegmentPredictor(model, options)
    if runtime == "onnx":
        from forklift.runtime.onnx_runtime import OnnxPredictor

        return OnnxPredictor(model, options)
    if runtime == "torch":
        from forklift.runtime.torch_runtime import TorchPredictor

        return TorchPredictor(model, options)
    from forklift.runtime.opencv_darknet import OpenCVDarknetPredictor

    return OpenCVDarknetPredictor(model, options)
