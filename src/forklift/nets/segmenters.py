"""torchvision's semantic segmentation architectures, built with seeded fresh weights and never a download."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torchvision.models import segmentation

from forklift.errors import ForkliftError

ARCHITECTURES: dict[str, Callable[..., nn.Module]] = {
    "lraspp_mobilenet_v3_large": segmentation.lraspp_mobilenet_v3_large,
    "deeplabv3_mobilenet_v3_large": segmentation.deeplabv3_mobilenet_v3_large,
    "deeplabv3_resnet50": segmentation.deeplabv3_resnet50,
    "deeplabv3_resnet101": segmentation.deeplabv3_resnet101,
    "fcn_resnet50": segmentation.fcn_resnet50,
    "fcn_resnet101": segmentation.fcn_resnet101,
}


def build_segmenter(arch: str, *, classes: int, seed: int) -> nn.Module:
    """The net for background + `classes` outputs, its fresh weights drawn from `seed` (the global RNG is left as
    it was)."""
    if arch not in ARCHITECTURES:
        raise ForkliftError(f"--arch {arch}: not a segmentation architecture; known: {', '.join(ARCHITECTURES)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ARCHITECTURES[arch](weights=None, weights_backbone=None, num_classes=1 + classes)
