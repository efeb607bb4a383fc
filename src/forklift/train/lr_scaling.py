"""How `--lr` follows the global batch when N ranks each train on `--batch` images (`--lr-scaling`).

`--lr` is the learning rate for one process at `--batch`. N ranks step once per N x batch images, with the
gradient averaged over all of them, so each step is worth N steps' progress only if the learning rate grows with
the batch. The rules: `linear` multiplies it by N (Goyal et al., "Accurate, Large Minibatch SGD", 2017: with the
warm-up the trainer already does, plain and momentum SGD keep their accuracy); `sqrt` by the square root of N
(the rule that holds for adaptive optimisers, whose per-parameter step sizes already shrink noisy directions,
Malladi et al., "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms", 2022); `none` keeps `--lr`
(to compare N ranks x B with one process x N*B at the same rate); `auto`, the default, takes linear for sgd and
momentum and sqrt for the others. The rule, the factor and the rate are printed at the start of every
data-parallel run.
"""

from __future__ import annotations

import math

from forklift.vocabulary import LrScaling, Optimizer, word

LINEAR_OPTIMISERS = (Optimizer.SGD, Optimizer.MOMENTUM)


def lr_factor(rule: str, optimizer: str, ranks: int) -> tuple[LrScaling, float]:
    """(the rule applied, the factor --lr is multiplied by) for `ranks` ranks; `auto` resolved."""
    chosen = word(LrScaling, rule, where="--lr-scaling")
    if chosen == LrScaling.AUTO:
        chosen = LrScaling.LINEAR if Optimizer(optimizer) in LINEAR_OPTIMISERS else LrScaling.SQRT
    factor = {LrScaling.LINEAR: float(ranks), LrScaling.SQRT: math.sqrt(ranks), LrScaling.NONE: 1.0}[chosen]
    return chosen, factor


def describe(rule: LrScaling, factor: float, lr: float, ranks: int, batch: int) -> str:
    """The line a data-parallel run prints at its start."""
    return (
        f"learning rate: --lr {lr:g} x {factor:g} ({rule} rule for a global batch of {ranks * batch} = {ranks} ranks "
        f"x {batch}) = {lr * factor:g}"
    )
