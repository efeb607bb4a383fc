"""Darknet (YOLOv2/v3/v4, tiny variants, classifiers): `.cfg`, `.weights`, `.names`. OpenVINO runs its ONNX export
fastest here (bench/predict.py); PyTorch runs the net built from the cfg (and on GPUs); OpenCV DNN is the
independent reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.formats.onnx import graph_summary
from forklift.runtime.formats.registry import FormatEntry, graph_predictor, register
from forklift.runtime.summary import ModelFacts, torch_counts
from forklift.vocabulary import ModelFormat, Runtime, Task

if TYPE_CHECKING:
    from forklift.runtime.base import PredictOptions, Predictor


def _predictor(model: ModelDirectory, runtime: Runtime, options: PredictOptions) -> Predictor:
    if runtime == Runtime.TORCH:
        from forklift.runtime.torch_runtime import TorchPredictor

        return TorchPredictor(model, options, device=options.device)
    if runtime == Runtime.OPENCV:
        from forklift.runtime.opencv_darknet import OpenCVDarknetPredictor

        return OpenCVDarknetPredictor(model, options)
    return graph_predictor(runtime)(model, options)


def _summary(model: ModelDirectory) -> ModelFacts:
    if importlib.util.find_spec("torch") is None:  # the core install: its export tells, but for the FLOPs
        facts = graph_summary(model, _predictor)
        model.check_label_count(facts.classes)
        return facts
    import torch

    from forklift.nets.darknet import build_darknet

    net = build_darknet(model.files["cfg"], model.files["weights"])
    model.check_label_count(net.classes)
    parameters, flops = torch_counts(net, torch.zeros(1, net.config.channels, net.input_height, net.input_width))
    return ModelFacts(
        task=Task.DETECT if net.is_detector else Task.CLASSIFY,
        classes=net.classes,
        input_width=net.input_width,
        input_height=net.input_height,
        parameters=parameters,
        flops=flops,
    )


def _export(model: ModelDirectory, out: Path) -> Path:
    from forklift.runtime.onnx_export import export_darknet

    return export_darknet(model, out)


ENTRY = register(
    FormatEntry(
        ModelFormat.DARKNET,
        runtimes=(Runtime.OPENVINO, Runtime.ONNX, Runtime.TORCH, Runtime.OPENCV),
        predictor=_predictor,
        summary=_summary,
        export=_export,
    )
)
