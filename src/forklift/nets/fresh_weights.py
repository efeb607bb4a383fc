"""Fresh, reproducible weights for a Darknet net, with batch-norm statistics calibrated on generated input.

Random weights alone make activations grow or vanish through 75 layers; measuring each batch norm's running
mean and variance on a seeded noise image keeps every layer near unit scale, and scaling the convolutions
without batch norm (the ones feeding detection heads) to a fixed output spread keeps box sizes and scores
in a sane range, so outputs (and the reference comparisons that use them) are well conditioned.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from torch import nn

from forklift.errors import ForkliftError
from forklift.model_files.darknet_cfg import read_cfg
from forklift.model_files.labels import read_labels, write_labels
from forklift.nets.darknet import Convolutional, DarknetNet, DetectionHead, save_weights

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


BOX_SPREAD = 0.5  # raw box outputs: sizes mostly within e^(+-1) of the anchor
SCORE_SPREAD, SCORE_OFFSET = 1.5, -4.0  # raw objectness/class outputs: most scores small, a few high


def _channel_targets(
    net: DarknetNet, index: int, channels: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per output channel: the spread and mean that the raw output should have on calibration images."""
    spread = torch.full((channels,), BOX_SPREAD)
    mean = 0.3 * torch.randn(channels, generator=generator)
    following = net.layers[index + 1] if index + 1 < len(net.layers) else None
    if isinstance(following, DetectionHead):
        role = torch.arange(channels) % (5 + following.classes)
        scores = role >= 4
        spread[scores] = SCORE_SPREAD
        mean[scores] += SCORE_OFFSET
    return spread, mean


def _calibrate_plain_convolutions(net: DarknetNet, images: torch.Tensor, generator: torch.Generator) -> None:
    """Give each output channel of the convolutions without batch norm (the heads' inputs) a set spread and mean."""
    plain = {
        i: layer.conv for i, layer in enumerate(net.layers) if isinstance(layer, Convolutional) and layer.bn is None
    }
    stats: dict[nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}

    def record(module: nn.Module, _: object, out: torch.Tensor) -> None:
        stats[module] = (out.mean(dim=(0, 2, 3)), out.std(dim=(0, 2, 3)).clamp_min(1e-6))

    hooks = [conv.register_forward_hook(record) for conv in plain.values()]
    net.eval()
    net.heads(images)
    for hook in hooks:
        hook.remove()
    for index, conv in plain.items():
        mean, std = stats[conv]
        spread, target_mean = _channel_targets(net, index, conv.out_channels, generator)
        factor = spread / std
        conv.weight.mul_(factor.view(-1, 1, 1, 1))
        assert conv.bias is not None
        conv.bias.sub_(mean).mul_(factor).add_(target_mean)


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


QUIET_CHANNEL = 0.25


def _calibrate_batch_norm(net: DarknetNet, images: torch.Tensor) -> None:
    """Each batch norm scales by the root mean square of its input on the calibration images, mean left at 0.

    Subtracting a measured mean would leave an offset wherever real images differ from the calibration ones,
    and deep nets amplify such offsets; scaling alone only shrinks or grows activations, which stays sane.
    Done layer by layer in eval mode, so each layer is measured on what the calibrated layers before it give.
    """

    def measure(module: nn.BatchNorm2d, inputs: tuple[torch.Tensor, ...]) -> None:
        square = inputs[0].pow(2).mean(dim=(0, 2, 3))
        assert module.running_mean is not None and module.running_var is not None
        module.running_mean.zero_()
        # A channel nearly silent here may not be on photos: cap its gain at sqrt(1/QUIET) x its layer's.
        module.running_var.copy_(square.clamp_min(QUIET_CHANNEL * float(square.mean()) + 1e-6))

    hooks = [m.register_forward_pre_hook(measure) for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    net.eval()
    net.heads(images)
    for hook in hooks:
        hook.remove()


def new_darknet_dir(cfg: Path, names: Path, out: Path, seed: int = 0) -> Path:
    """A model directory with the cfg and names copied and freshly initialised weights, reproducible by seed."""
    net = DarknetNet(read_cfg(cfg))
    labels = read_labels(names)
    if len(labels) != net.classes:
        raise ForkliftError(f"{names}: {len(labels)} names, but {cfg.name} has {net.classes} classes")
    if out.exists() and any(out.iterdir()):
        raise ForkliftError(f"{out}: already exists and is not empty; choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    initialise(net, seed)
    shutil.copyfile(cfg, out / cfg.name)
    write_labels(out / f"{cfg.stem}.names", labels)
    save_weights(net, out / f"{cfg.stem}.weights")
    return out
