"""The learning-rate schedule of every run: a linear warm-up, then a cosine down to a share of the peak."""

from __future__ import annotations

import math
from collections.abc import Callable

WARMUP_EPOCHS = 1.0  # linear warm-up over this many epochs' steps (at least WARMUP_MIN_STEPS)
WARMUP_MIN_STEPS = 10
FINAL_LR = 0.05  # of the peak, at the end of the cosine


def lr_factor(steps_per_epoch: int, epochs: int) -> Callable[[int], float]:
    """The factor of the peak rate at each step (for `LambdaLR`): the warm-up, then the cosine to FINAL_LR by the
    last step."""
    total = max(1, steps_per_epoch * epochs)
    warmup = min(total, max(WARMUP_MIN_STEPS, round(WARMUP_EPOCHS * steps_per_epoch)))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return FINAL_LR + (1 - FINAL_LR) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor
