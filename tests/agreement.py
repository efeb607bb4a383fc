"""Two engines' detections compared exactly where the arithmetic decides, and tolerantly only where it does not.

Two engines (or one engine on two CPUs: AVX2 against AVX-512, another BLAS) compute the same scores and boxes to
about 1e-4 relative, so a box whose score sits on the confidence threshold, or whose overlap with a kept box of
its class sits on the NMS IoU, may land on either side. Such a box may be missing on one side; so may a box that
a missing box would have suppressed (greedy NMS cascades). Every other box must be found on both sides, with the
same label, corners within `pixels` and the same score to `score_rel`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from forklift.vision.results import Detection

# Measured between forklift's torch engine and OpenCV DNN in float32 on yolov3 (1,513 boxes on giraffe.jpg):
# scores differ by up to 1.7e-4 relative (4e-5 at a 0.25 threshold), corners by up to 0.006 px (an IoU shift
# under 1e-3 for a box of 10 px). The margins are five to twenty times that.
SCORE_MARGIN = 1e-3  # absolute, on scores in [0, 1]
IOU_MARGIN = 2e-3


def _corners(detections: Sequence[Detection]) -> np.ndarray:
    return np.array([[d.x1, d.y1, d.x2, d.y2] for d in detections], dtype=np.float64).reshape(-1, 4)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` [N, 4] with every box in `b` [M, 4]."""
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=2)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=1)
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-12)


def _pair(ours: Sequence[Detection], theirs: Sequence[Detection], pixels: float) -> list[tuple[int, int]]:
    """Boxes of the same label whose corners agree within `pixels`, nearest first, each box used once."""
    a, b = _corners(ours), _corners(theirs)
    distance = np.abs(a[:, None, :] - b[None, :, :]).max(axis=2) if len(a) and len(b) else np.zeros((len(a), len(b)))
    candidates = sorted(
        (distance[i, j], i, j)
        for i, j in zip(*np.nonzero(distance <= pixels), strict=True)
        if ours[i].label == theirs[j].label
    )
    used_a: set[int] = set()
    used_b: set[int] = set()
    pairs = []
    for _, i, j in candidates:
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            pairs.append((int(i), int(j)))
    return pairs


def _unexplained(
    alone: dict[str, list[int]], boxes: dict[str, Sequence[Detection]], *, conf: float, iou: float
) -> dict[str, list[int]]:
    """Of the boxes found on one side only, those no boundary explains (a fixed point over the NMS cascade)."""
    other = {"ours": "theirs", "theirs": "ours"}
    corners = {side: _corners(boxes[side]) for side in boxes}
    explained: dict[str, set[int]] = {side: set() for side in boxes}
    changed = True
    while changed:
        changed = False
        for side, indices in alone.items():
            far = other[side]
            for i in indices:
                if i in explained[side]:
                    continue
                box = boxes[side][i]
                overlaps = _iou(corners[side][i : i + 1], corners[far])[0] if len(boxes[far]) else np.zeros(0)
                same_label = np.array([d.label == box.label for d in boxes[far]], dtype=bool)
                on_threshold = abs(box.score - conf) <= SCORE_MARGIN
                on_nms_boundary = bool(np.any(same_label & (np.abs(overlaps - iou) <= IOU_MARGIN)))
                suppressed_by_a_boundary_box = any(
                    same_label[j] and overlaps[j] > iou - IOU_MARGIN for j in explained[far]
                )
                if on_threshold or on_nms_boundary or suppressed_by_a_boundary_box:
                    explained[side].add(i)
                    changed = True
    return {side: [i for i in indices if i not in explained[side]] for side, indices in alone.items()}


def assert_same_detections(
    ours: Sequence[Detection],
    theirs: Sequence[Detection],
    *,
    conf: float,
    iou: float,
    pixels: float = 1.0,
    score_rel: float = 1e-3,
) -> int:
    """Fail unless the two lists agree but for boxes on the score threshold or the NMS boundary; return the
    number of boxes matched."""
    pairs = _pair(ours, theirs, pixels)
    for i, j in pairs:
        assert ours[i].score == pytest.approx(theirs[j].score, rel=score_rel), (ours[i], theirs[j])
    alone = {
        "ours": sorted(set(range(len(ours))) - {i for i, _ in pairs}),
        "theirs": sorted(set(range(len(theirs))) - {j for _, j in pairs}),
    }
    left = _unexplained(alone, {"ours": ours, "theirs": theirs}, conf=conf, iou=iou)
    assert not left["ours"] and not left["theirs"], (
        f"{len(pairs)} boxes matched; found by one side only, off every boundary: "
        f"{[ours[i] for i in left['ours']]} (ours), {[theirs[j] for j in left['theirs']]} (theirs)"
    )
    return len(pairs)


def assert_same_label_maps(got: np.ndarray, want: np.ndarray, *, share: float = 1e-3) -> None:
    """Two per-pixel label maps (argmax of logits from two engines, or one engine on two CPUs) agree but for at
    most `share` of their pixels (and never more than that, rounded up): a pixel whose two best logits tie to
    1e-5 may take either label; a real difference (a shifted map, a wrong class) changes far more."""
    assert got.shape == want.shape
    differ = int((got != want).sum())
    assert differ <= max(1, int(np.ceil(share * got.size))), f"{differ} of {got.size} pixels have another label"


def detections_from_json(detections: list[dict]) -> list[Detection]:
    """The result JSON's detections (corners rounded to pixels, scores to 4 decimals) as `Detection`s."""
    return [Detection(**d["bbox"], label=d["label"], score=d["score"]) for d in detections]
