"""Two-stage detectors (torchvision's Faster R-CNN and kin that forklift trained or exported): the `.onnx` graph,
the PyTorch `.pt` it was exported from, a labels file, and forklift.json's "two_stage" settings. ONNX Runtime is
fastest here on f32; OpenVINO runs bf16 and INT8."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.formats.onnx import copy_graph, graph_summary
from forklift.runtime.formats.registry import FormatEntry, graph_predictor, register
from forklift.runtime.summary import ModelFacts, torch_counts
from forklift.vocabulary import ModelFormat, Runtime, Task

if TYPE_CHECKING:
    from forklift.runtime.base import PredictOptions, Predictor


def _predictor(model: ModelDirectory, runtime: Runtime, options: PredictOptions) -> Predictor:
    from forklift.runtime.two_stage import TwoStagePredictor

    return TwoStagePredictor(model, options, graph_predictor(runtime).network_type)


def _summary(model: ModelDirectory) -> ModelFacts:
    """Counted on the PyTorch net its .pt rebuilds, on one letterboxed input; on its graph without torch."""
    if importlib.util.find_spec("torch") is None:  # the core install
        return graph_summary(model, _predictor)
    import torch

    from forklift.nets.two_stage import load_two_stage

    net, settings, _ = load_two_stage(model.path)
    parameters, flops = torch_counts(net, [torch.zeros(3, settings.image_size, settings.image_size)])
    return ModelFacts(
        task=Task.DETECT,
        classes=settings.classes,
        input_width=settings.image_size,
        input_height=settings.image_size,
        parameters=parameters,
        flops=flops,
    )


ENTRY = register(
    FormatEntry(
        ModelFormat.TWO_STAGE,
        runtimes=(Runtime.ONNX, Runtime.OPENVINO),
        predictor=_predictor,
        summary=_summary,
        export=copy_graph,
    )
)
