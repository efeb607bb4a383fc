"""Classification training: a Darknet classifier cfg trained on generated shapes; its model directory answers with
classes through every runtime, and OpenCV's Darknet reader agrees with it."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from helpers import assert_resume_is_exact

from forklift.cli import main
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.evaluation.evaluate import evaluate
from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.train.settings import TrainSettings
from forklift.train.tasks.classify import set_classifier_classes
from forklift.train.trainer import train
from forklift.vision.images import decode_image
from forklift.vocabulary import Optimizer

pytestmark = pytest.mark.slow  # real servers, training or full-size reference nets: seconds each

CLASSIFIER = Path(__file__).parent / "cfgs" / "shapes-classifier.cfg"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("classify")
    synth_shapes(root / "data", 200, 64, seed=0, task="classify")
    return root


@pytest.fixture(scope="module")
def trained(work: Path) -> Path:
    """25 short epochs: enough to fit the training images; 160 images are too few to generalise from scratch
    (about 2,000 are needed here), so val is measured once, at the end, and not held to a floor."""
    settings = TrainSettings.of(data=work / "data", cfg=CLASSIFIER, epochs=25, batch=16, lr=0.003, seed=0, val_every=25)
    return train(settings, work / "run")


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_rewrites_the_scoring_convolution() -> None:
    text = set_classifier_classes(CLASSIFIER.read_text(), str(CLASSIFIER), 7, size=96)
    assert "filters=7" in text and "width=96" in text and "height=96" in text
    assert text.count("filters=32") == 1  # the other convolutions stay


def test_loss_falls_and_the_training_images_are_learnt(work: Path, trained: Path) -> None:
    rows = _rows(trained)
    assert len(rows) == 25 and rows[-1]["top1"] != "" and rows[0]["top1"] == ""
    assert float(rows[-1]["loss"]) < 0.85 * float(rows[0]["loss"])
    assert json.loads((trained / "eval" / "eval.json").read_text())["task"] == "classify"
    assert evaluate(trained, work / "data", split="train").metrics.top1 >= 0.4  # five classes: chance is 0.2


def test_model_directory_answers_with_classes_everywhere(work: Path, trained: Path) -> None:
    model = open_model_dir(trained)
    assert json.loads((trained / "forklift.json").read_text())["task"] == "classify"
    image_path = work / "data" / "images" / "000001.png"
    image = decode_image(image_path.read_bytes(), image_path.name)
    answers = {}
    for runtime in ("onnx", "torch"):
        predictor = load_predictor(model, runtime, PredictOptions())
        answer, _ = predictor.predict_image(image_path.name, image)
        answers[runtime] = {c.label: c.score for c in answer}
    assert answers["onnx"].keys() == answers["torch"].keys()
    for label, score in answers["torch"].items():
        assert abs(answers["onnx"][label] - score) < 1e-4
    net = cv2.dnn.readNetFromDarknet(str(model.files["cfg"]), str(model.files["weights"]))
    net.setInput(cv2.dnn.blobFromImage(cv2.resize(image, (64, 64), interpolation=cv2.INTER_LINEAR), 1 / 255.0))
    reference = net.forward().ravel()
    best = model.labels[int(np.argmax(reference))]
    assert max(answers["torch"], key=answers["torch"].get) == best


def test_detection_cfg_on_a_classify_set_is_refused(work: Path, capsys) -> None:
    detector = Path(__file__).parent / "cfgs" / "v3-spp-groups.cfg"
    with pytest.raises(ForkliftError, match="not a classifier cfg"):
        train(TrainSettings.of(data=work / "data", cfg=detector, epochs=1), work / "wrong")
    code = main(["train", "--data", str(work / "data"), "--cfg", str(detector), str(work / "wrong2")])
    assert code == 2 and "not a classifier cfg" in capsys.readouterr().err


def test_a_set_of_one_class_is_refused_and_a_batch_over_the_set_is_said(work: Path, tmp_path: Path, capsys) -> None:
    """One class trained to a top-1 of 1.0 and said nothing of it; a batch larger than the train split is one
    step an epoch (said, not refused: an analyst's first small set)."""
    one = tmp_path / "one"
    synth_shapes(one, 8, 64, seed=1, task="classify")
    index = json.loads((one / "dataset.json").read_text())
    index["classes"] = ["circle"]
    index["images"] = [{**image, "label": "circle"} for image in index["images"]]
    (one / "dataset.json").write_text(json.dumps(index))
    assert main(["train", "--data", str(one), "--cfg", str(CLASSIFIER), "--epochs", "1", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert f"{one}: one class (circle): a classifier tells 2 classes or more apart; add another" in err
    assert not (tmp_path / "m").exists()
    train(TrainSettings.of(data=work / "data", cfg=CLASSIFIER, epochs=1, batch=400, img=32), tmp_path / "big")
    assert (
        "--batch 400 is more than the 160 train images: each epoch is one step of them all" in capsys.readouterr().out
    )


# The state each torch optimiser keeps per parameter: which one stepped the weights shows in the checkpoint.
OPTIMISER_STATE = {
    Optimizer.SGD: set(),
    Optimizer.MOMENTUM: {"momentum_buffer"},
    Optimizer.ADAM: {"exp_avg", "exp_avg_sq"},
    Optimizer.ADAMW: {"exp_avg", "exp_avg_sq"},
    Optimizer.RMSPROP: {"square_avg", "momentum_buffer"},
    Optimizer.ADAGRAD: {"sum"},
    Optimizer.ADADELTA: {"square_avg", "acc_delta"},
}


def test_every_optimiser_steps_the_weights(work: Path) -> None:
    first_layer = {}
    for kind in Optimizer:
        settings = TrainSettings.of(data=work / "data", cfg=CLASSIFIER, epochs=1, batch=32, optimizer=kind,
                                    lr=1.0 if kind == Optimizer.ADADELTA else 0.01, momentum=0.8, seed=0)  # fmt: skip
        out = train(settings, work / f"opt-{kind}")
        checkpoint = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
        assert set(checkpoint["optimiser"]["state"].get(0, {})) - {"step"} == OPTIMISER_STATE[kind], kind
        assert math.isfinite(float(_rows(out)[0]["loss"])), kind
        first_layer[kind] = next(v for k, v in checkpoint["model"].items() if k.endswith("weight"))
    for one, other in itertools.combinations(Optimizer, 2):  # same start, same batches: each stepped its own way
        assert not torch.equal(first_layer[one], first_layer[other]), (one, other)


def test_an_rmsprop_run_resumes_exactly(work: Path, monkeypatch) -> None:
    settings = TrainSettings.of(data=work / "data", cfg=CLASSIFIER, epochs=3, batch=32, lr=0.003, seed=0,
                                optimizer="rmsprop", momentum=0.8, weight_decay=0.01, val_every=3)  # fmt: skip
    whole = train(settings, work / "rmsprop-whole")
    assert_resume_is_exact(monkeypatch, whole, work / "rmsprop-interrupted", settings)


def test_impossible_optimiser_settings_are_one_line_errors(work: Path, capsys) -> None:
    base = ["train", "--data", str(work / "data"), "--cfg", str(CLASSIFIER)]
    for option, problem in [
        (["--momentum", "1"], "--momentum 1.0: must be from 0 up to (not including) 1"),
        (["--lr", "0"], "--lr 0.0: must be a finite number above 0"),
        (["--lr", "inf"], "--lr inf: must be a finite number above 0"),
        (["--weight-decay", "-1"], "--weight-decay -1.0: must be a finite number of 0 or more"),
        (["--aug-hsv", "nan"], "--aug-hsv nan: must be a finite number of 0 or more"),
    ]:
        assert main([*base, *option, str(work / "refused")]) == 2
        assert capsys.readouterr().err.strip() == f"forklift: error: {problem}"
    assert not (work / "refused").exists()
