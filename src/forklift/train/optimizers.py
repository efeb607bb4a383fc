"""The optimiser of a run, by name, so that a search can choose among them as it chooses a learning rate.

Every optimiser gets the task's parameter groups (weight decay on conv and linear weights only) and the run's
peak learning rate, which the trainer's warm-up and cosine then scale step by step. `momentum` is used by those
that have one (momentum, rmsprop); Adadelta's step is lr times its own adaptive ratio, so it wants an lr near 1.
"""

from __future__ import annotations

import torch
from torch.optim import Optimizer as TorchOptimizer

from forklift.vocabulary import Optimizer

USES_MOMENTUM = (Optimizer.MOMENTUM, Optimizer.RMSPROP)


def make_optimizer(kind: Optimizer, groups: list[dict], *, lr: float, momentum: float) -> TorchOptimizer:
    """torch's optimiser named `kind` over `groups` (each may carry its own weight_decay)."""
    match kind:
        case Optimizer.SGD:
            return torch.optim.SGD(groups, lr=lr)
        case Optimizer.MOMENTUM:
            return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=momentum > 0)
        case Optimizer.ADAM:
            return torch.optim.Adam(groups, lr=lr)
        case Optimizer.ADAMW:
            return torch.optim.AdamW(groups, lr=lr)
        case Optimizer.RMSPROP:
            return torch.optim.RMSprop(groups, lr=lr, momentum=momentum)
        case Optimizer.ADAGRAD:
            return torch.optim.Adagrad(groups, lr=lr)
        case Optimizer.ADADELTA:
            return torch.optim.Adadelta(groups, lr=lr)
