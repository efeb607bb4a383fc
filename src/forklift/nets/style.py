"""The feed-forward style network of fast neural style (Johnson et al.'s perceptual-loss paper, as the PyTorch
examples repository trains it): RGB 0–255 in, RGB 0–255 out, any height and width.

Layout, with the example's module names so its saved state dicts load as they are: three reflection-padded
convolutions down (`conv1` 9×9, `conv2` and `conv3` 3×3 stride 2), each with instance norm (`in1`..`in3`) and
ReLU; five residual blocks (`res1`..`res5`); two upsample-then-convolve layers up (`deconv1`, `deconv2`, nearest
×2 then a 3×3 convolution, avoiding transposed convolutions' checkerboard) with `in4`, `in5`; and `deconv3`, a
9×9 convolution to RGB. `width` scales every channel count (0.5, 0.25: the narrow variants for CPUs).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

from forklift.errors import ForkliftError

CHANNELS = (32, 64, 128)  # at width 1.0
RESIDUAL_BLOCKS = 5
RUNNING_STATS = re.compile(r"(^|\.)in\d+\.running_(mean|var)$")  # old PyTorch versions saved them


class ConvLayer(nn.Module):
    """Reflection padding (no dark border), then the convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.reflection_pad = nn.ReflectionPad2d(kernel // 2)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(self.reflection_pad(x))


class UpsampleConvLayer(ConvLayer):
    """Nearest-neighbour ×`upsample`, then a padded convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, *, upsample: int) -> None:
        super().__init__(in_channels, out_channels, kernel, 1)
        self.upsample = upsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(functional.interpolate(x, scale_factor=self.upsample, mode="nearest"))


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, 3, 1)
        self.in1 = nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, 3, 1)
        self.in2 = nn.InstanceNorm2d(channels, affine=True)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.in2(self.conv2(self.relu(self.in1(self.conv1(x)))))


class StyleNet(nn.Module):
    """[N, 3, H, W] RGB 0–255 -> the styled image at the same size (H and W multiples of 4 keep it exact; other
    sizes come out rounded, and the predictor resizes back)."""

    def __init__(self, *, width: float = 1.0) -> None:
        super().__init__()
        c1, c2, c3 = (max(4, round(c * width)) for c in CHANNELS)
        self.width = width
        self.conv1, self.in1 = ConvLayer(3, c1, 9, 1), nn.InstanceNorm2d(c1, affine=True)
        self.conv2, self.in2 = ConvLayer(c1, c2, 3, 2), nn.InstanceNorm2d(c2, affine=True)
        self.conv3, self.in3 = ConvLayer(c2, c3, 3, 2), nn.InstanceNorm2d(c3, affine=True)
        for index in range(1, RESIDUAL_BLOCKS + 1):
            self.add_module(f"res{index}", ResidualBlock(c3))
        self.deconv1, self.in4 = UpsampleConvLayer(c3, c2, 3, upsample=2), nn.InstanceNorm2d(c2, affine=True)
        self.deconv2, self.in5 = UpsampleConvLayer(c2, c1, 3, upsample=2), nn.InstanceNorm2d(c1, affine=True)
        self.deconv3 = ConvLayer(c1, 3, 9, 1)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.in1(self.conv1(x)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        for index in range(1, RESIDUAL_BLOCKS + 1):
            y = getattr(self, f"res{index}")(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y)


STYLE_KEYS = ("conv1.conv2d.weight", "in1.weight", "res1.conv1.conv2d.weight", "deconv3.conv2d.weight")


def is_style_state(state: dict[str, torch.Tensor]) -> bool:
    """A state dict of this network (its key names), whatever its width."""
    return all(key in state for key in STYLE_KEYS)


def style_net_from_state(state: dict[str, torch.Tensor]) -> StyleNet:
    """The network a state dict describes: its width read from `conv1`'s channels; instance-norm running
    statistics, which old PyTorch versions saved and which the network does not use, are dropped."""
    state = {key: value for key, value in state.items() if not RUNNING_STATS.search(key)}
    net = StyleNet(width=state["conv1.conv2d.weight"].shape[0] / CHANNELS[0])
    net.load_state_dict(state)
    return net.eval()


def load_style_net(path: Path) -> StyleNet:
    """The network saved in `path` (a state dict, as the PyTorch example and `forklift models new-style` save
    it), or one line saying what the file is instead."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip and runtime errors for files it cannot read
        raise ForkliftError(f"{path}: not a PyTorch state dict ({type(exc).__name__}: {str(exc)[:120]})") from exc
    if not isinstance(state, dict) or not is_style_state(state):
        raise ForkliftError(
            f"{path}: not a fast-neural-style state dict (expected keys such as {', '.join(STYLE_KEYS[:2])})"
        )
    try:
        return style_net_from_state(state)
    except RuntimeError as exc:  # load_state_dict: missing, unexpected or mis-shaped tensors
        raise ForkliftError(f"{path}: {str(exc).splitlines()[0]}") from exc
