"""Training: the YOLOv3 loss, the loop (the loss falls, an interrupted run resumes exactly) and its model directory.

Everything runs on a tiny two-head yolov3-tiny-like cfg at 96x96 and a few dozen synthetic shapes, in seconds.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np
import onnxruntime
import pytest
import torch
from helpers import CFGS, assert_resume_is_exact

from forklift.cli import main
from forklift.data.dataset import load_dataset
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.model_files.cfg_edit import set_classes
from forklift.model_files.darknet_cfg import parse_cfg
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.darknet import DarknetNet, load_weights
from forklift.nets.fresh_weights import initialise
from forklift.train.loader import Augmentation, DetectionImages, collate
from forklift.train.loss import build_targets, yolo_heads, yolo_loss
from forklift.train.run_dir import check_out
from forklift.train.settings import RunOptions, TrainSettings
from forklift.train.trainer import train

TINY_CFG = (CFGS / "tiny-detector.cfg").read_text(encoding="utf-8")
SETTINGS = {"epochs": 3, "batch": 4, "lr": 0.01, "seed": 0}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("train")
    (root / "tiny.cfg").write_text(TINY_CFG, encoding="utf-8")
    synth_shapes(root / "data", 32, 96, seed=0)
    return root


# Threads of the uninterrupted run and of the runs compared with it (the backward pass's reductions, and so the
# weights' last bits, depend on the thread count; a run in a subprocess would otherwise take every core).
THREADS = 2


def _settings(work: Path) -> TrainSettings:
    """The module's run: the tiny cfg on the module's data with SETTINGS."""
    return TrainSettings.of(data=work / "data", cfg=work / "tiny.cfg", **SETTINGS)


@pytest.fixture(scope="module")
def trained(work: Path) -> Path:
    """An uninterrupted 3-epoch run."""
    torch.set_num_threads(THREADS)
    return train(_settings(work), work / "run")


def _metrics(out: Path) -> list[dict[str, str]]:
    with (out / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_a_cfg_that_is_not_text_is_said_by_its_line(work: Path, tmp_path: Path) -> None:
    """A photo given as --cfg: the cfg reader's one line (a UnicodeDecodeError's traceback, from training only)."""
    photo = tmp_path / "dog.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01")
    settings = TrainSettings.of(data=work / "data", cfg=photo, **SETTINGS)
    with pytest.raises(ForkliftError, match=r"dog.jpg:1: expected 'key=value' or '\[section\]'"):
        train(settings, tmp_path / "out")


def test_set_classes_rewrites_heads_and_size() -> None:
    text = set_classes(TINY_CFG, "tiny.cfg", 5, size=128)
    net = DarknetNet(parse_cfg(text))
    assert net.classes == 5
    assert (net.input_width, net.input_height) == (128, 128)
    assert [net.layers[i - 1].conv.out_channels for i in net.head_indices] == [30, 30]


def _batch(work: Path, net: DarknetNet) -> tuple[torch.Tensor, torch.Tensor]:
    dataset = load_dataset(work / "data")
    images = DetectionImages(dataset, dataset.images[:4], (net.input_width, net.input_height), augment=True)
    return collate([images[i] for i in range(4)])


def test_perfect_prediction_beats_random_logits(work: Path) -> None:
    net = initialise(DarknetNet(parse_cfg(set_classes(TINY_CFG, "tiny.cfg", 5))), seed=0)
    images, targets = _batch(work, net)
    raw = net.heads(images)
    heads = yolo_heads(net)
    shapes = [tuple(r.shape[2:]) for r in raw]
    perfect = []
    for head, r, t in zip(heads, raw, build_targets(heads, targets, shapes, (96, 96)), strict=True):
        p = torch.full((r.shape[0], head.num_anchors, 5 + head.classes, *r.shape[2:]), -12.0)
        s = head.scale_x_y
        chosen = p[t.image, t.anchor, :, t.row, t.col]
        chosen[:, 0:2] = torch.logit(((t.offset + (s - 1) / 2) / s).clamp(1e-6, 1 - 1e-6))
        chosen[:, 2:4] = t.log_size
        chosen[:, 4] = 12.0
        chosen[:, 5:] = torch.where(torch.nn.functional.one_hot(t.cls, head.classes).bool(), 12.0, -12.0)
        p[t.image, t.anchor, :, t.row, t.col] = chosen
        perfect.append(p.reshape(r.shape))
    good = yolo_loss(net, perfect, targets)
    bad = yolo_loss(net, [torch.randn_like(r) for r in raw], targets)
    assert len(targets) > 0
    assert float(good.box) < 1e-3 and float(good.total) < 0.05
    assert float(bad.total) > 100 * float(good.total)


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_loss_falls(trained: Path) -> None:
    rows = _metrics(trained)
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
    assert last < 0.6 * first, (first, last)
    assert all(row["map50"] != "" for row in rows)  # val measured each epoch
    assert json.loads((trained / "eval" / "eval.json").read_text())["task"] == "detect"


def test_model_directory_holds_the_best_validated_epoch(trained: Path) -> None:
    scores = [float(row["map50"]) for row in _metrics(trained)]
    best = torch.load(trained / "checkpoints" / "best.pt", weights_only=True)
    assert best["epoch"] == 1 + scores.index(max(scores))
    written = DarknetNet(parse_cfg((trained / "tiny.cfg").read_text()))
    load_weights(written, trained / "tiny.weights")
    for key, value in written.state_dict().items():
        if not key.endswith("num_batches_tracked"):
            assert torch.equal(value, best["model"][key]), key


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_interrupted_run_resumes_to_the_same_weights(work: Path, trained: Path, monkeypatch) -> None:
    out = work / "interrupted"
    assert_resume_is_exact(monkeypatch, trained, out, _settings(work))
    assert (out / "tiny.weights").read_bytes() == (trained / "tiny.weights").read_bytes()


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_stop_between_the_checkpoint_and_its_metrics_row_loses_and_repeats_no_row(
    work: Path, trained: Path, monkeypatch
) -> None:
    """The checkpoint is written before the epoch's metrics.csv row: a stop between the two resumes with the row
    restored from the checkpoint, so the file (which the app's live charts follow) has each epoch once."""
    from forklift.train import trainer

    real_append = trainer.append_metrics

    def stop_at_epoch_2(path, fields, row):
        if row["epoch"] == 2:
            raise KeyboardInterrupt
        real_append(path, fields, row)

    out = work / "stopped-between"
    monkeypatch.setattr(trainer, "append_metrics", stop_at_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train(_settings(work), out)
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=False)["epoch"] == 2
    assert [r["epoch"] for r in _metrics(out)] == ["1"]
    monkeypatch.setattr(trainer, "append_metrics", real_append)
    train(_settings(work), out, RunOptions(resume=True))
    rows, expected = _metrics(out), _metrics(trained)
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    for row, whole in zip(rows, expected, strict=True):
        assert row["loss"] == whole["loss"] and row.get("map50") == whole.get("map50"), (row, whole)


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_resume_keeps_the_checkpoints_settings(work: Path, trained: Path, capsys) -> None:
    """`train --resume OUT` alone continues with the options the run started with; an option that contradicts
    them is refused with one line naming it and both values, and the run is left as it was."""
    out = train(_settings(work), work / "partial", RunOptions(time_budget_s=0.0))
    checkpoint = out / "checkpoints" / "last.pt"
    assert torch.load(checkpoint, weights_only=False)["epoch"] == 1
    capsys.readouterr()
    assert main(["train", "--resume", "--batch", "8", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--batch 8:" in err and "--batch 4" in err and err.count("\n") == 1, err
    assert torch.load(checkpoint, weights_only=False)["epoch"] == 1
    assert main(["train", "--resume", "--lr", "0.01", str(out)]) == 0  # agreeing with the checkpoint is fine
    resumed = torch.load(checkpoint, weights_only=False)
    expected = torch.load(trained / "checkpoints" / "last.pt", weights_only=False)
    assert resumed["epoch"] == 3 and resumed["settings"]["batch"] == 4
    for key, value in expected["model"].items():
        assert torch.equal(resumed["model"][key], value), key


@contextmanager
def _held(out: Path) -> Iterator[int]:
    """OUT's lock held by another process, as a run in progress holds it; its pid."""
    script = (f"import time; from pathlib import Path; from forklift.train.run_dir import holding\n"
              f"with holding(Path({str(out)!r})):\n print('held', flush=True); time.sleep(120)")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_second_run_into_a_run_in_progress_is_refused(work: Path, trained: Path, capsys) -> None:
    """`train --resume OUT` typed while OUT's run still trained started a second trainer on it: both wrote its
    checkpoints and metrics rows. Refused, naming the run's pid; a run that failed before its first epoch, leaving
    only the lock, does not keep OUT from a new run."""
    out = train(_settings(work), work / "in-progress", RunOptions(time_budget_s=0.0))
    checkpoint = (out / "checkpoints" / "last.pt").read_bytes()
    with _held(out) as pid:
        capsys.readouterr()
        assert main(["train", "--resume", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{out}: another run (pid {pid}) is training into it" in err and err.count("\n") == 1, err
        assert (out / "checkpoints" / "last.pt").read_bytes() == checkpoint
    fresh = work / "fresh-in-progress"  # a new run's OUT, held: a second new run into it leaves it be
    with _held(fresh) as pid:
        with pytest.raises(ForkliftError, match=f"another run \\(pid {pid}\\) is training into it"):
            train(_settings(work), fresh)
        assert (fresh / "checkpoints" / "lock").read_text() == str(pid)
    failed = work / "failed-early" / "checkpoints"
    failed.mkdir(parents=True)
    (failed / "lock").write_text("1")
    check_out(failed.parent, resume=False)


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_ctrl_c_says_where_the_run_stopped_and_how_to_go_on(work: Path, monkeypatch, capsys) -> None:
    """Ctrl-C ended `train` with exit 130 and not a word: which epoch OUT holds, and what continues it, are said."""
    from forklift.train import trainer

    real_loader = trainer.epoch_loader

    def stopped_in_epoch_2(images, batch, epoch, **kwargs):  # type: ignore[no-untyped-def]
        if epoch == 2:
            raise KeyboardInterrupt
        return real_loader(images, batch, epoch, **kwargs)

    monkeypatch.setattr(trainer, "epoch_loader", stopped_in_epoch_2)
    out = work / "ctrl-c"
    command = ["train", "--data", str(work / "data"), "--cfg", str(work / "tiny.cfg"), "--epochs", "3", "--img", "96"]
    capsys.readouterr()
    assert main([*command, str(out)]) == 130
    assert f"stopped after epoch 1; 'forklift train --resume {out}' goes on from there" in capsys.readouterr().err


def test_an_evaluation_does_not_write_over_the_model_or_its_training_measure(work: Path, trained: Path, capsys) -> None:
    """`eval --out MODEL/eval` replaced the training's eval.json, whose epoch says which weights the model holds."""
    before = (trained / "eval" / "eval.json").read_bytes()
    for out, said in [(trained / "eval", "the training's own measure of the model"), (trained, "the model directory")]:
        assert main(["eval", str(trained), "--data", str(work / "data"), "--out", str(out)]) == 2
        assert f"--out {out}: {said}" in capsys.readouterr().err
    assert (trained / "eval" / "eval.json").read_bytes() == before


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_time_budget_stops_before_an_epoch_that_would_overrun_it(work: Path, capsys) -> None:
    """The first epoch always runs; one not validated (--val-every 3 of 3 epochs) is measured before the best is
    chosen, since its weights are what the budget left."""
    settings = _settings(work).with_options(val_every=3)
    out = train(settings, work / "budget", RunOptions(time_budget_s=0.0))
    assert [int(r["epoch"]) for r in _metrics(out)] == [1]
    assert (out / "tiny.weights").is_file() and (out / "tiny.onnx").is_file()
    said = capsys.readouterr().out
    assert "epoch 1/3, the last the budget allowed, on val: map50" in said and "best epoch: 1 (map50" in said, said


def test_a_callback_that_stops_the_run_leaves_no_log_writer_behind(work: Path) -> None:
    """A search prunes a trial by raising from `on_validated` and removes its folder: the TensorBoard writer must
    be closed by then, or its thread writes into the removed folder and prints a traceback."""

    class Pruned(Exception):
        pass

    def prune(epoch: int, metrics: dict) -> None:
        raise Pruned(f"epoch {epoch}")

    with pytest.raises(Pruned, match="epoch 1"):
        train(_settings(work), work / "pruned", RunOptions(on_validated=prune))
    assert (work / "pruned" / "tensorboard").is_dir()
    assert not [t for t in threading.enumerate() if type(t).__module__.startswith("tensorboard.")]


def test_fine_tuning_starts_from_the_model(work: Path, trained: Path) -> None:
    out = train(
        TrainSettings.of(data=work / "data", model=trained, epochs=1, batch=4, lr=0.001, seed=1), work / "tuned"
    )
    assert float(_metrics(out)[0]["loss"]) < 0.8 * float(_metrics(trained)[0]["loss"])
    assert open_model_dir(out).labels == open_model_dir(trained).labels


@pytest.mark.slow
def test_model_directory_predicts_everywhere(work: Path, trained: Path) -> None:
    model = open_model_dir(trained)
    assert model.format == "darknet" and model.labels == load_dataset(work / "data").classes
    assert json.loads((trained / "forklift.json").read_text())["resize"] == "letterbox"
    image = work / "data" / "images" / "000001.png"
    result = subprocess.run(
        [sys.executable, "-m", "forklift.cli", "predict", str(trained), str(image), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "OK"
    session = onnxruntime.InferenceSession(str(model.files["onnx"]), providers=["CPUExecutionProvider"])
    rows = session.run(None, {"images": np.zeros((2, 3, 96, 96), np.float32)})[0]
    assert rows.shape == (2, 3 * (6 * 6 + 12 * 12), 10)
    net = cv2.dnn.readNetFromDarknet(str(model.files["cfg"]), str(model.files["weights"]))
    net.setInput(cv2.dnn.blobFromImage(np.zeros((96, 96, 3), np.uint8), 1 / 255.0, (96, 96)))
    assert sum(len(o) for o in net.forward(net.getUnconnectedOutLayersNames())) == 3 * (6 * 6 + 12 * 12)


def test_cli_bad_input_is_one_line(work: Path, capsys) -> None:
    code = main(["train", "--data", str(work / "data"), "--cfg", str(work / "missing.cfg"), str(work / "x")])
    assert code == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_a_data_set_with_no_classes_yet_loads_and_is_not_trained_on(work: Path, tmp_path: Path, capsys) -> None:
    """The app exports a set nobody has labelled with no classes: the layout reads it, training says why not."""
    data = load_dataset(work / "data")
    index = json.loads((work / "data" / "dataset.json").read_text())
    index["classes"] = []
    index["images"] = [{**entry, "boxes": []} for entry in index["images"][:2]]
    (tmp_path / "dataset.json").write_text(json.dumps(index))
    (tmp_path / "images").symlink_to(data.root / "images")
    assert load_dataset(tmp_path).classes == []
    code = main(["train", "--data", str(tmp_path), "--cfg", str(work / "tiny.cfg"), str(tmp_path / "out")])
    said = capsys.readouterr().err
    assert code == 2 and said.strip().endswith("no classes in dataset.json: nothing is labelled yet, so there is "
                                              "nothing to learn"), said  # fmt: skip


def test_mosaic_tiles_four_images_with_their_boxes(work: Path) -> None:
    dataset = load_dataset(work / "data")
    plain = DetectionImages(dataset, dataset.images, (96, 96), augment=True, seed=3)
    tiled = DetectionImages(
        dataset, dataset.images, (96, 96), augment=True, seed=3, augmentation=Augmentation(mosaic=True)
    )
    counts = {"plain": 0, "tiled": 0}
    for index in range(len(dataset.images)):
        image, targets = tiled[index]
        again, same_targets = tiled[index]
        assert torch.equal(image, again) and torch.equal(targets, same_targets)  # drawn by (seed, epoch, image)
        assert image.shape == (3, 96, 96)
        corners = torch.cat([targets[:, 1:3] - targets[:, 3:5] / 2, targets[:, 1:3] + targets[:, 3:5] / 2], dim=1)
        assert bool((corners >= -1e-6).all() and (corners <= 1 + 1e-6).all() and (targets[:, 3:5] > 0).all())
        counts["tiled"] += len(targets)
        counts["plain"] += len(plain[index][1])
    assert counts["tiled"] > 1.3 * counts["plain"], counts


def test_augmentation_strengths_scale_the_variation(work: Path) -> None:
    """Strengths of 0 leave only the random flip; the default strengths move every image."""
    dataset = load_dataset(work / "data")
    records, size = dataset.images[:6], (96, 96)
    plain = DetectionImages(dataset, records, size, augment=False)
    still = DetectionImages(dataset, records, size, augment=True, augmentation=Augmentation(scale=0, shift=0, hsv=0))
    varied = DetectionImages(dataset, records, size, augment=True)
    flipped = 0
    for index in range(len(records)):
        image, targets = plain[index]
        same, same_targets = still[index]
        mirrored = targets.clone()
        mirrored[:, 1] = 1 - mirrored[:, 1]
        if torch.equal(same, image.flip(-1)):
            flipped += 1
            assert torch.allclose(same_targets, mirrored, atol=1e-6)
        else:
            assert torch.equal(same, image) and torch.allclose(same_targets, targets, atol=1e-6)
        moved = varied[index][0]
        assert not torch.equal(moved, image) and not torch.equal(moved, image.flip(-1))
    assert 0 < flipped < len(records)


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_mixed_precision_on_the_cpu_trains(work: Path) -> None:
    amp = TrainSettings.of(data=work / "data", cfg=work / "tiny.cfg", epochs=1, batch=4, lr=0.01, amp=True, mosaic=True)
    out = train(amp, work / "amp")
    assert np.isfinite(float(_metrics(out)[0]["loss"]))
    assert open_model_dir(out).format == "darknet"


@pytest.mark.slow
def test_large_model_support_trains_to_the_same_weights(work: Path, trained: Path) -> None:
    """`--lms` on the CPU spills saved tensors to files; the run (in its own process, since the disk tier tunes
    malloc for the rest of the process) must end with the weights of the same run without it."""
    out, spill = work / "lms", work / "spill"
    spill.mkdir()
    command = [sys.executable, "-m", "forklift.cli", "train", "--data", str(work / "data"), "--cfg"]
    command += [str(work / "tiny.cfg"), "--epochs", "3", "--batch", "4", "--lr", "0.01", "--seed", "0"]
    command += ["--lms", "--lms-min-mib", "0.01", "--lms-spill-dir", str(spill), str(out)]
    threads = {"OMP_NUM_THREADS": str(THREADS)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, **threads})
    assert result.returncode == 0, result.stderr
    swapped = [line for line in result.stdout.splitlines() if "lms[disk]: out" in line]
    assert len(swapped) == 3 and " out 0 " not in swapped[0], result.stdout
    assert (out / "tiny.weights").read_bytes() == (trained / "tiny.weights").read_bytes()
    assert list(spill.iterdir()) == []  # spill files and the run's directory are gone


@pytest.mark.slow
def test_a_short_run_beats_a_map_floor(tiny_detector: tuple[Path, Path]) -> None:
    """15 short epochs on 240 generated images at 96x96 (about 10 s here) reach mAP@.5 0.28 on val; an untrained
    net scores about 0.0001. The floor leaves room for other CPUs' arithmetic."""
    report = json.loads((tiny_detector[0] / "eval" / "eval.json").read_text())
    assert report["map50"] >= 0.15, report["map50"]


def test_fine_tuning_matches_the_heads_classes_by_name(work: Path, trained: Path, capsys) -> None:
    """A data set listing the model's classes in another order (an export lists them as a person made them) starts
    from the model's head rows of each class by name; a class the model lacks starts fresh, and a line says so."""
    from forklift.data.dataset import Dataset
    from forklift.train.tasks import NetworkSource, make_task

    dataset = load_dataset(work / "data")
    before = open_model_dir(trained)
    start = DarknetNet(parse_cfg(before.files["cfg"].read_text(), "start.cfg"))
    load_weights(start, before.files["weights"])
    reordered = [*reversed(before.labels[1:]), "hexagon"]  # the first class left out, one new
    task = make_task(Dataset(dataset.task, reordered, [], dataset.root), NetworkSource(model=trained), seed=5)
    said = capsys.readouterr().out
    assert f"{len(reordered) - 1} of {len(reordered)} classes keep the model's head weights" in said
    assert "new, from fresh weights: hexagon" in said
    old_width, new_width = 5 + len(before.labels), 5 + len(reordered)
    for index in start.head_indices:
        old, new = start.layers[index - 1].conv.weight, task.net.layers[index - 1].conv.weight
        for anchor in range(new.shape[0] // new_width):
            assert torch.equal(
                new[anchor * new_width : anchor * new_width + 5], old[anchor * old_width : anchor * old_width + 5]
            )
            for j, name in enumerate(reordered[:-1]):
                i = before.labels.index(name)
                assert torch.equal(new[anchor * new_width + 5 + j], old[anchor * old_width + 5 + i]), (name, anchor)
            fresh = new[anchor * new_width + 5 + len(reordered) - 1]
            assert not any(torch.equal(fresh, old[anchor * old_width + 5 + i]) for i in range(len(before.labels)))
