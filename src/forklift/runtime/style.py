"""Image-to-image models (task style): an RGB image 0–255 in, the styled image out at the input's size.

The same predictor runs a style network's state dict in PyTorch and any style graph in ONNX Runtime or
OpenVINO: forklift's own export (any height and width) or a graph fixed at one size, such as the ONNX model
zoo's 224×224 ones, to which each image is resized and whose answer is resized back.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.base import Answering, PredictOptions, Predictor
from forklift.runtime.onnx_graph import Network, graph_path
from forklift.vision.style_adjust import adjusted
from forklift.vocabulary import Runtime, Task

ANY_SIZE: list[int | None] = [None, 3, None, None]


class TorchStyleNetwork(Network):
    """A style network's state dict run by PyTorch eager on the options' device (a GPU: cuda:N); threads from the
    options on the CPU."""

    runtime = Runtime.TORCH

    def __init__(self, path: Path, options: PredictOptions) -> None:
        import torch  # here alone: an exported style graph runs without it

        from forklift.nets.style import load_style_net

        self.device = torch.device(options.device)
        self.net = load_style_net(path).to(self.device)
        if options.threads:
            torch.set_num_threads(options.threads)
        self.declare(path, [ANY_SIZE], {"styled": ANY_SIZE}, {})

    def run(self, batch: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return self.net(torch.from_numpy(batch).to(self.device)).cpu().numpy()


class StylePredictor(Predictor):
    """Answers each image with its styled version (ImageResult.image)."""

    def __init__(self, model: ModelDirectory, options: PredictOptions, network_type: type[Network]) -> None:
        super().__init__(model, options)
        torch_state = network_type.runtime == Runtime.TORCH
        path = model.files["state_dict"] if torch_state else graph_path(model, options.precision)
        self.network = network_type(path, options)
        self.runtime = self.network.runtime
        shape = self.network.input_shape
        if len(shape) != 4 or shape[1] not in (3, None):
            raise ForkliftError(f"{path}: a style model takes [N, 3, H, W] RGB images, not {shape}")
        height, width = shape[2:]
        self.fixed = (width, height) if isinstance(width, int) and isinstance(height, int) else None

    @property
    def task(self) -> Task:
        return Task.STYLE

    def prepare(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The network input, and the original (what `finish` sizes the answer to and adjusts it against)."""
        height, width = image.shape[:2]
        fitted = image
        if self.fixed is not None and (width, height) != self.fixed:
            fitted = cv2.resize(image, self.fixed, interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(fitted.transpose(2, 0, 1), dtype=np.float32), image

    def infer(self, tensors: list[np.ndarray]) -> list[np.ndarray]:
        """One batch when every image has the same size (a stream's frames), else one image at a time."""
        if len({tensor.shape for tensor in tensors}) == 1:
            return list(self.network.run(np.stack(tensors)))
        return [self.network.run(tensor[None])[0] for tensor in tensors]

    def finish(self, output: np.ndarray, meta: np.ndarray, answering: Answering) -> np.ndarray:
        if output.ndim != 3 or output.shape[0] != 3:
            raise ForkliftError(f"{self.network.path}: output {list(output.shape)} is not an RGB image [3, H, W]")
        styled = np.clip(output, 0, 255).astype(np.uint8).transpose(1, 2, 0)
        height, width = meta.shape[:2]
        if styled.shape[:2] != (height, width):  # a fixed-size graph, or sizes the network rounds to 4
            styled = cv2.resize(styled, (width, height), interpolation=cv2.INTER_LINEAR)
        styled = np.ascontiguousarray(styled)
        return adjusted(styled, meta, answering.style) if answering.style.changes else styled
