"""A published torchvision detector or segmenter made a ready model directory, exported as forklift exports the
nets it trains: the net built for the classes the catalogue names, the published tensors loaded into it (every one,
or it is not that net), and the class outputs no name was given (COCO's unused category ids) left out."""

from __future__ import annotations

from pathlib import Path

import torch

from forklift.errors import ForkliftError
from forklift.model_files.two_stage_settings import TwoStageSettings
from forklift.nets.class_outputs import carry_class_outputs
from forklift.nets.segmenters import build_segmenter
from forklift.nets.two_stage import build_two_stage
from forklift.pretrained.catalogue import Pretrained
from forklift.runtime.segment_export import write_segment_model_dir
from forklift.runtime.two_stage_export import write_two_stage_model_dir
from forklift.vocabulary import Task


def write_ready_model(model: Pretrained, weights: Path, out: Path) -> None:
    """The model directory of `model` (a weights entry with labels) from its verified `weights`, written into
    `out` (an empty folder)."""
    assert model.labels is not None and model.image_size is not None  # the catalogue pairs them on such entries
    names, kept = list(model.labels.values()), [0, *model.labels]  # 0: the background
    size = model.image_size
    if model.task is Task.DETECT:
        settings = TwoStageSettings(arch=model.name, classes=len(names), image_size=size)
        net = build_two_stage(settings, seed=0)
    elif model.task is Task.SEGMENT:
        net = build_segmenter(model.name, classes=len(names), seed=0)
    else:
        raise ForkliftError(f"{model.name}: labels are for a detector or a segmenter, not a {model.task} model")
    state = torch.load(weights, map_location="cpu", weights_only=True)
    heads = carry_class_outputs(state, net.state_dict(), kept, total=kept[-1] + 1)
    try:
        net.load_state_dict({**state, **heads})
    except (RuntimeError, ValueError) as exc:  # a tensor missing, left over or of another shape
        raise ForkliftError(f"{weights}: not the weights of {model.name}: {str(exc).splitlines()[0]}") from exc
    net.eval()
    if model.task is Task.DETECT:
        write_two_stage_model_dir(net, out, names, settings)
    else:
        write_segment_model_dir(net, out, names, (size, size), name=model.name)
