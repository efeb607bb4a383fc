"""Per-class NMS on NumPy arrays (OpenCV's, so that running an exported model needs no PyTorch) keeps exactly the
boxes torchvision's `batched_nms` keeps, in the same order, on random overlapping boxes of a few classes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.ops import batched_nms, nms

from forklift.vision.boxes import one_box_per_object, per_class_nms


@pytest.mark.parametrize("iou", [0.3, 0.45, 0.7])
def test_per_class_nms_keeps_what_torchvision_keeps(iou: float) -> None:
    generator = np.random.default_rng(0)
    for _ in range(50):
        count = int(generator.integers(1, 300))
        corners = generator.uniform(0, 200, (count, 2))
        sizes = generator.uniform(2, 80, (count, 2))
        boxes = np.hstack([corners, corners + sizes]).astype(np.float32)
        scores = generator.permutation(count).astype(np.float32) / count + 0.001  # distinct: no ties to break
        classes = generator.integers(0, 4, count)
        expected = batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(classes), iou)
        assert per_class_nms(boxes, scores, classes, iou).tolist() == expected.tolist()
    assert per_class_nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), iou).size == 0


def test_one_box_per_object_keeps_the_surest_of_overlapping_labels() -> None:
    found = [("cat", 0.6, [10, 10, 50, 50]), ("dog", 0.9, [12, 11, 52, 50]), ("cat", 0.5, [100, 100, 140, 150])]
    kept = one_box_per_object(found, iou=0.6)
    reference = nms(torch.tensor([f[2] for f in found], dtype=torch.float32), torch.tensor([f[1] for f in found]), 0.6)
    assert kept == [found[i] for i in reference.tolist()] == [found[1], found[2]]
