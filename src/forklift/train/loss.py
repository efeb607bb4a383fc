"""The YOLOv3 loss for the [yolo] heads of a `DarknetNet`, assigned the way Darknet assigns it.

Each ground-truth box goes to the one anchor, over all anchors of all heads, whose width and height overlap it
best; that anchor's head and the grid cell holding the box centre predict it. Box terms are squared errors on
the centre offsets and log sizes, weighted by 2 - w*h so small boxes count more; objectness and classes are
binary cross-entropies. A prediction that already overlaps some ground truth by more than `ignore_thresh` is
not pushed towards background, as in Darknet. Terms are summed over the batch and divided by its size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, box_iou

from forklift.errors import ForkliftError
from forklift.nets.darknet import DarknetNet, DetectionHead

IGNORE_THRESH = 0.7


@dataclass
class HeadTargets:
    """The positives of one head: where they are (image, anchor, row, column) and what they should predict."""

    image: torch.Tensor  # [P] batch index
    anchor: torch.Tensor  # [P] anchor index within the head
    row: torch.Tensor  # [P]
    col: torch.Tensor  # [P]
    offset: torch.Tensor  # [P, 2] centre within the cell, 0..1 (after scale_x_y)
    log_size: torch.Tensor  # [P, 2] log(box / anchor)
    cls: torch.Tensor  # [P] class index
    weight: torch.Tensor  # [P] 2 - w*h


@dataclass
class LossTerms:
    total: torch.Tensor
    box: torch.Tensor
    obj: torch.Tensor
    cls: torch.Tensor

    def items(self) -> dict[str, float]:
        terms = {"loss": self.total, "box": self.box, "obj": self.obj, "cls": self.cls}
        return {name: float(value.detach()) for name, value in terms.items()}


def yolo_heads(net: DarknetNet) -> list[DetectionHead]:
    heads = net.detection_heads
    if not heads or any(h.kind != "yolo" for h in heads):
        raise ForkliftError(f"{net.config.source}: training needs a detector with [yolo] heads (not [region])")
    return heads


def _anchor_wh_iou(wh: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """[N, 2] box sizes x [A, 2] anchor sizes -> [N, A] IoU of the two, centred on each other (Darknet's match)."""
    inter = torch.min(wh[:, None], anchors[None]).prod(-1)
    return inter / (wh.prod(-1)[:, None] + anchors.prod(-1)[None] - inter)


def build_targets(
    heads: list[DetectionHead], targets: torch.Tensor, shapes: list[tuple[int, int]], input_size: tuple[int, int]
) -> list[HeadTargets]:
    """Assign targets [N, 6] (image, class, cx, cy, w, h; fractions of the input) to heads of grid `shapes` (H, W)."""
    input_h, input_w = input_size
    anchors = torch.cat([h.anchors for h in heads]).to(targets.device)
    owner = torch.cat([torch.full((h.num_anchors,), k, device=targets.device) for k, h in enumerate(heads)])
    first = torch.tensor([0] + [h.num_anchors for h in heads], device=targets.device).cumsum(0)
    wh_pixels = targets[:, 4:6] * torch.tensor([input_w, input_h], device=targets.device, dtype=targets.dtype)
    best = _anchor_wh_iou(wh_pixels, anchors).argmax(1) if len(targets) else owner[:0]
    assigned = []
    for k, (head, (grid_h, grid_w)) in enumerate(zip(heads, shapes, strict=True)):
        mine = owner[best] == k
        t, anchor = targets[mine], best[mine] - first[k]
        cell = t[:, 2:4] * torch.tensor([grid_w, grid_h], device=t.device, dtype=t.dtype)
        col = cell[:, 0].long().clamp(0, grid_w - 1)
        row = cell[:, 1].long().clamp(0, grid_h - 1)
        offset = cell - torch.stack([col, row], 1).to(t.dtype)
        log_size = torch.log(wh_pixels[mine] / head.anchors[anchor].to(t.device))
        weight = 2.0 - t[:, 4] * t[:, 5]
        assigned.append(HeadTargets(t[:, 0].long(), anchor, row, col, offset, log_size, t[:, 1].long(), weight))
    return assigned


def _ignored(
    head: DetectionHead, raw: torch.Tensor, targets: torch.Tensor, input_size: tuple[int, int]
) -> torch.Tensor:
    """[B, A, H, W]: predictions overlapping a ground truth of their image by more than IGNORE_THRESH."""
    b, _, h, w = raw.shape
    with torch.no_grad():
        decoded = head.decode(raw.detach(), *input_size)[..., :4]  # [B, H*W*A, 4] ordered row, column, anchor
        if not len(targets):
            return torch.zeros(b, head.num_anchors, h, w, dtype=torch.bool, device=raw.device)
        iou = box_iou(
            box_convert(decoded.reshape(-1, 4), "cxcywh", "xyxy"), box_convert(targets[:, 2:6], "cxcywh", "xyxy")
        )
        image_of_prediction = torch.arange(b, device=raw.device).repeat_interleave(h * w * head.num_anchors)
        iou[image_of_prediction[:, None] != targets[None, :, 0].long()] = 0.0
        ignored = iou.max(1).values > IGNORE_THRESH
    return ignored.reshape(b, h, w, head.num_anchors).permute(0, 3, 1, 2)


def yolo_loss(net: DarknetNet, raw: list[torch.Tensor], targets: torch.Tensor) -> LossTerms:
    """The loss of the raw head maps `net.heads(images)` against targets [N, 6] (image, class, cx, cy, w, h)."""
    heads = yolo_heads(net)
    input_size = (net.input_height, net.input_width)
    shapes = [(r.shape[2], r.shape[3]) for r in raw]
    batch = raw[0].shape[0]
    zero = raw[0].sum() * 0.0
    box, obj, cls = zero, zero, zero
    for head, r, assigned in zip(heads, raw, build_targets(heads, targets, shapes, input_size), strict=True):
        b, _, h, w = r.shape
        p = r.reshape(b, head.num_anchors, 5 + head.classes, h, w)
        where = (assigned.image, assigned.anchor, slice(None), assigned.row, assigned.col)
        chosen = p[where]  # [P, 5 + C]
        s = head.scale_x_y
        offset = torch.sigmoid(chosen[:, 0:2]) * s - (s - 1) / 2
        squared = (offset - assigned.offset).pow(2).sum(1) + (chosen[:, 2:4] - assigned.log_size).pow(2).sum(1)
        box = box + (assigned.weight * squared).sum()
        obj_target = torch.zeros_like(p[:, :, 4])
        obj_target[assigned.image, assigned.anchor, assigned.row, assigned.col] = 1.0
        counted = ~_ignored(head, r, targets, input_size) | obj_target.bool()
        obj = obj + F.binary_cross_entropy_with_logits(p[:, :, 4][counted], obj_target[counted], reduction="sum")
        cls_target = F.one_hot(assigned.cls, head.classes).to(chosen.dtype)
        cls = cls + F.binary_cross_entropy_with_logits(chosen[:, 5:], cls_target, reduction="sum")
    box, obj, cls = box / batch, obj / batch, cls / batch
    return LossTerms(box + obj + cls, box, obj, cls)
