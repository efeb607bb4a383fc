"""torchvision's detectors "optimized for accuracy" (Faster R-CNN and its one-stage kin) with forklift's settings.

Weights are never downloaded: a net starts from seeded fresh weights, or from a file torchvision would have
downloaded (a whole detector's state dict or a backbone's), handed over by path. Inputs are letterboxed squares of
`image_size`, so the model's own transform is told min_size = max_size = image_size and never resizes again; it
still normalises with ImageNet's mean and std inside the net, so callers give RGB in [0, 1].
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchvision.models import detection
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.rpn import RPNHead

from forklift.errors import ForkliftError
from forklift.model_files.two_stage_settings import ARCHITECTURE_NAMES, TwoStageSettings, two_stage_settings
from forklift.nets.matching import load_matching

ARCHITECTURES: dict[str, Callable[..., nn.Module]] = {name: getattr(detection, name) for name in ARCHITECTURE_NAMES}
OCTAVES = (1.0, 2 ** (1 / 3), 2 ** (2 / 3))  # RetinaNet's three anchor scales per level, kept around a given size


def _builder_options(settings: TwoStageSettings) -> dict[str, Any]:
    """torchvision's keyword arguments for the settings: no download, no second resize, the proposal count."""
    options: dict[str, Any] = {
        "weights": None,
        "weights_backbone": None,
        "num_classes": settings.classes + 1,  # label 0 is the background, as torchvision's detectors count
        "min_size": settings.image_size,
        "max_size": settings.image_size,
    }
    if settings.proposals is not None:
        if settings.arch.startswith("fasterrcnn"):
            options["rpn_post_nms_top_n_test"] = settings.proposals
            options["rpn_pre_nms_top_n_test"] = max(settings.proposals, 1000)
        else:  # one-stage nets have no proposals; their nearest knob is the candidates kept per level
            options["topk_candidates"] = settings.proposals
    return options


def _set_anchor_sizes(net: nn.Module, settings: TwoStageSettings, sizes: tuple[int, ...]) -> None:
    """One anchor size per FPN level (smaller for small objects); a new RPN head where the anchor count changes."""
    owner = net.rpn if isinstance(net, detection.FasterRCNN) else net
    old: AnchorGenerator = owner.anchor_generator
    if len(sizes) != len(old.sizes):
        raise ForkliftError(f"{settings.arch}: anchor_sizes needs {len(old.sizes)} sizes (one per level), not {sizes}")
    if isinstance(net, detection.RetinaNet):
        per_level = tuple(tuple(round(s * octave) for octave in OCTAVES) for s in sizes)
    else:
        per_level = tuple((s,) for s in sizes)
    new = AnchorGenerator(per_level, old.aspect_ratios)
    owner.anchor_generator = new
    if isinstance(net, detection.FasterRCNN) and new.num_anchors_per_location() != old.num_anchors_per_location():
        depth = len(net.rpn.head.conv)
        net.rpn.head = RPNHead(net.backbone.out_channels, new.num_anchors_per_location()[0], conv_depth=depth)


def build_two_stage(settings: TwoStageSettings, *, seed: int, weights: Path | None = None) -> nn.Module:
    """The net with seeded fresh weights (the global RNG left as it was), then what `weights` holds that fits.

    `weights`: a whole detector's state dict (heads of another class count are skipped: only tensors that match
    by name and shape load) or a backbone's (its names are placed under the detector's backbone).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = ARCHITECTURES[settings.arch](**_builder_options(settings))
        if settings.anchor_sizes is not None:
            _set_anchor_sizes(net, settings, settings.anchor_sizes)
    if weights is not None:
        load_matching(net, weights, settings.arch)
    return net


def load_two_stage(model_dir: Path) -> tuple[nn.Module, TwoStageSettings, list[str]]:
    """A model directory `write_two_stage_model_dir` wrote -> the PyTorch net (eval mode), its settings, its labels."""
    from forklift.model_files.model_dir import open_model_dir

    model = open_model_dir(model_dir)
    settings = two_stage_settings(model.config.extra, model.files.get("config", model.path))
    weights = Path(model_dir) / f"{settings.arch}.pt"
    if not weights.is_file():
        raise ForkliftError(f"{weights}: missing; the PyTorch weights of this {settings.arch} model")
    net = build_two_stage(settings, seed=0)
    try:
        net.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    except Exception as exc:  # unreadable, or not this net's tensors
        raise ForkliftError(f"{weights}: not the weights of {settings.arch}: {str(exc).splitlines()[0]}") from exc
    if len(model.labels) != settings.classes:
        raise ForkliftError(f"{model.files['labels']}: {len(model.labels)} labels, but the net has {settings.classes}")
    return net.eval(), settings, model.labels
