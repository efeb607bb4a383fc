"""The perceptual loss of fast neural style: a fixed VGG16 compares the styled image with its content image
(features of relu2_2) and with the style image (Gram matrices of relu1_2, relu2_2, relu3_3, relu4_3).

The loss network's weights are the file torchvision downloads for `vgg16(weights="IMAGENET1K_V1")`; nothing is
downloaded here, so the user gives the file. A seeded random VGG16 (tests) carries some texture statistics, but
the styles it teaches are not what ImageNet features teach.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torchvision.models import vgg16

from forklift.errors import ForkliftError

LAYERS = (3, 8, 15, 22)  # indices in vgg16().features of relu1_2, relu2_2, relu3_3, relu4_3
CONTENT_LAYER = 1  # relu2_2
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class LossNetwork(nn.Module):
    """VGG16's convolutional part up to relu4_3, frozen; `forward` takes RGB 0–255 and gives the four features."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, weights: Path) -> None:
        super().__init__()
        if not Path(weights).is_file():
            raise ForkliftError(f"--loss-net-weights {weights}: no such file (torchvision's vgg16 ImageNet weights)")
        try:
            state = torch.load(weights, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises pickle, zip and runtime errors for files it cannot read
            raise ForkliftError(
                f"--loss-net-weights {weights}: not a PyTorch state dict ({type(exc).__name__})"
            ) from exc
        features = {k.removeprefix("features."): v for k, v in state.items() if k.startswith("features.")}
        net = vgg16(weights=None).features[: LAYERS[-1] + 1]
        try:
            net.load_state_dict({k: v for k, v in features.items() if int(k.split(".")[0]) <= LAYERS[-1]})
        except (RuntimeError, ValueError) as exc:
            raise ForkliftError(f"--loss-net-weights {weights}: not VGG16's weights ({str(exc)[:160]})") from exc
        self.features = net.eval().requires_grad_(False)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255)

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        x = (images - self.mean) / self.std
        found = []
        for index, layer in enumerate(self.features):
            x = layer(x)
            if index in LAYERS:
                found.append(x)
        return found


def gram(features: torch.Tensor) -> torch.Tensor:
    """[N, C, H, W] -> [N, C, C], normalised by C * H * W."""
    n, c, h, w = features.shape
    flat = features.reshape(n, c, h * w)
    return flat @ flat.transpose(1, 2) / (c * h * w)


def random_vgg16_weights(path: Path, *, seed: int = 0) -> Path:
    """A VGG16 state dict with seeded random weights in torchvision's key names, its convolutional part only (the
    loss reads no more; the classifier would add 500 MB): for tests."""
    torch.manual_seed(seed)
    torch.save({f"features.{k}": v for k, v in vgg16(weights=None).features.state_dict().items()}, path)
    return path
