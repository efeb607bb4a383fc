"""A torchvision detector's class outputs carried over to a net of other classes, class by class: each class head's
rows moved as the head lays them out (anchor by anchor with the classes inside, or class by class)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

# the layers whose outputs are the classes (Faster R-CNN's scores and per-class boxes; RetinaNet's and FCOS's scores)
CLASS_HEADS = ("roi_heads.box_predictor.", "head.classification_head.cls_logits.")
_ANCHOR_MAJOR = ("head.classification_head.cls_logits.",)  # the other heads keep a class's rows together


def carry_class_outputs(
    start: dict[str, torch.Tensor], target: dict[str, torch.Tensor], sources: Sequence[int | None], *, total: int
) -> dict[str, torch.Tensor]:
    """The class heads of `target` (a state dict of the net with len(sources) class outputs, 0 the background)
    with output j taken from output sources[j] of the `total` in `start`, or left as `target` has it where that is
    None. Only the class heads that fit both layouts are returned; loading them is the caller's."""
    carried = {}
    for key, tensor in target.items():
        old = start.get(key)
        if not key.startswith(CLASS_HEADS) or old is None or not old.ndim or old.shape[1:] != tensor.shape[1:]:
            continue
        group = old.shape[0] // total
        if old.shape[0] != group * total or tensor.shape[0] != group * len(sources):
            continue
        new = tensor.detach().clone()
        old_rows, new_rows = (_by_class(t, key, group) for t in (old, new))
        for j, i in enumerate(sources):
            if i is not None:
                new_rows[j] = old_rows[i]
        carried[key] = new
    return carried


def _by_class(tensor: torch.Tensor, key: str, group: int) -> torch.Tensor:
    """A view of a class head's tensor as [class, rows of that class, ...] (writing to it writes the tensor)."""
    rest = tuple(tensor.shape[1:])
    if key.startswith(_ANCHOR_MAJOR):
        return tensor.view(group, -1, *rest).movedim(1, 0)
    return tensor.view(-1, group, *rest)
