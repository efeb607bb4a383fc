"""What the ranks of a data-parallel run must agree on or share: a decision (rank 0's), the epoch's loss totals,
the RNG states a checkpoint keeps, the checkpoint a resume reads, and the gradients (DistributedDataParallel).
One process outside torchrun is a run of one rank: each function is then a plain pass-through."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from forklift.distributed.ranks import Ranks
from forklift.train.checkpoints import read_checkpoint
from forklift.train.tasks import TrainingTask


def agreed(decision: bool, ranks: Ranks) -> bool:
    """Rank 0's `decision`, on every rank (a rank that stopped alone would leave the others waiting)."""
    if not ranks.distributed:
        return decision
    flag = torch.tensor([int(decision)])
    torch.distributed.broadcast(flag, src=0)
    return bool(flag.item())


def summed(totals: dict[str, float], seen: int, ranks: Ranks) -> tuple[dict[str, float], int]:
    """The epoch's loss totals and image count over all ranks: metrics.csv describes the global batch."""
    if not ranks.distributed:
        return totals, seen
    together = torch.tensor([*totals.values(), float(seen)], dtype=torch.float64)
    torch.distributed.all_reduce(together)
    return dict(zip(totals, together[:-1].tolist(), strict=True)), int(together[-1].item())


def rank_rng_states(ranks: Ranks) -> list[tuple[Any, Any]] | None:
    """Every rank's torch and numpy RNG states, gathered on rank 0 (None elsewhere): a checkpoint keeps them all
    so that a resumed data-parallel run draws what the uninterrupted one would have."""
    own = (torch.get_rng_state(), np.random.get_state())
    if not ranks.distributed:
        return [own]
    gathered: list[Any] = [None] * ranks.world if ranks.leader else []
    torch.distributed.gather_object(own, gathered if ranks.leader else None, dst=0)
    return gathered if ranks.leader else None


def shared_checkpoint(path: Path, ranks: Ranks) -> dict[str, Any]:
    """The checkpoint to resume, read by rank 0 and sent to the others (their hosts need not share OUT)."""
    if not ranks.distributed:
        return read_checkpoint(path, "cpu")
    box = [read_checkpoint(path, "cpu") if ranks.leader else None]
    torch.distributed.broadcast_object_list(box, src=0)
    assert box[0] is not None
    return box[0]


class _LossOf(torch.nn.Module):
    """The task's loss as a module's forward, so DistributedDataParallel can wrap it: the task's net is its
    submodule (the parameters DDP averages), and a task may call any method of its net inside `loss`."""

    def __init__(self, task: TrainingTask) -> None:
        super().__init__()
        self.task = task
        self.net = task.net

    def forward(self, inputs: torch.Tensor, targets: object) -> dict[str, torch.Tensor]:
        return self.task.loss(inputs, targets)


def loss_step(task: TrainingTask, ranks: Ranks, device: str) -> Callable[[torch.Tensor, object], dict]:
    """What a training step calls for the loss terms: the task's loss, through DistributedDataParallel (which
    averages the gradients over the ranks as backward produces them) when there are several ranks."""
    if not ranks.distributed:
        return task.loss
    device_ids = [torch.device(device)] if torch.device(device).type == "cuda" else None
    return DistributedDataParallel(_LossOf(task), device_ids=device_ids)
