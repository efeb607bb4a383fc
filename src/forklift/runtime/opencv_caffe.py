"""OpenCV DNN on Caffe Faster R-CNN nets, with py-faster-rcnn's test-time pre- and post-processing.

The net itself only proposes regions and scores them; what py-faster-rcnn's `test.py` does around it (mean
subtraction, the shorter side to 600, per-class box deltas, per-class NMS) is what trained models expect,
so it is reproduced here, with the box arithmetic's "+1" pixel convention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from forklift.errors import ForkliftError
from forklift.model_files.caffe import class_names, load_caffe_net, num_classes, output_layer
from forklift.model_files.model_dir import ModelDirectory
from forklift.model_files.prototxt import read_prototxt
from forklift.runtime.base import Answering, PredictOptions, Predictor
from forklift.vision.boxes import per_class_nms
from forklift.vision.results import Detection
from forklift.vocabulary import Runtime

PIXEL_MEANS_BGR = (102.9801, 115.9465, 122.7717)  # py-faster-rcnn cfg.PIXEL_MEANS
TARGET_SIZE, MAX_SIZE = 600, 1000  # cfg.TEST.SCALES, cfg.TEST.MAX_SIZE
INPUTS = ("data", "im_info")
OUTPUTS = ("rois", "cls_prob", "bbox_pred")
# Largest log-scale size delta applied (torchvision's BoxCoder limit): keeps extreme deltas from overflowing.
MAX_LOG_DELTA = math.log(1000.0 / 16)


@dataclass(frozen=True)
class Scaling:
    """How the network input relates to the original image: input = original * scale."""

    scale: float
    width: int  # of the original image
    height: int


def decode_boxes(boxes: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """py-faster-rcnn's bbox_transform_inv: Nx4 boxes and NxCx4 deltas (dx, dy, dw, dh) -> NxCx4 boxes."""
    widths = boxes[:, 2:3] - boxes[:, 0:1] + 1.0
    heights = boxes[:, 3:4] - boxes[:, 1:2] + 1.0
    centre_x = deltas[..., 0] * widths + (boxes[:, 0:1] + 0.5 * widths)
    centre_y = deltas[..., 1] * heights + (boxes[:, 1:2] + 0.5 * heights)
    half_w = 0.5 * np.exp(np.minimum(deltas[..., 2], MAX_LOG_DELTA)) * widths
    half_h = 0.5 * np.exp(np.minimum(deltas[..., 3], MAX_LOG_DELTA)) * heights
    return np.stack([centre_x - half_w, centre_y - half_h, centre_x + half_w, centre_y + half_h], axis=-1)


def _clipped(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """Boxes inside the image, as py-faster-rcnn clips them: x in [0, width - 1], y in [0, height - 1]."""
    out = boxes.copy()
    out[..., 0::2] = out[..., 0::2].clip(0, width - 1)
    out[..., 1::2] = out[..., 1::2].clip(0, height - 1)
    return out


class CaffeFasterRCNNPredictor(Predictor):
    """py-faster-rcnn models (`*.prototxt` with the Python proposal layer or OpenCV's, `*.caffemodel`)."""

    runtime = Runtime.OPENCV

    def __init__(self, model: ModelDirectory, options: PredictOptions) -> None:
        super().__init__(model, options)
        if options.threads:
            cv2.setNumThreads(options.threads)
        prototxt = model.files["prototxt"]
        net = read_prototxt(prototxt)
        self.class_names = class_names(model, num_classes(net, str(prototxt)))
        self.outputs = [output_layer(net, blob, str(prototxt)) for blob in OUTPUTS]
        self.net = load_caffe_net(model, net)
        config = model.config
        self.bgr = (config.color_order or "bgr") == "bgr"
        mean = config.mean or (PIXEL_MEANS_BGR if self.bgr else PIXEL_MEANS_BGR[::-1])
        if len(mean) != 3:
            raise ForkliftError(f"{model.files.get('config', model.path)}: mean needs 3 values, not {mean}")
        self.mean = np.array(mean, dtype=np.float32)
        self.scale = config.scale
        self.target_size = int(config.extra.get("target_size", TARGET_SIZE))
        self.max_size = int(config.extra.get("max_size", MAX_SIZE))

    def _input_scale(self, height: int, width: int) -> float:
        """Shorter side to target_size, unless that makes the longer side exceed max_size."""
        scale = self.target_size / min(height, width)
        if round(scale * max(height, width)) > self.max_size:
            scale = self.max_size / max(height, width)
        return scale

    def prepare(self, image: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], Scaling]:
        height, width = image.shape[:2]
        pixels = (image[..., ::-1] if self.bgr else image).astype(np.float32) - self.mean
        if self.scale is not None:
            pixels *= np.asarray(self.scale, dtype=np.float32)
        scale = self._input_scale(height, width)
        resized = cv2.resize(pixels, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
        blob = np.ascontiguousarray(resized.transpose(2, 0, 1)[None])
        im_info = np.array([[resized.shape[0], resized.shape[1], scale]], dtype=np.float32)
        return (blob, im_info), Scaling(scale, width, height)

    def infer(self, tensors: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, ...]]:
        """One image at a time: each has its own input size."""
        outputs = []
        for inputs in tensors:
            for name, value in zip(INPUTS, inputs, strict=True):
                self.net.setInput(value, name)
            outputs.append(tuple(self.net.forward(self.outputs)))
        return outputs

    def finish(self, output: tuple[np.ndarray, ...], meta: Scaling, answering: Answering) -> list[Detection]:
        rois, cls_prob, bbox_pred = output
        real = (rois[:, 1:] != 0).any(axis=1)  # OpenCV pads its post_nms_topn proposal rows with zeros
        boxes = rois[real, 1:5] / meta.scale
        scores = cls_prob[real]
        predicted = _clipped(decode_boxes(boxes, bbox_pred[real].reshape(len(boxes), -1, 4)), meta.width, meta.height)
        rows, classes = np.nonzero(scores[:, 1:] >= answering.conf)  # class 0 is the background
        classes += 1
        candidates = predicted[rows, classes].astype(np.float32)
        confidences = scores[rows, classes].astype(np.float32)
        kept = per_class_nms(candidates, confidences, classes, self.iou)
        return [
            Detection.from_corners(candidates[i], self.class_names[classes[i]], float(confidences[i])) for i in kept
        ]
