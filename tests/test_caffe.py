"""Caffe Faster R-CNN: prototxt text, the Python-layer rewrite, random caffemodels and prediction in OpenCV."""

from __future__ import annotations

import re
from pathlib import Path

import cv2
import numpy as np
import pytest
from core_parts import missing

from forklift.errors import ForkliftError
from forklift.model_files.caffe import class_names, num_classes, rewrite_python_proposal
from forklift.model_files.caffemodel import read_caffemodel, write_random_caffemodel
from forklift.model_files.model_dir import open_model_dir
from forklift.model_files.prototxt import Symbol, format_prototxt, parse_prototxt, read_prototxt
from forklift.runtime.base import PredictOptions
from forklift.runtime.opencv_caffe import CaffeFasterRCNNPredictor
from forklift.shared_data import shared_data_root

SHARED = shared_data_root()
PROTOTXT = SHARED / "caffe" / "zf_faster_rcnn_end2end_test.prototxt"
VOC_NAMES = SHARED / "darknet" / "voc.names"
DOG = SHARED / "images" / "dog.jpg"

ZF_BLOB_SHAPES = {
    "conv1": [(96, 3, 7, 7), (96,)],
    "conv2": [(256, 96, 5, 5), (256,)],
    "conv3": [(384, 256, 3, 3), (384,)],
    "conv4": [(384, 384, 3, 3), (384,)],
    "conv5": [(256, 384, 3, 3), (256,)],
    "rpn_conv/3x3": [(256, 256, 3, 3), (256,)],
    "rpn_cls_score": [(18, 256, 1, 1), (18,)],
    "rpn_bbox_pred": [(36, 256, 1, 1), (36,)],
    "fc6": [(4096, 256 * 6 * 6), (4096,)],
    "fc7": [(4096, 4096), (4096,)],
    "cls_score": [(21, 4096), (21,)],
    "bbox_pred": [(84, 4096), (84,)],
}

# OpenCV's Proposal layer as a person would write it by hand (OpenCV's own faster_rcnn_zf test net does the
# same), leaving base_size, pre/post NMS top-n and the NMS threshold at OpenCV's defaults.
HAND_WRITTEN_PROPOSAL = """layer {
  name: "proposal"
  type: "Proposal"
  bottom: "rpn_cls_prob_reshape"
  bottom: "rpn_bbox_pred"
  bottom: "im_info"
  top: "rois"
  proposal_param {
    feat_stride: 16
    ratio: 0.5 ratio: 1.0 ratio: 2.0
    scale: 8 scale: 16 scale: 32
  }
}
"""


def need(*paths: Path) -> None:
    for path in paths:
        if not path.exists():
            missing(f"{path} not found (the shared test data beside the checkout)")


def voc_labels() -> list[str]:
    return VOC_NAMES.read_text(encoding="utf-8").split()


@pytest.fixture(scope="module")
def dog_caffemodel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random ZF weights whose classifier says "dog" for every region (written once: it is 237 MB)."""
    need(PROTOTXT, VOC_NAMES)
    bias = np.zeros(21, dtype=np.float32)
    bias[1 + voc_labels().index("dog")] = 10.0
    path = tmp_path_factory.mktemp("caffe") / "zf.caffemodel"
    write_random_caffemodel(PROTOTXT, path, overrides={"cls_score": [np.zeros((21, 4096), np.float32), bias]})
    return path


def test_prototxt_parses_the_text_format_and_round_trips() -> None:
    text = """# a comment
name: 'net' # trailing comment
layer { name: "a\\"b" type: 'Conv' bottom: "x" bottom: "y"
  param: { lr_mult: 1 } value: -2.5e-3 pool: MAX flag: true }
layer {}
"""
    net = parse_prototxt(text, "t.prototxt")
    first = net.messages("layer")[0]
    assert net.get("name") == "net"
    assert first.get("name") == 'a"b'
    assert first.get_all("bottom") == ["x", "y"]
    assert first.block("param").get("lr_mult") == 1
    assert first.get("value") == -2.5e-3
    assert isinstance(first.get("pool"), Symbol)
    assert len(net.messages("layer")) == 2
    assert parse_prototxt(format_prototxt(net)) == net


def test_shipped_prototxt_round_trips() -> None:
    need(PROTOTXT)
    net = read_prototxt(PROTOTXT)
    assert parse_prototxt(format_prototxt(net)) == net
    assert len(net.messages("layer")) == 32
    assert num_classes(net) == 21


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: 1\nb {\n c: 2\n", r"t\.prototxt:3: unexpected end of file"),
        ("a: 1\n}\n", r"t\.prototxt:2: unmatched '\}'"),
        ("a: 1\nb: 'open\n", r"t\.prototxt:2: unterminated string"),
        ("a: 1\n\nb c\n", r"t\.prototxt:3: expected ':' or '\{' after 'b'"),
    ],
)
def test_prototxt_errors_name_the_file_and_line(text: str, problem: str) -> None:
    with pytest.raises(ForkliftError, match=problem):
        parse_prototxt(text, "t.prototxt")


def test_rewrite_makes_an_opencv_proposal_layer() -> None:
    need(PROTOTXT)
    original = read_prototxt(PROTOTXT)
    rewritten = rewrite_python_proposal(original)
    (proposal,) = [layer for layer in rewritten.messages("layer") if layer.get("name") == "proposal"]
    params = proposal.block("proposal_param")
    assert proposal.get("type") == "Proposal" and not proposal.messages("python_param")
    assert proposal.get_all("top") == ["rois"] and len(proposal.get_all("bottom")) == 3
    assert (params.get("feat_stride"), params.get_all("ratio"), params.get_all("scale")) == (
        16,
        [0.5, 1, 2],
        [8, 16, 32],
    )
    assert "Python" in [layer.get("type") for layer in original.messages("layer")]  # the input is left as it was


def test_rewrite_reads_anchor_settings_from_param_str() -> None:
    net = parse_prototxt(
        "layer { name: 'p' type: 'Python' python_param { module: 'rpn.proposal_layer' layer: 'ProposalLayer'"
        " param_str: \"'feat_stride': 8\\n'scales': [4, 8]\" } }"
    )
    params = rewrite_python_proposal(net).messages("layer")[0].block("proposal_param")
    assert (params.get("feat_stride"), params.get_all("scale")) == (8, [4, 8])


def test_other_python_layers_are_refused() -> None:
    need(PROTOTXT)
    text = PROTOTXT.read_text(encoding="utf-8").replace("rpn.proposal_layer", "roi_data_layer.layer")
    with pytest.raises(ForkliftError, match=r"layer 'proposal' runs Python code \(module 'roi_data_layer.layer'"):
        rewrite_python_proposal(parse_prototxt(text, str(PROTOTXT)), str(PROTOTXT))


@pytest.mark.slow  # writes a 237 MB caffemodel
def test_caffemodel_writer_round_trips(dog_caffemodel: Path) -> None:
    blobs = read_caffemodel(dog_caffemodel)
    assert {name: [b.shape for b in layer] for name, layer in blobs.items()} == ZF_BLOB_SHAPES
    assert blobs["cls_score"][1].max() == 10.0 and not blobs["cls_score"][0].any()
    assert not blobs["fc6"][1].any() and 0.005 < blobs["fc6"][0].std() < 0.02  # He: sqrt(2 / 9216) ≈ 0.0147


def test_overrides_must_name_a_layer_with_the_right_shapes(tmp_path: Path) -> None:
    need(PROTOTXT)
    with pytest.raises(ForkliftError, match="no weighted layer named 'cls'"):
        write_random_caffemodel(PROTOTXT, tmp_path / "m.caffemodel", overrides={"cls": []})
    with pytest.raises(ForkliftError, match=r"layer 'cls_score' has blobs of shapes \[\(21, 4096\), \(21,\)\]"):
        write_random_caffemodel(PROTOTXT, tmp_path / "m.caffemodel", overrides={"cls_score": [np.zeros(3)]})


def make_model_dir(directory: Path, labels: list[str], caffemodel: Path | None = None) -> Path:
    """The shipped prototxt unchanged, a labels file and the caffemodel (linked: it is large)."""
    directory.mkdir()
    (directory / PROTOTXT.name).write_bytes(PROTOTXT.read_bytes())
    (directory / "voc.labels").write_text("\n".join(labels) + "\n", encoding="utf-8")
    weights = directory / "zf.caffemodel"
    if caffemodel is None:
        weights.write_bytes(b"")
    else:
        weights.symlink_to(caffemodel)
    return directory


@pytest.mark.parametrize("background", [False, True])
def test_labels_with_or_without_the_background(tmp_path: Path, background: bool) -> None:
    need(PROTOTXT, VOC_NAMES)
    labels = ["__background__", *voc_labels()] if background else voc_labels()
    model = open_model_dir(make_model_dir(tmp_path / "m", labels))
    names = class_names(model, num_classes(read_prototxt(PROTOTXT)))
    assert len(names) == 21 and names[12] == "dog"


def test_labels_count_mismatch_is_an_error(tmp_path: Path) -> None:
    need(PROTOTXT)
    model = open_model_dir(make_model_dir(tmp_path / "m", ["cat", "dog"]))
    with pytest.raises(ForkliftError, match=r"voc\.labels: 2 labels but the network has 21 classes"):
        CaffeFasterRCNNPredictor(model, PredictOptions())


def run_net(prototxt: Path, caffemodel: Path, image: np.ndarray) -> list[np.ndarray]:
    net = cv2.dnn.readNetFromCaffe(str(prototxt), str(caffemodel))
    net.setInput(image, "data")
    net.setInput(np.array([[image.shape[2], image.shape[3], 1.0]], np.float32), "im_info")
    return list(net.forward(["proposal", "cls_prob", "bbox_pred"]))


@pytest.mark.slow
def test_rewritten_net_matches_a_hand_written_opencv_net(dog_caffemodel: Path, tmp_path: Path) -> None:
    text = PROTOTXT.read_text(encoding="utf-8")
    hand_written = re.sub(r"layer \{\n  name: 'proposal'.*?\n\}\n", HAND_WRITTEN_PROPOSAL, text, flags=re.DOTALL)
    assert hand_written.count('type: "Proposal"') == 1 and "Python" not in hand_written
    (tmp_path / "hand.prototxt").write_text(hand_written, encoding="utf-8")
    (tmp_path / "rewritten.prototxt").write_text(
        format_prototxt(rewrite_python_proposal(read_prototxt(PROTOTXT))), encoding="utf-8"
    )
    image = np.random.default_rng(0).normal(0, 60, (1, 3, 224, 288)).astype(np.float32)
    expected = run_net(tmp_path / "hand.prototxt", dog_caffemodel, image)
    actual = run_net(tmp_path / "rewritten.prototxt", dog_caffemodel, image)
    assert (expected[0][:, 1:] != 0).any(axis=1).sum() > 10  # the proposal layer really proposed regions
    for want, got in zip(expected, actual, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_predicts_dogs_on_a_photo(dog_caffemodel: Path, tmp_path: Path) -> None:
    need(DOG)
    model = open_model_dir(make_model_dir(tmp_path / "zf", voc_labels(), dog_caffemodel))
    predictor = CaffeFasterRCNNPredictor(model, PredictOptions(conf=0.5, threads=2))
    (result,) = predictor.predict([("dog.jpg", DOG.read_bytes())]).results
    height, width = cv2.imread(str(DOG)).shape[:2]
    assert result.error is None and result.detections
    assert {d.label for d in result.detections} == {"dog"}
    assert all(0 <= d.x1 <= d.x2 <= width and 0 <= d.y1 <= d.y2 <= height for d in result.detections)
    assert all(d.score >= 0.5 for d in result.detections)
    scores = [d.score for d in result.detections]
    assert scores == sorted(scores, reverse=True)
