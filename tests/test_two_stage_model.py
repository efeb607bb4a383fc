"""torchvision's Faster R-CNN as a forklift model directory: export, ONNX Runtime and OpenVINO against PyTorch,
`forklift predict`, `serve` (native and PowerAI Vision), `models inspect`, and the weights file checks.

Fresh weights give a degenerate net (MobileNet's features vanish with batch-norm statistics of 0 and 1, the
heads start at near-uniform scores), so the fixture measures batch-norm statistics on a few images and widens the
box classifier: the scores then spread and the comparisons are between real, distinct boxes.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from agreement import assert_same_detections, detections_from_json
from helpers import Server, forklift_here, shared
from torch import nn

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.model_files.two_stage_settings import TwoStageSettings
from forklift.nets.two_stage import build_two_stage, load_two_stage
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.runtime.two_stage import TwoStagePredictor
from forklift.runtime.two_stage_export import SingleImage, write_two_stage_model_dir
from forklift.vision.images import decode_image
from forklift.vision.resize import letterbox
from forklift.vision.results import Detection

pytestmark = pytest.mark.slow  # exports and runs detectors, starts a server: seconds each

ARCH = "fasterrcnn_mobilenet_v3_large_320_fpn"
SIZE = 160
CLASSES = ["circle", "square", "triangle"]
SETTINGS = TwoStageSettings(ARCH, len(CLASSES), SIZE)
TOLERANCE = 1e-3  # boxes in pixels of the letterboxed input, and scores


def generated_image() -> np.ndarray:
    """Flat rectangles of random colour on gray, 240 x 200: a photo-like mix of edges and flat areas."""
    generator = np.random.default_rng(3)
    image = np.full((200, 240, 3), 120, np.uint8)
    for _ in range(12):
        x0, x1 = sorted(generator.integers(0, 240, 2))
        y0, y1 = sorted(generator.integers(0, 200, 2))
        image[y0:y1, x0:x1] = generator.integers(0, 256, 3)
    return image


def photo() -> np.ndarray:
    return decode_image(shared("images/dog.jpg").read_bytes(), "dog.jpg", 10**8)


def as_input(image: np.ndarray) -> torch.Tensor:
    fitted, _ = letterbox(image, SIZE, SIZE)
    return torch.from_numpy(fitted.transpose(2, 0, 1).astype(np.float32) / 255.0)


def enliven(net: nn.Module, images: list[torch.Tensor]) -> None:
    """Batch-norm statistics measured on `images`, and box-classifier logits of spread ~2 (see the module note)."""
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None  # one pass: the statistics of that batch
    net.backbone.train()
    with torch.no_grad():
        net.backbone(net.transform(images)[0].tensors)
        net.roi_heads.box_predictor.cls_score.weight.mul_(20.0)
        net.roi_heads.box_predictor.bbox_pred.weight.mul_(20.0)
    net.eval()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, nn.Module]:
    net = build_two_stage(SETTINGS, seed=1)
    generator = torch.Generator().manual_seed(0)
    enliven(net, [as_input(photo()), as_input(generated_image()), torch.rand(3, SIZE, SIZE, generator=generator)])
    out = tmp_path_factory.mktemp("two-stage") / "frcnn"
    write_two_stage_model_dir(net, out, CLASSES, SETTINGS)
    return out, net


def test_model_directory(made: tuple[Path, nn.Module]) -> None:
    out, net = made
    model = open_model_dir(out)
    assert model.format == "two_stage" and model.labels == CLASSES
    assert {p.name for p in out.iterdir()} == {f"{ARCH}.onnx", f"{ARCH}.pt", f"{ARCH}.names", "forklift.json"}
    config = json.loads((out / "forklift.json").read_text())
    assert config["task"] == "detect" and config["resize"] == "letterbox"
    assert (config["input_width"], config["input_height"], config["conf"], config["iou"]) == (SIZE, SIZE, 0.25, 0.5)
    assert config["architecture"] == ARCH and TwoStageSettings.from_json(config["two_stage"]) == SETTINGS
    proto = onnx.load(str(out / f"{ARCH}.onnx"))
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == 17
    assert [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim] == [1, 3, SIZE, SIZE]
    assert [o.name for o in proto.graph.output] == ["boxes", "scores", "labels"]
    loaded, settings, labels = load_two_stage(out)
    assert settings == SETTINGS and labels == CLASSES and not loaded.training
    for key, value in net.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
@pytest.mark.parametrize("image", ["photo", "generated"])
def test_engines_agree_with_pytorch(made: tuple[Path, nn.Module], runtime: str, image: str) -> None:
    out, _ = made
    net, _, _ = load_two_stage(out)
    tensor = as_input(photo() if image == "photo" else generated_image())
    with torch.no_grad():
        (expected,) = net([tensor])
    predictor = load_predictor(open_model_dir(out), runtime, PredictOptions(threads=2))
    assert isinstance(predictor, TwoStagePredictor) and predictor.runtime == runtime
    boxes, scores, labels = predictor.network.detect(tensor.numpy()[None])
    assert float(scores.max() - scores.min()) > 0.2
    heads = net.roi_heads
    matched = assert_same_detections(
        _detections(boxes, scores, labels),
        _detections(expected["boxes"].numpy(), expected["scores"].numpy(), expected["labels"].numpy()),
        conf=heads.score_thresh, iou=heads.nms_thresh, pixels=TOLERANCE, score_rel=TOLERANCE,
    )  # fmt: skip
    assert matched > 10


def _detections(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray) -> list[Detection]:
    return [
        Detection.from_corners(box, label=str(int(k)), score=float(s))
        for box, s, k in zip(boxes, scores, labels, strict=True)
    ]


def test_one_graph_answers_images_with_and_without_proposals(made: tuple[Path, nn.Module], tmp_path: Path) -> None:
    """torchvision decodes boxes on a branch that depends on whether an image has proposals, and a trace keeps
    the branch its example took: a plain export traced on an image with proposals fails in ONNX Runtime on one
    without. The exported graph decodes on one path and answers both kinds as PyTorch does."""
    net, image = made[1], as_input(photo())
    blank = torch.full_like(image, float("nan"))  # no region is proposed on NaN pixels
    with torch.no_grad():
        (expected,), (nothing,) = net([image]), net([blank])
    assert len(expected["boxes"]) > 0 and len(nothing["boxes"]) == 0
    plain = tmp_path / "plain.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(SingleImage(copy.deepcopy(net)), (image[None],), str(plain), input_names=["images"],
                          dynamo=False)  # fmt: skip
    with pytest.raises(Exception, match="Reshape"):  # the failure the export avoids
        ort.InferenceSession(str(plain)).run(None, {"images": blank[None].numpy()})
    write_two_stage_model_dir(net, tmp_path / "m", CLASSES, SETTINGS)
    network = load_predictor(open_model_dir(tmp_path / "m"), "onnx").network
    np.testing.assert_allclose(network.detect(image[None].numpy())[0], expected["boxes"].numpy(), atol=TOLERANCE)
    assert [len(output) for output in network.detect(blank[None].numpy())] == [0, 0, 0]
    silent = copy.deepcopy(net)  # NaN pixels are not an input for OpenVINO; a net that proposes nothing is
    silent.rpn.score_thresh = 2.0  # above any objectness probability
    write_two_stage_model_dir(silent, tmp_path / "silent", CLASSES, SETTINGS)
    for runtime in ("onnx", "openvino"):
        network = load_predictor(open_model_dir(tmp_path / "silent"), runtime).network
        assert [len(output) for output in network.detect(image[None].numpy())] == [0, 0, 0], runtime


def test_predictor_maps_boxes_back_and_keeps_conf(made: tuple[Path, nn.Module]) -> None:
    out, _ = made
    net, _, _ = load_two_stage(out)
    image = photo()
    _, placement = letterbox(image, SIZE, SIZE)
    with torch.no_grad():
        (expected,) = net([as_input(image)])
    keep = expected["scores"] >= 0.25
    assert 0 < int(keep.sum()) < len(keep)
    pixels = placement.to_original(expected["boxes"][keep].numpy())
    wanted = [
        Detection.from_corners(box, label=CLASSES[int(k) - 1], score=float(s))
        for box, k, s in zip(pixels, expected["labels"][keep], expected["scores"][keep], strict=True)
    ]
    found, _ = load_predictor(open_model_dir(out)).predict_image("dog.jpg", image)
    assert assert_same_detections(found, wanted, conf=0.25, iou=0.5, pixels=0.01, score_rel=TOLERANCE) > 0
    tighter, _ = load_predictor(open_model_dir(out), options=PredictOptions(iou=0.2)).predict_image("d", image)
    assert 0 < len(tighter) < len(found)


def test_predict_command(made: tuple[Path, nn.Module]) -> None:
    out, _ = made
    printed = json.loads(forklift_here("predict", out, shared("images/dog.jpg"), "--json").stdout)
    (result,) = printed["results"]
    expected = load_predictor(open_model_dir(out)).predict([("dog.jpg", shared("images/dog.jpg").read_bytes())])
    assert printed["status"] == "OK" and result["detections"]
    assert result["detections"] == expected.to_json()["results"][0]["detections"]


def test_serve_native_and_powerai_vision(made: tuple[Path, nn.Module]) -> None:
    out, _ = made
    photo_bytes = shared("images/dog.jpg").read_bytes()
    expected = load_predictor(open_model_dir(out)).predict([("dog.jpg", photo_bytes)]).to_json()["results"][0]
    with Server(f"{out}=frcnn", "--instances", "1", "--threads", "1") as server:
        native = httpx.post(f"{server.url}/predict/frcnn", files={"files": ("dog.jpg", photo_bytes)}, timeout=60)
        powerai = httpx.post(f"{server.url}/api/dlapis/frcnn", files={"files": ("dog.jpg", photo_bytes)}, timeout=60)
    assert native.status_code == 200
    served_json = detections_from_json(native.json()["results"][0]["detections"])
    assert assert_same_detections(served_json, detections_from_json(expected["detections"]), conf=0.25, iou=0.5) > 0
    body = powerai.json()
    assert powerai.status_code == 200 and body["result"] == "success" and body["webAPIId"] == "frcnn"
    served = [
        Detection(c["xmin"], c["ymin"], c["xmax"], c["ymax"], label=c["label"], score=c["confidence"])
        for c in body["classified"]
    ]
    wanted = detections_from_json(expected["detections"])
    assert assert_same_detections(served, wanted, conf=0.25, iou=0.5) > 0


def test_inspect_counts_parameters_and_flops(made: tuple[Path, nn.Module]) -> None:
    out, net = made
    summary = json.loads(forklift_here("models", "inspect", out, "--json").stdout)
    assert summary["format"] == "two_stage" and summary["task"] == "detect" and summary["classes"] == len(CLASSES)
    assert (summary["input_width"], summary["input_height"]) == (SIZE, SIZE)
    assert summary["parameters"] == sum(p.numel() for p in net.parameters())
    assert summary["flops"] > 10**7


def test_fresh_weights_are_seeded_and_leave_the_global_rng(tmp_path: Path) -> None:
    state = torch.random.get_rng_state()
    first = build_two_stage(SETTINGS, seed=5).state_dict()
    assert torch.equal(torch.random.get_rng_state(), state)
    again = build_two_stage(SETTINGS, seed=5).state_dict()
    other = build_two_stage(SETTINGS, seed=6).state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_weights_files(tmp_path: Path) -> None:
    five = build_two_stage(TwoStageSettings(ARCH, 5, SIZE), seed=2)
    torch.save(five.state_dict(), tmp_path / "detector.pt")  # a whole detector with another class count
    three = build_two_stage(SETTINGS, seed=0, weights=tmp_path / "detector.pt")
    backbone = {k: v for k, v in five.state_dict().items() if k.startswith("backbone.body.")}
    assert all(torch.equal(three.state_dict()[k], v) for k, v in backbone.items())
    assert three.roi_heads.box_predictor.cls_score.out_features == len(CLASSES) + 1
    torch.save({k.removeprefix("backbone.body."): v for k, v in backbone.items()}, tmp_path / "backbone.pt")
    from_backbone = build_two_stage(SETTINGS, seed=0, weights=tmp_path / "backbone.pt")
    assert all(torch.equal(from_backbone.state_dict()[k], v) for k, v in backbone.items())
    (tmp_path / "junk.pth").write_bytes(b"not a state dict")
    torch.save({"unrelated.weight": torch.zeros(3)}, tmp_path / "other.pth")
    for name, words in [("junk.pth", "cannot read it"), ("other.pth", "no tensor matches")]:
        with pytest.raises(ForkliftError, match=words) as caught:
            build_two_stage(SETTINGS, seed=0, weights=tmp_path / name)
        assert name in str(caught.value) and "\n" not in str(caught.value)


def test_anchor_sizes_and_proposals() -> None:
    settings = TwoStageSettings(ARCH, 3, SIZE, anchor_sizes=(16, 32, 64), proposals=50)
    net = build_two_stage(settings, seed=0).eval()
    assert net.rpn.anchor_generator.sizes == ((16,), (32,), (64,)) and net.rpn.post_nms_top_n() == 50
    assert net.rpn.head.cls_logits.out_channels == 3  # one size x three aspect ratios per location
    with torch.no_grad():
        (found,) = net([torch.rand(3, SIZE, SIZE)])
    assert found["boxes"].shape[1] == 4
    assert TwoStageSettings.from_json(settings.to_json()) == settings
    with pytest.raises(ForkliftError, match="one per level"):
        build_two_stage(TwoStageSettings(ARCH, 3, SIZE, anchor_sizes=(16, 32)), seed=0)
