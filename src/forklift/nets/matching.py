"""A weights file loaded into a torchvision net by name and shape: a whole net's state dict (a head for another
number of classes is left as it was), or an ImageNet classifier's, placed where the net keeps its backbone."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from forklift.errors import ForkliftError

# where a classifier's tensors sit in the nets that use it as a backbone: a detector's FPN body, a segmenter's
# backbone; "" for a file of the net itself
BACKBONE_PREFIXES = ("", "backbone.body.", "backbone.")


def load_matching(net: nn.Module, path: Path, arch: str) -> int:
    """Load the tensors of the file at `path` that match the net by name and shape; how many did."""
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip and OS errors alike for a file it cannot read
        raise ForkliftError(f"{path}: cannot read it as a state dict: {str(exc).splitlines()[0]}") from exc
    if isinstance(loaded, dict) and isinstance(loaded.get("model"), dict):
        loaded = loaded["model"]  # a training checkpoint
    if not isinstance(loaded, dict):
        raise ForkliftError(f"{path}: not a state dict (found {type(loaded).__name__})")
    own = net.state_dict()
    best: dict[str, torch.Tensor] = {}
    for prefix in BACKBONE_PREFIXES:
        for strip in ("", "features."):  # MobileNet's features are the body itself
            renamed = {prefix + k.removeprefix(strip): v for k, v in loaded.items() if isinstance(v, torch.Tensor)}
            fits = {k: v for k, v in renamed.items() if k in own and own[k].shape == v.shape}
            best = fits if len(fits) > len(best) else best
    if not best:
        raise ForkliftError(f"{path}: no tensor matches {arch} by name and shape; is it a weights file for it?")
    net.load_state_dict(best, strict=False)
    return len(best)
