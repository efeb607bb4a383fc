"""forklift's Darknet implementation against the independent reference, OpenCV 4.x DNN, on the same files.

For every cfg in ../shared/data/darknet/ (and two small cfgs that cover the remaining layer kinds: reorg,
region with softmax, SPP maxpools, grouped convolution and route, mish, swish, relu, logistic), with seeded
random weights and the real photos, the decoded head outputs agree per anchor to 1e-4 relative and the
final detections agree (same classes, boxes within 1 px) but for boxes on the score threshold or the NMS
boundary, which float rounding on another CPU may put on either side (tests/agreement.py).

The head comparison runs forklift's net in float64: that is the exact value of what the cfg describes, so
the test measures whether the two implementations compute the same function. In float32 the 75-layer yolov3
differs from OpenCV by up to 2e-4 relative on a few dozen of its 750,000 values, from rounding alone (OpenCV
folds batch norm into the convolution weights); the detections tests below run both engines in float32.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from agreement import assert_same_detections
from helpers import CFGS, SHARED, shared

from forklift.model_files.darknet_cfg import read_cfg
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.darknet import build_darknet
from forklift.runtime.base import PredictOptions
from forklift.runtime.opencv_darknet import OpenCVDarknetPredictor, opencv_rows, read_opencv_darknet
from forklift.runtime.torch_runtime import TorchPredictor
from forklift.vision.images import decode_image
from forklift.vision.resize import fit

pytestmark = pytest.mark.slow  # real servers, training or full-size reference nets: seconds each

RTOL, ATOL = 1e-4, 1e-6
OPENCV_DEFAULT_THRESH = 0.2  # OpenCV zeroes class scores under the head's `thresh` (this when the cfg has none)

CASES = {
    "yolov3-tiny": ("darknet/yolov3-tiny.cfg", "darknet/coco.names"),
    "yolov3": ("darknet/yolov3.cfg", "darknet/coco.names"),
    "yolov2-tiny-voc": ("darknet/yolov2-tiny-voc.cfg", "darknet/voc.names"),
    "yolov4-tiny": ("darknet/yolov4-tiny.cfg", "darknet/coco.names"),
    "v2-reorg-mish": (CFGS / "v2-reorg-mish.cfg", CFGS / "shapes.names"),
    "v3-spp-groups": (CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names"),
}


def _model(darknet_models, case: str) -> Path:
    cfg, names = CASES[case]
    cfg = cfg if isinstance(cfg, Path) else shared(cfg)
    names = names if isinstance(names, Path) else shared(names)
    return darknet_models(cfg, names)


def _photos(limit: int | None = None) -> list[np.ndarray]:
    folder = shared("images")
    return [decode_image(p.read_bytes(), p.name) for p in sorted(folder.glob("*.jpg"))[:limit]]


PHOTO_LIMIT = {"yolov3": 3}  # 65 GFLOPs a photo: three photos (giraffe.jpg's 1,500 boxes among them) keep it fast
HEAD_PHOTO_LIMIT = {"yolov3": 1}  # in float64, twice the work: one photo, 750,000 values, for the heads


OPENCV_REGION_NMS = 0.4  # OpenCV runs NMS inside [region] layers, zeroing the scores of suppressed boxes


def _has_region(cfg: Path) -> bool:
    return any(s.kind == "region" for s in read_cfg(cfg).layers)


def _opencv_thresh(cfg: Path) -> float:
    heads = [s for s in read_cfg(cfg).layers if s.kind in ("yolo", "region")]
    return max(h.float("thresh", OPENCV_DEFAULT_THRESH) for h in heads)


@pytest.mark.parametrize("case", list(CASES))
def test_decoded_heads_match_opencv(darknet_models, case: str) -> None:
    directory = _model(darknet_models, case)
    model = open_model_dir(directory)
    net = build_darknet(model.files["cfg"], model.files["weights"])
    photos = _photos(HEAD_PHOTO_LIMIT.get(case))
    batch = (
        np.stack([fit(p, net.input_width, net.input_height, "letterbox")[0].transpose(2, 0, 1) for p in photos]).astype(
            np.float32
        )
        / 255.0
    )
    with torch.inference_mode():
        ours = net.double()(torch.from_numpy(batch).double()).numpy()
    reference = opencv_rows(read_opencv_darknet(model, exact=True), batch)
    assert ours.shape == reference.shape

    # Box (cx, cy, w, h) and objectness: every anchor of every head.
    np.testing.assert_allclose(ours[..., :5], reference[..., :5], rtol=RTOL, atol=ATOL)
    # Class scores: OpenCV reports objectness x probability and zeroes those under the head's thresh;
    # its probabilities are those scores over its objectness.
    reported = reference[..., 5:] > 0
    assert reported.any(), "no class score above OpenCV's threshold: the comparison would be empty"
    probabilities = reference[..., 5:] / reference[..., 4:5]
    np.testing.assert_allclose(ours[..., 5:][reported], probabilities[reported], rtol=RTOL, atol=ATOL)
    if not _has_region(model.files["cfg"]):  # in [region] layers OpenCV's own NMS zeroes scores too
        scores = ours[..., 4:5] * ours[..., 5:]
        assert scores[~reported].max(initial=0) <= _opencv_thresh(model.files["cfg"]) + 1e-4


@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
@pytest.mark.parametrize("case", ["yolov3-tiny", "yolov3", "yolov2-tiny-voc", "yolov4-tiny", "v3-spp-groups"])
def test_final_detections_match_opencv(darknet_models, case: str, resize: str) -> None:
    model = open_model_dir(_model(darknet_models, case))
    conf = max(0.25, _opencv_thresh(model.files["cfg"]))  # under OpenCV's thresh it reports nothing to compare
    iou = OPENCV_REGION_NMS if _has_region(model.files["cfg"]) else 0.45
    options = PredictOptions(conf=conf, iou=iou, resize=resize, threads=2)
    ours, theirs = TorchPredictor(model, options), OpenCVDarknetPredictor(model, options)
    found = 0
    for photo in _photos(PHOTO_LIMIT.get(case)):
        mine, _ = ours.predict_image("photo", photo)
        reference, _ = theirs.predict_image("photo", photo)
        found += assert_same_detections(mine, reference, conf=conf, iou=iou)
    assert found > 0, "random weights found nothing on any photo: nothing was compared"


def test_opencv_reads_what_forklift_writes(darknet_models) -> None:
    """The .weights forklift writes load in OpenCV with the byte count it expects (no silent truncation)."""
    model = open_model_dir(_model(darknet_models, "yolov3-tiny"))
    net = cv2.dnn.readNetFromDarknet(str(model.files["cfg"]), str(model.files["weights"]))
    assert len(net.getUnconnectedOutLayersNames()) == 2
    assert SHARED.exists()


def test_classifier_matches_opencv(darknet_models) -> None:
    """A Darknet classifier: class probabilities from PyTorch and OpenCV agree, and predict answers `classes`."""
    model = open_model_dir(darknet_models(CFGS / "classifier.cfg", CFGS / "shapes.names"))
    options = PredictOptions(threads=2)
    ours, theirs = TorchPredictor(model, options), OpenCVDarknetPredictor(model, options)
    assert ours.task == theirs.task == "classify"
    for photo in _photos():
        mine, _ = ours.predict_image("photo", photo)
        reference, _ = theirs.predict_image("photo", photo)
        assert [c.label for c in mine] == [c.label for c in reference]
        assert [c.score for c in mine] == pytest.approx([c.score for c in reference], rel=1e-4)
        assert sum(c.score for c in mine) == pytest.approx(1.0, abs=1e-5)
    result = ours.predict([("dog.jpg", shared("images/dog.jpg").read_bytes())]).to_json()["results"][0]
    assert result["classes"] and "detections" not in result
