"""The tolerant comparison of two engines' detections (agreement.py) forgives only boxes on a boundary, and the NMS
cascade behind them: everything else that differs fails."""

from __future__ import annotations

import pytest
from agreement import assert_same_detections
from helpers import shared

from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.torch_runtime import TorchPredictor
from forklift.vision.images import decode_image
from forklift.vision.results import Detection

CONF, IOU = 0.25, 0.45


def _box(x: float, score: float, label: str = "dog", width: float = 100.0) -> Detection:
    return Detection(x, 0.0, x + width, 100.0, label, score)


def _shift_for(iou: float, width: float = 100.0) -> float:
    """How far to move a box of `width` sideways for this IoU with where it was."""
    return width * (1 - iou) / (1 + iou)


def test_identical_lists_match_box_for_box() -> None:
    boxes = [_box(0, 0.9), _box(300, 0.6, "cat"), _box(600, 0.3)]
    assert assert_same_detections(boxes, list(reversed(boxes)), conf=CONF, iou=IOU) == 3


def test_a_box_on_the_score_threshold_may_be_missing() -> None:
    assert assert_same_detections([_box(0, 0.9), _box(300, CONF + 5e-4)], [_box(0, 0.9)], conf=CONF, iou=IOU) == 1


@pytest.mark.parametrize(
    ("ours", "theirs", "why"),
    [
        ([_box(0, 0.9), _box(300, 0.4)], [_box(0, 0.9)], "a box far from the threshold and from any other"),
        ([_box(0, 0.9)], [_box(2, 0.9)], "corners 2 px apart"),
        ([_box(0, 0.9)], [_box(0, 0.9, "cat")], "another label"),
        ([_box(0, 0.9)], [_box(0, 0.89)], "a score 1 % off"),
        ([_box(0, 0.9), _box(_shift_for(0.40), 0.8)], [_box(0, 0.9)], "an overlap well under the NMS IoU"),
    ],
)
def test_every_other_difference_fails(ours: list[Detection], theirs: list[Detection], why: str) -> None:
    with pytest.raises(AssertionError):
        assert_same_detections(ours, theirs, conf=CONF, iou=IOU)


def test_a_box_on_the_nms_boundary_and_what_it_suppresses_may_differ() -> None:
    """B overlaps A by just over the NMS IoU (kept on one side, suppressed on the other); where B is kept it
    suppresses C, which the other side keeps."""
    a = _box(0, 0.9)
    b = _box(_shift_for(IOU + 5e-4), 0.8)
    c = _box(b.x1 + _shift_for(0.7), 0.7)
    assert assert_same_detections([a, b], [a, c], conf=CONF, iou=IOU) == 1
    unsuppressed = _box(b.x1 + _shift_for(0.2), 0.7)  # B would not have suppressed it: its absence is a bug
    with pytest.raises(AssertionError):
        assert_same_detections([a, b], [a, unsuppressed], conf=CONF, iou=IOU)


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_real_net_fails_with_a_threshold_moved_off_the_margin(darknet_models) -> None:
    """yolov3-tiny's hundreds of boxes on a photo: a threshold moved within the margin matches, one moved by
    0.02 does not (the matcher is not so loose that it forgives a changed threshold)."""
    model = open_model_dir(darknet_models(shared("darknet/yolov3-tiny.cfg"), shared("darknet/coco.names")))
    photo = decode_image(shared("images/giraffe.jpg").read_bytes(), "giraffe.jpg")

    def boxes(conf: float, iou: float) -> list[Detection]:
        found, _ = TorchPredictor(model, PredictOptions(conf=conf, iou=iou, threads=2)).predict_image("p", photo)
        return list(found)  # type: ignore[arg-type]

    reference = boxes(CONF, IOU)
    assert len(reference) > 100
    assert assert_same_detections(boxes(CONF + 5e-4, IOU - 1e-3), reference, conf=CONF, iou=IOU) > 100
    with pytest.raises(AssertionError):
        assert_same_detections(boxes(CONF + 0.02, IOU), reference, conf=CONF, iou=IOU)
    with pytest.raises(AssertionError):
        assert_same_detections(boxes(CONF, IOU - 0.05), reference, conf=CONF, iou=IOU)
