"""`forklift models inspect`: what a model directory holds, in numbers a person can check."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import cv2
import onnx
import torch
from onnx import numpy_helper
from torch.utils.flop_counter import FlopCounterMode

from forklift.model_files.model_dir import ModelDirectory
from forklift.nets.darknet import build_darknet
from forklift.runtime.base import FixedInput, PredictOptions
from forklift.vocabulary import Task


@dataclass
class ModelSummary:
    name: str
    format: str
    task: Task
    classes: int
    labels: list[str]
    input_width: int | None
    input_height: int | None
    parameters: int | None
    flops: int | None  # multiply-adds count twice
    files: dict[str, str]

    def to_json(self) -> dict:
        return asdict(self)


def _darknet(model: ModelDirectory) -> dict:
    net = build_darknet(model.files["cfg"], model.files["weights"])
    example = torch.zeros(1, net.config.channels, net.input_height, net.input_width)
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        net(example)
    return {
        "task": Task.DETECT if net.is_detector else Task.CLASSIFY,
        "classes": net.classes,
        "input_width": net.input_width,
        "input_height": net.input_height,
        "parameters": sum(p.numel() for p in net.parameters()),
        "flops": int(counter.get_total_flops()),
    }


def _caffe(model: ModelDirectory) -> dict:
    from forklift.model_files.caffe import class_names, load_caffe_net, num_classes
    from forklift.model_files.prototxt import read_prototxt

    tree = read_prototxt(model.files["prototxt"])
    classes = num_classes(tree, str(model.files["prototxt"]))
    net = load_caffe_net(model, tree)
    width = model.config.input_width or 1000
    height = model.config.input_height or 600
    parameters = sum(int(blob.size) for name in net.getLayerNames() for blob in net.getLayer(name).blobs)
    try:
        flops = int(net.getFLOPS([(1, 3, height, width), (1, 3)]))
    except cv2.error:
        flops = None
    return {
        "task": Task.DETECT,
        "classes": classes - 1,
        "labels": class_names(model, classes)[1:],  # index 0 is the background
        "input_width": width,
        "input_height": height,
        "parameters": parameters,
        "flops": flops,
    }


def _onnx(model: ModelDirectory) -> dict:
    from forklift.runtime.load import load_predictor

    predictor = load_predictor(model, "onnx", PredictOptions(threads=1))
    proto = onnx.load(str(model.files["onnx"]))
    return {
        "task": predictor.task,
        "classes": len(model.labels),
        "input_width": predictor.input_width if isinstance(predictor, FixedInput) else None,
        "input_height": predictor.input_height if isinstance(predictor, FixedInput) else None,
        "parameters": sum(int(numpy_helper.to_array(t).size) for t in proto.graph.initializer),
        "flops": None,
    }


def _two_stage(model: ModelDirectory) -> dict:
    """A torchvision detector's directory: counted on the PyTorch net its .pt rebuilds, on one letterboxed input."""
    from forklift.nets.two_stage import load_two_stage

    net, settings, _ = load_two_stage(model.path)
    example = torch.zeros(3, settings.image_size, settings.image_size)
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        net([example])
    return {
        "task": Task.DETECT,
        "classes": settings.classes,
        "input_width": settings.image_size,
        "input_height": settings.image_size,
        "parameters": sum(p.numel() for p in net.parameters()),
        "flops": int(counter.get_total_flops()),
    }


def summarise(model: ModelDirectory) -> ModelSummary:
    kind = "two_stage" if model.kind == "onnx" and "two_stage" in model.config.extra else model.kind
    facts = {"darknet": _darknet, "caffe": _caffe, "onnx": _onnx, "two_stage": _two_stage}[kind](model)
    files = {role: str(path) for role, path in model.files.items()}
    facts.setdefault("labels", model.labels)
    return ModelSummary(name=model.name, format=model.kind, files=files, **facts)
