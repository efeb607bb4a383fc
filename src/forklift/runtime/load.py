"""Choosing and loading the engine for a model directory (an ONNX segmentation or style model by its forklift.json
task, a torchvision detector by its "two_stage" settings).

Engines are imported only when chosen, and this module imports none of them, so that choosing costs nothing
until a model is loaded.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from forklift.errors import ForkliftError
from forklift.vocabulary import Precision, Runtime, Task, word

if TYPE_CHECKING:
    from forklift.model_files.model_dir import ModelDirectory
    from forklift.runtime.base import PredictOptions, Predictor
    from forklift.runtime.onnx_graph import GraphPredictor

DEFAULT_RUNTIME = {  # fastest measured
    "darknet": Runtime.OPENVINO,
    "onnx": Runtime.ONNX,
    "caffe": Runtime.OPENCV,
    "style": Runtime.OPENVINO,
}
SUPPORTED = {
    "darknet": (Runtime.ONNX, Runtime.OPENVINO, Runtime.TORCH, Runtime.OPENCV),
    "style": (Runtime.ONNX, Runtime.OPENVINO, Runtime.TORCH),
    "onnx": (Runtime.ONNX, Runtime.OPENVINO),
    "caffe": (Runtime.OPENCV,),
}
PRECISIONS = {  # what each engine computes in; INT8 runs the model directory's quantised graph
    Runtime.OPENVINO: (Precision.F32, Precision.BF16, Precision.INT8),
    Runtime.ONNX: (Precision.F32, Precision.INT8),  # ONNX Runtime has no bf16 kernels for CPUs
    Runtime.TORCH: (Precision.F32,),
    Runtime.OPENCV: (Precision.F32,),
}


def load_predictor(
    model: ModelDirectory, runtime: Runtime | str | None = None, options: PredictOptions | None = None
) -> Predictor:
    """The engine for the model: `runtime` when given (it must run this kind of model), else the fastest measured
    for its kind (bench/predict.py) that computes in the precision: the options', else the model's own (f32 unless
    its forklift.json says)."""
    from forklift.model_files.precision import default_precision
    from forklift.runtime.base import PredictOptions

    options = options or PredictOptions()
    precision = options.precision or default_precision(model)
    if runtime:
        runtime = word(Runtime, runtime, where="--runtime")
    else:  # the fastest engine for the kind that computes in the precision asked for
        runtime = next((r for r in _by_speed(model.kind, precision) if precision in PRECISIONS[r]), Runtime.OPENVINO)
    if runtime not in SUPPORTED[model.kind]:
        raise ForkliftError(
            f"{model.path}: a {model.kind} model runs with --runtime "
            f"{' or '.join(SUPPORTED[model.kind])}, not {runtime}"
        )
    if precision not in PRECISIONS[runtime]:
        raise ForkliftError(
            f"--precision {precision}: --runtime {runtime} computes in {' or '.join(PRECISIONS[runtime])}; "
            f"OpenVINO computes in {', '.join(PRECISIONS[Runtime.OPENVINO])}"
        )
    options = replace(options, precision=precision)
    if options.device != "cpu" and runtime != Runtime.TORCH:
        raise ForkliftError(f"{options.device}: only --runtime torch runs on a GPU, not --runtime {runtime}")
    if model.kind == "caffe":
        from forklift.runtime.opencv_caffe import CaffeFasterRCNNPredictor

        return CaffeFasterRCNNPredictor(model, options)
    if model.config.task == Task.STYLE:
        from forklift.runtime.style import StylePredictor, TorchStyleNetwork

        network = TorchStyleNetwork if runtime == Runtime.TORCH else _graph_predictor(runtime).network_type
        return StylePredictor(model, options, network)
    if runtime in (Runtime.ONNX, Runtime.OPENVINO):
        graph_predictor = _graph_predictor(runtime)
        if model.kind == "onnx" and model.config.task == Task.SEGMENT:
            from forklift.runtime.segment import SegmentPredictor

            return SegmentPredictor(model, options, graph_predictor.network_type)
        if model.kind == "onnx" and "two_stage" in model.config.extra:
            from forklift.runtime.two_stage import TwoStagePredictor

            return TwoStagePredictor(model, options, graph_predictor.network_type)
        return graph_predictor(model, options)
    if runtime == Runtime.TORCH:
        from forklift.runtime.torch_runtime import TorchPredictor

        return TorchPredictor(model, options, device=options.device)
    from forklift.runtime.opencv_darknet import OpenCVDarknetPredictor

    return OpenCVDarknetPredictor(model, options)


def _by_speed(kind: str, precision: Precision) -> list[Runtime]:
    """The engines of a kind of model, fastest first: for f32 its default (bench/predict.py); for bf16 and INT8
    OpenVINO, whose INT8 kernels run 4-5x ONNX Runtime's on the same QDQ graph here (bench/quantize)."""
    first = DEFAULT_RUNTIME[kind] if precision == Precision.F32 else Runtime.OPENVINO
    return [first, *(r for r in SUPPORTED[kind] if r != first)]


def _graph_predictor(runtime: Runtime) -> type[GraphPredictor]:
    """The class that runs an ONNX graph (a model's own or a Darknet export) on ONNX Runtime or OpenVINO."""
    if runtime == Runtime.OPENVINO:
        from forklift.runtime.openvino_runtime import OpenVinoPredictor

        return OpenVinoPredictor
    from forklift.runtime.onnx_runtime import OnnxPredictor

    return OnnxPredictor
