"""Two-stage detector training ("optimized for accuracy"): a torchvision Faster R-CNN trained by forklift's trainer
on generated shapes learns, resumes exactly, writes a model directory that opens; its options are refused for YOLO
training; and `synth shapes` makes the small, many-object data sets such detectors are for."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest
import torch
from helpers import CFGS, assert_resume_is_exact

from forklift.cli import main
from forklift.data.dataset import Dataset, load_dataset
from forklift.data.split import split_dataset
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.train.settings import TrainSettings, resumed_settings
from forklift.train.tasks import NetworkSource, TwoStageOptions, make_task
from forklift.train.trainer import train

pytestmark = pytest.mark.slow  # training: seconds to a minute

ARCH = "fasterrcnn_mobilenet_v3_large_320_fpn"
# 64 RoIs per image for the box head, not torchvision's 512: a third of the step time on 1-2 shapes an image
SETTINGS = {"arch": ARCH, "epochs": 3, "batch": 4, "img": 128, "lr": 0.001, "seed": 0, "roi_samples": 64}
LEARNING = {**SETTINGS, "epochs": 4, "lr": 0.002, "val_every": 2, "roi_samples": None}
# Measured on the shared 2-core machine: 4 epochs on 64 train images at 128 px, about 65 s with the export; the loss
# falls from 1.45 to 0.54 and val mAP@.5 (8 images, in-memory validation) is 0.0010 at its best epoch (2); an
# untrained net scores 0.0000. From fresh weights Faster R-CNN needs far longer than a test can take: the floor
# (about half) checks only that it starts to find shapes; the falling loss is the firmer sign that it learns.
MAP50_FLOOR = 0.0005


def _shapes(out: Path, n: int) -> Path:
    """n images of 128 px with 1-2 shapes of 32-56 px: objects a net from fresh weights starts to find at once."""
    synth_shapes(out, n, 128, seed=0, objects=(1, 2), object_size=(32, 56))
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 images, all train (two steps an epoch): the resume compares weights, so no validation is needed."""
    root = tmp_path_factory.mktemp("two_stage")
    split_dataset(_shapes(root / "data", 8), val=0.0, test=0.0, seed=0)
    return root


@pytest.fixture(scope="module")
def trained(work: Path) -> Path:
    """An uninterrupted 3-epoch run, for the resume."""
    return train(TrainSettings.of(data=work / "data", **SETTINGS), work / "run")


def test_a_short_run_learns_and_writes_a_model_directory(tmp_path: Path) -> None:
    settings = TrainSettings.of(data=_shapes(tmp_path / "data", 80), **LEARNING)
    out = train(settings, tmp_path / "run")  # ends with `forklift eval` on ONNX
    with (out / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    measured = [float(row["map50"]) for row in rows if row["map50"]]
    assert float(rows[-1]["loss"]) < 0.6 * float(rows[0]["loss"]), [row["loss"] for row in rows]
    assert max(measured) >= MAP50_FLOOR, measured
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[:6] == ["epoch", "loss", "classifier", "box_reg", "objectness", "rpn_box_reg"]
    assert {"map50", "map"} <= set(header)
    model = open_model_dir(out)
    assert model.config.extra["two_stage"]["arch"] == ARCH and model.config.input_width == 128
    assert model.labels == json.loads((tmp_path / "data" / "dataset.json").read_text())["classes"]
    report = json.loads((out / "eval" / "eval.json").read_text())
    assert report["map50"] == pytest.approx(max(measured), abs=0.01)


def test_interrupted_run_resumes_to_the_same_weights(work: Path, trained: Path, monkeypatch) -> None:
    assert_resume_is_exact(monkeypatch, trained, work / "interrupted", TrainSettings.of(data=work / "data", **SETTINGS))


def test_roi_samples_are_the_runs_option_not_the_models(work: Path, trained: Path) -> None:
    dataset = load_dataset(work / "data")
    sampler = make_task(dataset, NetworkSource(model=trained), seed=1).net.roi_heads.fg_bg_sampler
    assert sampler.batch_size_per_image == 512  # torchvision's: the option is the run's, not the model's
    options = TwoStageOptions(roi_samples=32)
    tuned = make_task(dataset, NetworkSource(model=trained), seed=1, two_stage=options).net
    assert tuned.roi_heads.fg_bg_sampler.batch_size_per_image == 32


def test_fine_tuning_copies_the_model_and_matches_its_classes_by_name(work: Path, trained: Path, capsys) -> None:
    dataset = load_dataset(work / "data")
    start = torch.load(trained / f"{ARCH}.pt", weights_only=True)
    same = make_task(dataset, NetworkSource(model=trained), seed=1).net.state_dict()
    assert all(torch.equal(value, same[key]) for key, value in start.items())
    classes = [dataset.classes[2], dataset.classes[0], "widget"]  # two known, in another order, and a new one
    other = make_task(Dataset(dataset.task, classes, [], dataset.root), NetworkSource(model=trained), seed=1)
    tuned = other.net.state_dict()
    head = "roi_heads.box_predictor."
    assert all(torch.equal(value, tuned[key]) for key, value in start.items() if not key.startswith(head))
    for j, i in ((0, 0), (1, 3), (2, 1)):  # output j (0: background) from the model's output i
        assert torch.equal(tuned[head + "cls_score.weight"][j], start[head + "cls_score.weight"][i])
        assert torch.equal(
            tuned[head + "bbox_pred.weight"][4 * j : 4 * j + 4], start[head + "bbox_pred.weight"][4 * i : 4 * i + 4]
        )
    new = tuned[head + "cls_score.weight"][3]
    assert not any(torch.equal(new, row) for row in start[head + "cls_score.weight"])  # fresh weights
    assert "2 of 3 classes keep the model's head weights (matched by name); new, from fresh weights: widget" in (
        capsys.readouterr().out
    )


def test_two_stage_settings_are_recorded_for_resume(tmp_path: Path) -> None:
    saved = TrainSettings(
        arch=ARCH, anchor_sizes=(16, 32, 64), proposals=100, roi_samples=64, weights=tmp_path / "w.pt"
    )
    again = TrainSettings.from_json(saved.to_json())
    assert again == saved
    assert resumed_settings(again, TrainSettings.of(anchor_sizes=[16, 32, 64]), tmp_path) == saved
    with pytest.raises(ForkliftError, match=r"--anchor-sizes 8,16,32: .* --anchor-sizes 16,32,64"):
        resumed_settings(again, TrainSettings.of(anchor_sizes=[8, 16, 32]), tmp_path)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--cfg", str(CFGS / "v3-spp-groups.cfg"), "--weights", "w.pt"],
            "--weights w.pt: for torchvision architectures",
        ),
        (["--cfg", str(CFGS / "v3-spp-groups.cfg"), "--anchor-sizes", "16,32"], "--anchor-sizes: only for two-stage"),
        (["--cfg", str(CFGS / "v3-spp-groups.cfg"), "--proposals", "50"], "--proposals: only for two-stage"),
        (["--cfg", str(CFGS / "v3-spp-groups.cfg"), "--roi-samples", "64"], "--roi-samples: only for two-stage"),
        (["--arch", "fcos_resnet50_fpn", "--roi-samples", "64"], "--roi-samples: only Faster R-CNN samples"),
        (["--arch", "unet"], f"--arch unet: not a detector architecture; known: {ARCH.replace('_320', '')}"),
    ],
)
def test_two_stage_options_are_refused_for_yolo_in_one_line(work: Path, flags: list[str], message: str, capsys) -> None:
    code = main(["train", "--data", str(work / "data"), *flags, str(work / "refused")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (work / "refused").exists()


def test_synth_draws_the_asked_sizes_and_counts(tmp_path: Path) -> None:
    """Longer box sides within the range (a pixel of rasterising either way; shapes partly hidden by later ones or
    cut by the edge are smaller), and never more shapes than asked."""
    dataset = synth_shapes(tmp_path / "small", 12, 160, seed=1, objects=(6, 10), object_size=(10, 16))
    sides = [max(b.x2 - b.x1, b.y2 - b.y1) for r in dataset.images for b in r.boxes]
    counts = [len(r.boxes) for r in dataset.images]
    assert max(sides) <= 17 and sum(s >= 10 - 1 for s in sides) >= 0.8 * len(sides)
    assert max(counts) <= 10 and sum(counts) >= 0.7 * 6 * len(counts)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--object-size", "3:10"], "--object-size 3:10: shapes under 6 pixels are too small to draw"),
        (["--object-size", "20:100"], "--object-size 20:100: larger than the 96-pixel image"),
        (["--object-size", "20:10"], "--object-size 20:10: MIN is larger than MAX"),
        (["--objects", "4:2"], "--objects 4:2: MIN is larger than MAX"),
        (["--objects", "0:2"], "--objects 0:2: each image needs at least 1 shape"),
        (["--task", "classify", "--objects", "2:3"], "only for detect and segment data sets"),
    ],
)
def test_synth_bad_ranges_are_one_line_errors(tmp_path: Path, flags: list[str], message: str, capsys) -> None:
    code = main(["data", "synth", "shapes", "--n", "2", "--size", "96", *flags, str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


# synth_shapes(out, 8, 96, seed=5, task=...) before --object-size and --objects existed
BEFORE = {
    "detect": "21ccb8c22fddb7af14cf5d2c5bec206f5413ad5b481872e4ec83539e5e51726f",
    "segment": "a8f2bb39b1842fff16daf0ce1273ba417fab68de227a3873762f1885a15bb9c1",
    "classify": "7e3655bf9b90a0d0d56f71740d846897c1c72e79a488df2f49a50e5637016464",
}


@pytest.mark.parametrize("task", list(BEFORE))
def test_synth_defaults_give_the_same_files_as_before(tmp_path: Path, task: str) -> None:
    synth_shapes(tmp_path / task, 8, 96, seed=5, task=task)
    assert _digest(tmp_path / task) == BEFORE[task]
