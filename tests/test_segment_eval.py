"""Segmentation metrics against torchmetrics, a tiny ONNX segmentation model against torch's argmax, and the
segments through `forklift predict`, `forklift eval` and a real `forklift serve`."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import cv2
import httpx
import numpy as np
import onnxruntime
import pytest
import torch
from agreement import assert_same_label_maps
from helpers import Server
from PIL import Image
from torch import nn
from torchmetrics.classification import MulticlassAccuracy, MulticlassJaccardIndex

from forklift.data.dataset import Dataset
from forklift.data.masks import load_mask
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.evaluation.segmentation import segmentation_metrics
from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.runtime.segment_export import write_segment_model_dir
from forklift.vision.masks import decode_rle, labels_from_segments
from forklift.vision.results import Segment

pytestmark = pytest.mark.slow  # real servers, training or full-size reference nets: seconds each

CLASSES = ["circle", "square", "triangle", "star", "cross"]
MEAN, SCALE = [120.0, 110.0, 100.0], [1 / 60.0, 1 / 55.0, 1 / 50.0]
WIDTH, HEIGHT = 64, 48


def tiny_net(seed: int = 0) -> nn.Module:
    """Logits of background + 5 classes at the input's resolution, random weights."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1 + len(CLASSES), 3, padding=1))


class TorchvisionLike(nn.Module):
    """Answers a dict as torchvision's segmentation models do."""

    def __init__(self) -> None:
        super().__init__()
        self.body = tiny_net()

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"out": self.body(images), "aux": self.body(images)}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("segment-model")
    return write_segment_model_dir(TorchvisionLike().eval(), out, CLASSES, (WIDTH, HEIGHT), MEAN, SCALE)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return synth_shapes(tmp_path_factory.mktemp("segment-data") / "shapes", n=12, size=96, seed=5, task="segment")


def torch_labels(image: np.ndarray) -> np.ndarray:
    """The reference: normalise by hand, run the torch net, argmax over the classes."""
    tensor = (torch.from_numpy(image).float() - torch.tensor(MEAN)) * torch.tensor(SCALE)
    with torch.no_grad():
        logits = TorchvisionLike().eval()(tensor.permute(2, 0, 1)[None])["out"][0]
    return logits.argmax(0).numpy().astype(np.uint8)


def png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


# ---- metrics -----------------------------------------------------------------------------------------------------


def random_pairs(seed: int, classes: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Masks of random classes with ignore pixels; class 3 absent from truth, class 4 from both."""
    rng = np.random.default_rng(seed)
    truth, predicted = [], []
    for shape in ((20, 30), (17, 9), (40, 40)):
        t = rng.integers(0, classes + 1, shape).astype(np.uint8)
        p = np.where(rng.random(shape) < 0.6, t, rng.integers(0, classes + 1, shape)).astype(np.uint8)
        t[np.isin(t, (3, 4))] = 1
        p[p == 4] = 2
        t[rng.random(shape) < 0.1] = 255
        truth.append(t)
        predicted.append(p)
    return truth, predicted


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_iou_matches_torchmetrics(seed: int) -> None:
    names = ["a", "b", "c", "d", "e"]
    truth, predicted = random_pairs(seed, len(names))
    metrics = segmentation_metrics(truth, predicted, names)
    jaccard = MulticlassJaccardIndex(num_classes=6, average=None, ignore_index=255)
    mean = MulticlassJaccardIndex(num_classes=6, average="macro", ignore_index=255)
    accuracy = MulticlassAccuracy(num_classes=6, average="micro", ignore_index=255)
    for t, p in zip(truth, predicted, strict=True):
        for metric in (jaccard, mean, accuracy):
            metric.update(torch.from_numpy(p).long(), torch.from_numpy(t).long())
    reference = jaccard.compute().tolist()
    ours = list(metrics.iou.values())
    assert ours[4] is None and all(v is not None for k, v in enumerate(ours) if k != 4)
    assert ours[3] == 0.0  # predicted but never true: present, IoU 0
    assert [v for k, v in enumerate(ours) if k != 4] == pytest.approx([v for k, v in enumerate(reference) if k != 4])
    assert metrics.miou == pytest.approx(mean.compute().item())
    assert metrics.pixel_accuracy == pytest.approx(accuracy.compute().item())
    assert metrics.pixels == sum(int((t != 255).sum()) for t in truth) == sum(map(sum, metrics.confusion))


def test_metrics_by_hand_and_bad_masks() -> None:
    truth = np.array([[0, 1, 1, 255]], np.uint8)
    predicted = np.array([[0, 1, 0, 1]], np.uint8)
    metrics = segmentation_metrics([truth], [predicted], ["x"])
    assert metrics.iou == {"background": 0.5, "x": 0.5}
    assert metrics.pixel_accuracy == pytest.approx(2 / 3) and metrics.confusion == [[1, 0], [1, 1]]
    with pytest.raises(ForkliftError, match="sizes must match"):
        segmentation_metrics([truth], [predicted[:, :2]], ["x"])
    with pytest.raises(ForkliftError, match="predicted mask holds 7"):
        segmentation_metrics([truth], [predicted + 7], ["x"])


# ---- the model directory and its predictions ---------------------------------------------------------------------


def test_model_dir_files_and_onnx_output(model: Path) -> None:
    config = json.loads((model / "forklift.json").read_text())
    assert config["task"] == "segment" and config["resize"] == "stretch"
    assert (config["input_width"], config["input_height"], config["scale"]) == (WIDTH, HEIGHT, SCALE)
    assert (model / "model.names").read_text().split() == CLASSES
    session = onnxruntime.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"])
    assert session.get_outputs()[0].name == "masks"
    batch = np.random.default_rng(0).standard_normal((3, 3, HEIGHT, WIDTH)).astype(np.float32)
    (logits,) = session.run(None, {"images": batch})
    with torch.no_grad():
        expected = TorchvisionLike().eval()(torch.from_numpy(batch))["out"].numpy()
    assert logits.shape == (3, 6, HEIGHT, WIDTH) and np.allclose(logits, expected, atol=1e-4)
    with pytest.raises(ForkliftError, match="6 channels, but background \\+ 4 classes"):
        write_segment_model_dir(tiny_net(), model / "other", CLASSES[:4], (WIDTH, HEIGHT))


def test_predicted_masks_are_torchs_argmax(model: Path) -> None:
    predictor = load_predictor(open_model_dir(model), options=PredictOptions(threads=1))
    rng = np.random.default_rng(1)
    at_input = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    larger = rng.integers(0, 256, (150, 100, 3), dtype=np.uint8)
    prediction = predictor.predict([("a.png", png(at_input)), ("b.png", png(larger))])
    first, second = prediction.results
    assert predictor.task == "segment" and first.error is None and first.segments
    found = labels_from_segments(first.segments, CLASSES, HEIGHT, WIDTH)
    assert_same_label_maps(found, torch_labels(at_input))
    assert sum(s.pixels for s in first.segments) == int((found > 0).sum())
    for segment in first.segments:
        assert segment.mask["size"] == [HEIGHT, WIDTH] and isinstance(segment.mask["counts"], str)
        assert int(decode_rle(segment.mask).sum()) == segment.pixels
    stretched = cv2.resize(larger, (WIDTH, HEIGHT), interpolation=cv2.INTER_LINEAR)
    expected = cv2.resize(torch_labels(stretched), (100, 150), interpolation=cv2.INTER_NEAREST_EXACT)
    assert_same_label_maps(labels_from_segments(second.segments, CLASSES, 150, 100), expected)
    entry = prediction.to_json()["results"][1]
    assert set(entry) == {"file", "segments"} and set(entry["segments"][0]) == {"label", "pixels", "mask"}


def test_letterbox_maps_back_the_image_part_only(model: Path) -> None:
    predictor = load_predictor(open_model_dir(model), options=PredictOptions(threads=1, resize="letterbox"))
    image = np.random.default_rng(2).integers(0, 256, (24, 64, 3), dtype=np.uint8)  # fills rows 12..36 of 48
    (result,) = predictor.predict([("wide.png", png(image))]).results
    canvas = np.full((HEIGHT, WIDTH, 3), 127, np.uint8)
    canvas[12:36] = image
    expected = torch_labels(canvas)[12:36]
    assert_same_label_maps(labels_from_segments(result.segments, CLASSES, 24, 64), expected)


def test_forklift_eval_and_predict_on_a_segment_set(model: Path, shapes: Dataset, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "forklift.cli", "eval", str(model), "--data", str(shapes.root)]
    result = subprocess.run([*command, "--out", str(tmp_path), "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["task"] == "segment" and set(report["iou"]) == {"background", *CLASSES}
    images = [image for image in shapes.images if image.split == "val"]
    predictor = load_predictor(open_model_dir(model), options=PredictOptions(threads=1))
    reference = MulticlassJaccardIndex(num_classes=6, average="macro", ignore_index=255)
    for image in images:
        (answer,) = predictor.predict([(image.file, shapes.path(image).read_bytes())]).results
        found = labels_from_segments(answer.segments, CLASSES, image.height, image.width)
        reference.update(torch.from_numpy(found).long(), torch.from_numpy(load_mask(shapes, image)).long())
    assert report["images"] == len(images) and report["miou"] == pytest.approx(reference.compute().item())
    assert (tmp_path / "confusion.png").read_bytes()[:4] == b"\x89PNG"
    shown = subprocess.run([*command, "--out", str(tmp_path / "again")], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "mIoU" in shown.stdout and "IoU background" in shown.stdout
    predicted = subprocess.run(
        [sys.executable, "-m", "forklift.cli", "predict", str(model), str(shapes.path(images[0])), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert predicted.returncode == 0 and "segments" in json.loads(predicted.stdout)["results"][0]


# ---- serving -----------------------------------------------------------------------------------------------------


def test_serve_answers_segments(model: Path) -> None:
    image = np.random.default_rng(3).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    local = load_predictor(open_model_dir(model), options=PredictOptions(threads=1))
    (answer,) = local.predict([("x.png", png(image))]).results
    expected = answer.segments or []
    with Server(f"{model}=seg", "--instances", "1") as server:
        response = httpx.post(f"{server.url}/predict/seg", files={"files": ("x.png", png(image))}, timeout=60)
        assert response.status_code == 200, response.text
        served = [Segment(**s) for s in response.json()["results"][0]["segments"]]
        assert_same_label_maps(
            labels_from_segments(served, CLASSES, HEIGHT, WIDTH), labels_from_segments(expected, CLASSES, HEIGHT, WIDTH)
        )
        powerai = httpx.post(f"{server.url}/api/dlapis/seg", files={"files": ("x.png", png(image))}, timeout=60)
        assert powerai.status_code == 400 and "has no masks" in powerai.json()["error"]
        facts = httpx.get(f"{server.url}/v2/models/seg", timeout=10).json()
        assert facts["outputs"][0]["name"] == "masks" and facts["outputs"][0]["shape"][1] == 6
        assert httpx.get(f"{server.url}/healthz").json()["models"]["seg"]["task"] == "segment"
