"""What every engine running a Darknet-style model shares: input preparation and reading detections back.

The network (in PyTorch, ONNX Runtime or OpenCV) returns decoded rows (see `forklift.nets.darknet`); engines
differ only in how they run it, so they subclass `DarknetPredictor` and implement `infer`.
"""

from __future__ import annotations

import numpy as np

from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.base import Answer, Answering, PredictOptions, Predictor
from forklift.vision.boxes import select_detections
from forklift.vision.resize import Placement, fit
from forklift.vision.results import ClassScore, Detection
from forklift.vocabulary import ResizeMode, Task, word

TOP_CLASSES = 5


class DarknetPredictor(Predictor):
    """Letterbox or stretch to the network size, RGB in [0, 1]; NMS and the map back to original pixels."""

    def __init__(
        self, model: ModelDirectory, options: PredictOptions, input_size: tuple[int, int], task: Task, classes: int
    ) -> None:
        super().__init__(model, options)
        self.input_width, self.input_height = input_size
        self._task = model.config.task or task
        self.resize = word(ResizeMode, options.resize or model.config.resize or ResizeMode.LETTERBOX, where="--resize")
        model.check_label_count(classes)

    @property
    def task(self) -> Task:
        return self._task

    def prepare(self, image: np.ndarray) -> tuple[np.ndarray, Placement]:
        fitted, placement = fit(image, self.input_width, self.input_height, self.resize)
        tensor = np.ascontiguousarray(fitted.transpose(2, 0, 1), dtype=np.float32) / 255.0
        return tensor, placement

    def finish(self, output: np.ndarray, meta: Placement, answering: Answering) -> Answer:
        labels = self.model.labels
        if self.task == Task.CLASSIFY:
            order = np.argsort(-output)[:TOP_CLASSES]
            return [ClassScore(labels[i], float(output[i])) for i in order]
        boxes, scores, class_ids = select_detections(
            output, answering.conf, self.iou, self.input_width, self.input_height
        )
        pixels = meta.to_original(boxes)
        return [
            Detection.from_corners(box, label=labels[c], score=float(s))
            for box, s, c in zip(pixels, scores, class_ids, strict=True)
        ]
