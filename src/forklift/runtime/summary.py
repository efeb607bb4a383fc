"""`forklift models inspect`: what a model directory holds, in numbers a person can check. Each format counts its
own models (`forklift.runtime.formats`); these are the shapes of the answer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from forklift.vocabulary import ModelFormat, Task


@dataclass(frozen=True)
class ModelFacts:
    """A format's own count of one model."""

    task: Task
    classes: int
    input_width: int | None  # None: any size
    input_height: int | None
    parameters: int | None
    flops: int | None  # of one input at the input size; multiply-adds count twice
    labels: list[str] | None = None  # where the net names its classes otherwise than the labels file (Caffe)


@dataclass(frozen=True)
class ModelSummary:
    name: str
    format: ModelFormat
    task: Task
    classes: int
    labels: list[str]
    input_width: int | None
    input_height: int | None
    parameters: int | None
    flops: int | None
    files: dict[str, str]

    def to_json(self) -> dict:
        return asdict(self)


def torch_counts(net: Any, *inputs: Any) -> tuple[int, int]:
    """A PyTorch net's parameters, and the FLOPs of one forward pass on `inputs`."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        net(*inputs)
    return sum(p.numel() for p in net.parameters()), int(counter.get_total_flops())
