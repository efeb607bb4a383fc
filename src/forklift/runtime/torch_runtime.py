"""PyTorch eager: the reference engine for Darknet models, and the one that runs on a GPU."""

from __future__ import annotations

import numpy as np
import torch

from forklift.model_files.model_dir import ModelDirectory
from forklift.nets.darknet import build_darknet
from forklift.runtime.base import PredictOptions
from forklift.runtime.darknet_predictor import DarknetPredictor
from forklift.vocabulary import Runtime, Task


class TorchPredictor(DarknetPredictor):
    runtime = Runtime.TORCH

    def __init__(self, model: ModelDirectory, options: PredictOptions, device: str = "cpu") -> None:
        self.net = build_darknet(model.files["cfg"], model.files["weights"]).to(device)
        task = Task.DETECT if self.net.is_detector else Task.CLASSIFY
        size = (self.net.input_width, self.net.input_height)
        super().__init__(model, options, size, task, self.net.classes)
        self.device = device
        if options.threads:
            torch.set_num_threads(options.threads)

    def infer(self, tensors: list[np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            batch = torch.from_numpy(np.stack(tensors)).to(self.device)
            return list(self.net(batch).float().cpu().numpy())
