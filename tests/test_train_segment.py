"""Segmentation training: a torchvision architecture trained on generated shapes with masks; its model directory
answers with segments, its ONNX export computes what the net computes, `forklift eval` measures what the trainer's
in-memory validation measures, and an interrupted run resumes to the same weights."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from helpers import assert_resume_is_exact
from pycocotools import mask as coco_mask

from forklift.cli import main
from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import load_dataset
from forklift.data.synth import synth_shapes
from forklift.evaluation.evaluate import evaluate
from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.load import load_predictor
from forklift.train.settings import TrainSettings
from forklift.train.tasks.base import NetworkSource
from forklift.train.tasks.segment import SegmentationTask, normalise
from forklift.train.trainer import train
from forklift.vision.images import decode_image
from forklift.vision.masks import IGNORE
from forklift.vision.resize import stretch

pytestmark = pytest.mark.slow  # real servers, training or full-size reference nets: seconds each

ARCH = "lraspp_mobilenet_v3_large"
SETTINGS = {"arch": ARCH, "epochs": 3, "batch": 8, "img": 64, "lr": 0.01, "seed": 0}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("segment")
    synth_shapes(root / "data", 40, 64, seed=0, task="segment")
    return root


@pytest.fixture(scope="module")
def trained(work: Path) -> Path:
    """Three short epochs: enough for the loss to fall, too few to find the shapes (val stays near background)."""
    return train(TrainSettings.of(data=work / "data", **SETTINGS), work / "run")


@pytest.fixture(scope="module")
def fresh(work: Path) -> tuple[SegmentationTask, Path]:
    """A newly initialised net and its model directory: unlike the briefly trained one, it answers with classes
    other than background, which makes the comparisons below count."""
    task = SegmentationTask(load_dataset(work / "data"), NetworkSource(arch=ARCH, img=64), seed=1)
    task.write_model_dir(work / "fresh")
    return task, work / "fresh"


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _best_task(work: Path, trained: Path) -> SegmentationTask:
    task = SegmentationTask(load_dataset(work / "data"), NetworkSource(arch=ARCH, img=64), seed=0)
    task.net.load_state_dict(torch.load(trained / "checkpoints" / "best.pt", weights_only=True)["model"])
    return task


def test_augmented_samples_are_drawn_by_seed_epoch_and_image(work: Path) -> None:
    dataset = load_dataset(work / "data")
    task = SegmentationTask(dataset, NetworkSource(img=64), seed=0)
    images = task.images(dataset.images[:4], augment=True)
    first = [images[i] for i in range(4)]
    for image, labels in first:
        assert image.shape == (3, 64, 64) and labels.shape == (64, 64) and labels.dtype == torch.int64
        assert set(labels.unique().tolist()) <= {*range(len(dataset.classes) + 1), IGNORE}
    assert any((labels == IGNORE).any() for _, labels in first)  # shrunk or shifted: the border is ignored
    images.epoch = 1
    assert not all(torch.equal(images[i][0], first[i][0]) for i in range(4))
    images.epoch = 0
    assert all(torch.equal(images[i][1], first[i][1]) for i in range(4))


def test_a_batch_of_one_trains_through_pooled_batch_norm(work: Path) -> None:
    """DeepLabV3's ASPP normalises a globally pooled tensor: a last batch of one image must still give a loss."""
    dataset = load_dataset(work / "data")
    task = SegmentationTask(dataset, NetworkSource(arch="deeplabv3_mobilenet_v3_large", img=64), seed=0)
    inputs, targets = task.collate([task.images(dataset.images[:1], augment=False)[0]])
    loss = task.loss(inputs, targets)["loss"]
    loss.backward()
    assert torch.isfinite(loss) and loss > 0


def test_loss_falls_and_val_is_measured_each_epoch(trained: Path) -> None:
    rows = _rows(trained)
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    assert float(rows[-1]["loss"]) < 0.8 * float(rows[0]["loss"])
    assert all(r["miou"] != "" and r["pixel_accuracy"] != "" for r in rows)
    config = json.loads((trained / "forklift.json").read_text())
    assert config["task"] == "segment" and config["input_width"] == 64 and config["resize"] == "stretch"
    assert (trained / f"{ARCH}.onnx").is_file() and (trained / f"{ARCH}.names").is_file()
    assert json.loads((trained / "eval" / "eval.json").read_text())["task"] == "segment"


# The model directory runs on ONNX Runtime, the in-memory check on torch: a pixel whose two best logits tie to 1e-5
# may take either label on another CPU, moving the metrics by ~1e-5 a pixel; a wrong mapping moves them by far more.
SAME_METRIC = 1e-3


def test_eval_of_the_model_directory_equals_the_in_memory_validation(work: Path, trained: Path, fresh) -> None:
    data = work / "data"
    val = [image for image in usable_images(check_dataset(data)) if image.split == "val"]
    in_memory = _best_task(work, trained).validate(val, work / "unused")
    measured = json.loads((trained / "eval" / "eval.json").read_text())
    assert abs(measured["miou"] - in_memory["miou"]) < SAME_METRIC
    assert abs(measured["pixel_accuracy"] - in_memory["pixel_accuracy"]) < SAME_METRIC
    task, model_dir = fresh
    in_memory = task.validate(val, work / "unused")
    measured_fresh = evaluate(model_dir, data).metrics
    assert measured_fresh.pixel_accuracy < 0.9  # not all background: the comparison sees the classes
    assert abs(measured_fresh.miou - in_memory["miou"]) < SAME_METRIC
    assert abs(measured_fresh.pixel_accuracy - in_memory["pixel_accuracy"]) < SAME_METRIC


def test_onnx_export_computes_what_the_net_computes(work: Path, trained: Path) -> None:
    task = _best_task(work, trained).net.eval()
    path = work / "data" / "images" / "000001.png"
    fitted, _ = stretch(decode_image(path.read_bytes(), path.name), 64, 64)
    inputs = torch.stack([normalise(fitted), normalise(fitted[::-1].copy())])
    with torch.no_grad():
        expected = task(inputs)["out"].numpy()
    session = onnxruntime.InferenceSession(str(trained / f"{ARCH}.onnx"), providers=["CPUExecutionProvider"])
    (found,) = session.run(None, {session.get_inputs()[0].name: inputs.numpy()})
    np.testing.assert_allclose(found, expected, rtol=1e-4, atol=1e-4)


def test_model_directory_answers_with_segments(work: Path, trained: Path, fresh) -> None:
    path = work / "data" / "images" / "000001.png"
    image = decode_image(path.read_bytes(), path.name)
    for model_dir in (trained, fresh[1]):
        predictor = load_predictor(open_model_dir(model_dir))
        segments, _ = predictor.predict_image(path.name, image)
        assert predictor.task == "segment"
        for segment in segments:
            assert segment.label in load_dataset(work / "data").classes
            assert int(coco_mask.decode(segment.mask).sum()) == segment.pixels > 0
    assert segments  # the fresh net finds classes everywhere


def test_interrupted_run_resumes_to_the_same_weights(work: Path, trained: Path, monkeypatch) -> None:
    assert_resume_is_exact(monkeypatch, trained, work / "interrupted", TrainSettings.of(data=work / "data", **SETTINGS))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--arch", "unet"], "--arch unet: not a segmentation architecture; known: lraspp_mobilenet_v3_large"),
        (["--cfg", "tiny.cfg"], "--cfg tiny.cfg: segmentation trains a torchvision architecture"),
        (["--model", "models/x"], "--model models/x: segmentation trains a torchvision architecture"),
    ],
)
def test_bad_sources_are_one_line_errors(work: Path, flags: list[str], message: str, capsys) -> None:
    code = main(["train", "--data", str(work / "data"), *flags, "--img", "64", str(work / "refused")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (work / "refused").exists()
