"""OpenCV DNN on Darknet files: a third engine, and the independent reference that forklift is tested against."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from forklift.model_files.darknet_cfg import read_cfg
from forklift.model_files.model_dir import ModelDirectory
from forklift.nets.darknet import DarknetNet
from forklift.runtime.base import PredictOptions
from forklift.runtime.darknet_predictor import DarknetPredictor
from forklift.vocabulary import Runtime, Task


def read_opencv_darknet(model: ModelDirectory, exact: bool = False) -> cv2.dnn.Net:
    """`exact` turns off Winograd convolutions (2-3x slower here) so that results compare at 1e-4."""
    net = cv2.dnn.readNetFromDarknet(str(model.files["cfg"]), str(model.files["weights"]))
    net.enableWinograd(not exact)
    return net


def opencv_rows(net: cv2.dnn.Net, batch: np.ndarray) -> np.ndarray:
    """Run and gather the detection layers' outputs as rows: [B, N, 5 + classes], class scores x objectness."""
    net.setInput(batch)
    outputs = net.forward(net.getUnconnectedOutLayersNames())
    rows = np.concatenate([o.reshape(batch.shape[0], -1, o.shape[-1]) for o in outputs], axis=1)
    return rows


class OpenCVDarknetPredictor(DarknetPredictor):
    runtime = Runtime.OPENCV

    def __init__(self, model: ModelDirectory, options: PredictOptions) -> None:
        with torch.device("meta"):  # the layer shapes only: no memory for weights OpenCV loads itself
            shape = DarknetNet(read_cfg(model.files["cfg"]))
        task = Task.DETECT if shape.is_detector else Task.CLASSIFY
        super().__init__(model, options, (shape.input_width, shape.input_height), task, shape.classes)
        if options.threads:
            cv2.setNumThreads(options.threads)
        self.net = read_opencv_darknet(model)

    def infer(self, tensors: list[np.ndarray]) -> list[np.ndarray]:
        batch = np.stack(tensors)
        if self.task == Task.CLASSIFY:
            self.net.setInput(batch)
            return list(self.net.forward().reshape(batch.shape[0], -1))
        rows = opencv_rows(self.net, batch)
        # OpenCV reports class scores already multiplied by objectness (and zeroed under its own threshold);
        # divide back so rows mean the same as forklift's own.
        objectness = np.clip(rows[..., 4:5], 1e-12, None)
        rows[..., 5:] = rows[..., 5:] / objectness
        return list(rows)
