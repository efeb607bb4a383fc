"""Fresh, reproducible weights for a Darknet net, with batch-norm statistics calibrated on generated input.

Random weights alone make activations grow or vanish through 75 layers; measuring each batch norm's running
mean and variance on a seeded noise image keeps every layer near unit scale, and scaling the convolutions
without batch norm (the ones feeding detection heads) to a fixed output spread keeps box sizes and scores
in a sane range, so outputs (and the reference comparisons that use them) are well conditioned.
"""

from __future__ import annotations

import torch
from torch import nn

from forklift.nets.darknet import Convolutional, DarknetNet

RESIDUAL_GAIN = (0.1, 0.3)  # batch-norm scale of a branch that feeds a shortcut: the sum grows slowly with depth


def initialise(net: DarknetNet, seed: int = 0, calibration_images: int = 4) -> DarknetNet:
    generator = torch.Generator().manual_seed(seed)
    feeds_shortcut = {i - 1 for i, section in enumerate(net.config.layers) if section.kind == "shortcut"}
    with torch.no_grad():
        for index, layer in enumerate(net.layers):
            if not isinstance(layer, Convolutional):
                continue
            weight = layer.conv.weight
            fan_in = weight[0].numel()
            weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=generator)
            if layer.conv.bias is not None:
                layer.conv.bias.normal_(0.0, 0.1, generator=generator)
            if layer.bn is not None:
                low, high = RESIDUAL_GAIN if index in feeds_shortcut else (0.8, 1.2)
                layer.bn.weight.uniform_(low, high, generator=generator)
                layer.bn.bias.normal_(0.0, 0.1, generator=generator)
        images = _calibration_images(net, calibration_images, generator)
        _calibrate_batch_norm(net, images)
        _calibrate_plain_convolutions(net, images, generator)
    return net


HEAD_SPREAD = 0.5  # standard deviation of the raw head outputs on calibration images


def _calibrate_plain_convolutions(net: DarknetNet, images: torch.Tensor, generator: torch.Generator) -> None:
    """Standardise each output channel of the convolutions without batch norm, keeping a random offset."""
    plain = [layer.conv for layer in net.layers if isinstance(layer, Convolutional) and layer.bn is None]
    stats: dict[nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}

    def record(module: nn.Module, _: object, out: torch.Tensor) -> None:
        stats[module] = (out.mean(dim=(0, 2, 3)), out.std(dim=(0, 2, 3)).clamp_min(1e-6))

    hooks = [conv.register_forward_hook(record) for conv in plain]
    net.eval()
    net.heads(images)
    for hook in hooks:
        hook.remove()
    for conv in plain:
        mean, std = stats[conv]
        factor = HEAD_SPREAD / std
        conv.weight.mul_(factor.view(-1, 1, 1, 1))
        conv.bias.sub_(mean).mul_(factor).add_(torch.randn(conv.bias.shape, generator=generator) * 0.3)


def _calibration_images(net: DarknetNet, count: int, generator: torch.Generator) -> torch.Tensor:
    """Overlapping flat rectangles of random colour with a little grain: edges and flat areas, like photos."""
    height, width = net.input_height, net.input_width
    images = torch.rand(count, net.config.channels, 1, 1, generator=generator).expand(-1, -1, height, width).clone()
    for image in images:
        for _ in range(24):
            x0, x1 = sorted(torch.randint(0, width, (2,), generator=generator).tolist())
            y0, y1 = sorted(torch.randint(0, height, (2,), generator=generator).tolist())
            image[:, y0 : y1 + 1, x0 : x1 + 1] = torch.rand(net.config.channels, 1, 1, generator=generator)
    images += 0.03 * torch.randn(images.shape, generator=generator)
    return images.clamp(0.0, 1.0)


def _calibrate_batch_norm(net: DarknetNet, images: torch.Tensor) -> None:
    norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative average: after one pass, exactly this batch's statistics
    was_training = net.training
    net.train()
    net.heads(images)
    net.train(was_training)
    for bn in norms:
        bn.momentum = 0.1
