"""Semantic segmentation with ONNX Runtime or OpenVINO: a network whose output is logits [N, 1 + classes, h, w].

Each image is fitted to the network input (resize mode, then (pixel - mean) * scale in the model's colour order,
all from forklift.json), the class of each output pixel is the argmax of its logits, and the label map is cut to
the image's part of the input (letterbox) and resized back to the original size with nearest neighbour: cheap at
any image size, where resizing the logits first would hold 1 + classes floats per original pixel. The answer is
one Segment per class present, its pixels as COCO compressed RLE.
"""

from __future__ import annotations

import cv2
import numpy as np

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.base import Answering, PredictOptions, Predictor
from forklift.runtime.onnx_graph import Network, graph_path, input_size
from forklift.vision.masks import IGNORE, segments_from_labels
from forklift.vision.resize import Placement, fit
from forklift.vision.results import Segment
from forklift.vocabulary import ResizeMode, Task, word

DEFAULT_SCALE = 1 / 255  # without mean and scale in forklift.json: RGB in [0, 1], as the detectors take it


class SegmentPredictor(Predictor):
    """An ONNX segmentation model (forklift.json "task": "segment"), e.g. one `write_segment_model_dir` wrote."""

    def __init__(self, model: ModelDirectory, options: PredictOptions, network_type: type[Network]) -> None:
        super().__init__(model, options)
        path = graph_path(model, options.precision)
        config = model.config
        self.network = network_type(path, options)
        self.runtime = self.network.runtime
        self.input_width, self.input_height = input_size(model, path, self.network.input_shape)
        out_shape = self.network.output_shape
        channels = out_shape[1] if len(out_shape) == 4 else None
        if isinstance(channels, int) and channels != len(model.labels) + 1:
            raise ForkliftError(
                f"{model.files['labels']}: {len(model.labels)} labels, but the network gives {channels} channels "
                "(background + one per label)"
            )
        if len(model.labels) >= IGNORE:
            raise ForkliftError(f"{model.files['labels']}: {len(model.labels)} labels; masks hold at most {IGNORE - 1}")
        self.resize = word(ResizeMode, options.resize or config.resize or ResizeMode.STRETCH, where="--resize")
        where = model.files.get("config", model.path)
        self.mean = np.array(config.mean or [0.0, 0.0, 0.0], np.float32)
        self.scale = np.array(DEFAULT_SCALE if config.scale is None else config.scale, np.float32)
        if self.mean.shape != (3,) or self.scale.shape not in ((), (3,)):
            raise ForkliftError(f"{where}: mean needs 3 values and scale 1 or 3, not {config.mean} and {config.scale}")
        self.bgr = config.color_order == "bgr"

    @property
    def task(self) -> Task:
        return Task.SEGMENT

    def prepare(self, image: np.ndarray) -> tuple[np.ndarray, Placement]:
        fitted, placement = fit(image, self.input_width, self.input_height, self.resize)
        pixels = (fitted[..., ::-1] if self.bgr else fitted).astype(np.float32)
        tensor = (pixels - self.mean) * self.scale
        return np.ascontiguousarray(tensor.transpose(2, 0, 1)), placement

    def infer(self, tensors: list[np.ndarray]) -> list[np.ndarray]:
        return list(self.network.run(np.stack(tensors)))

    def finish(self, output: np.ndarray, meta: Placement, answering: Answering) -> list[Segment]:
        if output.ndim != 3 or output.shape[0] != len(self.model.labels) + 1:
            raise ForkliftError(
                f"{self.model.files['onnx']}: output {list(output.shape)} is not [1 + {len(self.model.labels)}, h, w]"
            )
        labels = output.argmax(axis=0).astype(np.uint8)
        return segments_from_labels(to_original(labels, meta, self.input_width, self.input_height), self.model.labels)


def to_original(labels: np.ndarray, placement: Placement, input_width: int, input_height: int) -> np.ndarray:
    """A label map over the network input (at the output's resolution) -> over the original image: the image's
    part of the input, resized with nearest neighbour."""
    fy, fx = labels.shape[0] / input_height, labels.shape[1] / input_width
    x1, y1 = round(placement.pad_x * fx), round(placement.pad_y * fy)
    x2 = round((placement.pad_x + placement.scale_x * placement.width) * fx)
    y2 = round((placement.pad_y + placement.scale_y * placement.height) * fy)
    inside = labels[y1 : max(y2, y1 + 1), x1 : max(x2, x1 + 1)]
    return cv2.resize(inside, (placement.width, placement.height), interpolation=cv2.INTER_NEAREST_EXACT)
