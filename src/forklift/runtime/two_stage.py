"""torchvision detectors (Faster R-CNN and kin) exported by `write_two_stage_model_dir`, on ONNX Runtime or OpenVINO.

Each image is letterboxed to the graph's square input (RGB in [0, 1]: the graph normalises itself) and run on its
own, as the graph takes one image. The graph already did per-class NMS at forklift.json's iou (torchvision's
0.5); the predictor keeps scores >= conf, runs NMS again only when a caller asks for a lower iou, and maps the
boxes back to the original image.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory
from forklift.model_files.two_stage_settings import IOU, OUTPUTS, two_stage_settings
from forklift.runtime.base import Answering, PredictOptions, Predictor
from forklift.runtime.onnx_graph import Network, Shape, graph_path
from forklift.vision.boxes import per_class_nms
from forklift.vision.resize import Placement, fit
from forklift.vision.results import Detection
from forklift.vocabulary import ResizeMode, Runtime, Task

Found = tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes [K, 4], scores [K], labels [K] (1-based)


class AllOutputs(Network):
    """Mixed in before an engine's Network: the graph has three outputs where the Darknet-style graphs have one."""

    def declare(self, path: Path, inputs: list[Shape], outputs: dict[str, Shape], metadata: dict[str, str]) -> None:
        if len(inputs) != 1 or set(outputs) != set(OUTPUTS):
            raise ForkliftError(
                f"{path}: expected one input and the outputs {', '.join(OUTPUTS)}, "
                f"found {len(inputs)} inputs and {', '.join(outputs)}"
            )
        self.path, self.metadata, self.input_shape = path, metadata, inputs[0]
        self.output_name, self.output_shape = OUTPUTS[0], outputs[OUTPUTS[0]]

    def detect(self, image: np.ndarray) -> Found:
        """[1, 3, S, S] float32 -> boxes, scores and labels, through the engine the class was mixed with; OpenVINO
        answers "none found" as one row of uninitialised numbers with label 0 (the background), which is dropped."""
        engine = cast(Any, self)
        if self.runtime == Runtime.OPENVINO:
            answer = engine.request.infer({0: image})
            boxes, scores, labels = (answer[name] for name in OUTPUTS)
        else:
            boxes, scores, labels = engine.session.run(list(OUTPUTS), {engine.input_name: image})
        found = labels >= 1
        return boxes[found], scores[found], labels[found]


def with_all_outputs(network_type: type[Network]) -> type[AllOutputs]:
    """The engine's Network class taking the three outputs (`OnnxRuntimeNetwork` or `OpenVinoNetwork`)."""
    return cast(type[AllOutputs], type(f"TwoStage{network_type.__name__}", (AllOutputs, network_type), {}))


class TwoStagePredictor(Predictor):
    """A model directory `write_two_stage_model_dir` wrote (forklift.json has "two_stage"), on the given engine."""

    def __init__(self, model: ModelDirectory, options: PredictOptions, network_type: type[Network]) -> None:
        super().__init__(model, options)
        settings = two_stage_settings(model.config.extra, model.files.get("config", model.path))
        self.network = with_all_outputs(network_type)(graph_path(model, options.precision), options)
        self.runtime = self.network.runtime
        self.input_width = self.input_height = settings.image_size
        model.check_label_count(settings.classes)
        self.resize = ResizeMode.LETTERBOX  # the net was trained on letterboxed squares
        self.graph_iou = model.config.iou or IOU

    @property
    def task(self) -> Task:
        return Task.DETECT

    def prepare(self, image: np.ndarray) -> tuple[np.ndarray, Placement]:
        fitted, placement = fit(image, self.input_width, self.input_height, self.resize)
        tensor = np.ascontiguousarray(fitted.transpose(2, 0, 1)[None], dtype=np.float32) / 255.0
        return tensor, placement

    def infer(self, tensors: list[np.ndarray]) -> list[Found]:
        return [self.network.detect(tensor) for tensor in tensors]  # the graph takes one image

    def finish(self, output: Found, meta: Placement, answering: Answering) -> list[Detection]:
        boxes, scores, labels = output
        keep = scores >= answering.conf
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        if self.iou < self.graph_iou and len(scores):
            kept = per_class_nms(boxes, scores, labels, self.iou)
            boxes, scores, labels = boxes[kept], scores[kept], labels[kept]
        names = self.model.labels
        return [
            Detection.from_corners(box, label=names[int(label) - 1], score=float(score))
            for box, score, label in zip(meta.to_original(boxes), scores, labels, strict=True)
        ]
