"""forklift data check, stats and split: every planted problem found once, numbers recounted, splits reproducible."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from helpers import forklift

from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import Dataset, ImageRecord, load_dataset, save_dataset
from forklift.data.split import assign_splits, split_dataset
from forklift.data.stats import dataset_stats
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.vocabulary import Task


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tools") / "shapes"
    synth_shapes(out, n=20, size=96, seed=2)
    return out


@pytest.fixture
def data(pristine: Path, tmp_path: Path) -> Path:
    """A fresh copy of the clean data set for a test to change."""
    return Path(shutil.copytree(pristine, tmp_path / "shapes"))


forklift_data = partial(forklift, "data", check=False)


def index(data: Path) -> dict[str, Any]:
    return json.loads((data / "dataset.json").read_text())


def break_it(data: Path) -> set[tuple[str, str]]:
    """Plant one problem of each kind; returns the (problem, file) each should be reported as."""
    document = index(data)
    entries = document["images"]
    file = [entry["file"] for entry in entries]
    path = data / file[0]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    (data / file[1]).unlink()
    entries[2]["boxes"].append({"label": "circle", "x1": 80.0, "y1": 10.0, "x2": 110.0, "y2": 30.0})
    entries[3]["boxes"].append({"label": "circle", "x1": 20.0, "y1": 10.0, "x2": 20.0, "y2": 30.0})
    entries[4]["boxes"][0]["label"] = "hexagon"
    shutil.copy(data / file[5], data / "images" / "copy.png")
    entries.append({**entries[5], "file": "images/copy.png"})
    entries[6]["width"] = 100
    entries.append(dict(entries[7]))
    entries.append("not an entry")
    (data / "dataset.json").write_text(json.dumps(document))
    return {
        ("unreadable image", file[0]),
        ("missing file", file[1]),
        ("box outside image", file[2]),
        ("empty box", file[3]),
        ("unknown label", file[4]),
        ("duplicate image", "images/copy.png"),
        ("size mismatch", file[6]),
        ("duplicate entry", file[7]),
        ("bad entry", ""),
    }


def test_a_clean_data_set_checks_clean(data: Path) -> None:
    report = check_dataset(data)
    assert report.findings == [] and report.skipped == 0
    assert usable_images(report) == load_dataset(data).images
    checked = forklift_data("check", data)
    assert checked.returncode == 0, checked.stderr
    assert "clean: 20 images" in checked.stdout


def test_one_problem_is_said_as_one(data: Path) -> None:
    (data / "images" / "000003.png").unlink()
    assert check_dataset(data).summary().startswith("1 problem (missing file 1); training would skip 1 of 20 images")


def test_every_planted_problem_is_reported_once_and_skipped(data: Path) -> None:
    expected = break_it(data)
    report = check_dataset(data)
    found = [(finding.problem, finding.file) for finding in report.findings]
    assert sorted(found) == sorted(expected)
    usable = [image.file for image in usable_images(report)]
    assert usable == [f"images/{k:06d}.png" for k in (6, *range(8, 21))]  # the copy's original stays
    assert (report.entries, report.skipped) == (23, 9)
    with pytest.raises(ForkliftError):
        load_dataset(data)  # still strict by default

    checked = forklift_data("check", data)
    assert checked.returncode == 1, checked.stderr
    assert "training would skip 9 of 23 images" in checked.stdout
    assert "images/copy.png" in checked.stdout and "same bytes as images/000006.png" in checked.stdout
    as_json = forklift_data("check", data, "--json")
    assert as_json.returncode == 1
    answer = json.loads(as_json.stdout)
    assert answer["status"] == "problems" and answer["usable"] == 14 and answer["skipped"] == 9
    assert sorted((f["problem"], f["file"]) for f in answer["findings"]) == sorted(expected)
    assert answer["counts"] == dict.fromkeys(sorted(problem for problem, _ in expected), 1)


def test_a_boxs_polygon_is_kept_and_checked(data: Path) -> None:
    """An outline (the app's polygons) is written beside its box and read back; one that leaves its box, or has too
    few points, is a bad entry: its box is left out, as for any bad box."""
    document = index(data)
    entries = document["images"]
    x1, y1, x2, y2 = (entries[0]["boxes"][0][key] for key in ("x1", "y1", "x2", "y2"))
    outline = [[x1, y1], [x2, (y1 + y2) / 2], [(x1 + x2) / 2, y2]]
    entries[0]["boxes"][0]["polygon"] = outline
    entries[1]["boxes"][0]["polygon"] = [[-5.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    entries[2]["boxes"][0]["polygon"] = [[x1, y1], [x2, y2]]
    (data / "dataset.json").write_text(json.dumps(document))
    report = check_dataset(data)
    assert [(f.problem, f.file) for f in report.findings] == [("bad entry", entries[k]["file"]) for k in (1, 2)]
    assert "polygon point [-5.0, 0.0] is outside its box" in report.findings[0].detail
    loaded = report.dataset.images[0].boxes[0]
    assert loaded.polygon == tuple(tuple(point) for point in outline)
    save_dataset(report.dataset, data)
    assert index(data)["images"][0]["boxes"][0]["polygon"] == outline  # written back as read


def test_check_refuses_what_is_not_a_data_set(tmp_path: Path) -> None:
    missing = forklift_data("check", tmp_path / "nowhere")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such file" in missing.stderr
    (tmp_path / "dataset.json").write_text("{")
    garbled = forklift_data("check", tmp_path, "--json")
    assert garbled.returncode == 2 and "not valid JSON: Expecting property name" in garbled.stderr
    assert "line 1 column 2" in garbled.stderr
    (tmp_path / "notes.txt").write_text("root:x:0:0:root:/root:/bin/bash\n")  # any file that is not dataset.json
    other = forklift_data("stats", tmp_path / "notes.txt")
    assert other.returncode == 2 and other.stderr.strip().endswith(
        "notes.txt: not a data set (a folder holding dataset.json, or that file itself)"), other.stderr  # fmt: skip


def test_stats_match_a_recount_of_dataset_json(data: Path) -> None:
    entries = index(data)["images"]
    stats = dataset_stats(load_dataset(data))
    assert stats["images"] == {**Counter(e["split"] for e in entries), "all": 20}
    for split in ("train", "val", "test", "all"):
        boxes = Counter(b["label"] for e in entries if split in ("all", e["split"]) for b in e["boxes"])
        assert stats["objects_per_class"][split] == {name: boxes[name] for name in index(data)["classes"]}
    per_image = [len(e["boxes"]) for e in entries]
    assert stats["boxes_per_image"] == {"min": min(per_image), "mean": sum(per_image) / 20, "max": max(per_image)}
    widths = [(b["x2"] - b["x1"]) / e["width"] for e in entries for b in e["boxes"]]
    assert stats["box_size"]["width"]["p50"] == pytest.approx(float(np.median(widths)), abs=1e-4)
    assert stats["image_sizes"] == {"96x96": 20}
    shown = forklift_data("stats", data, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout) == stats
    assert "boxes per image" in forklift_data("stats", data).stdout


def dominant(entry: dict[str, Any], classes: list[str]) -> str:
    labels = Counter(box["label"] for box in entry["boxes"])
    return max(classes, key=lambda name: labels[name])


def test_split_is_reproducible_keeps_every_image_and_hits_the_fractions(data: Path, tmp_path: Path) -> None:
    before = index(data)
    other = Path(shutil.copytree(data, tmp_path / "other"))
    splits = {}
    for folder, seed in ((data, 0), (other, 0)):
        split_dataset(folder, val=0.25, test=0.1, seed=seed)
        splits[folder] = [entry["split"] for entry in index(folder)["images"]]
    assert splits[data] == splits[other]
    split_dataset(other, val=0.25, test=0.1, seed=1)
    assert [entry["split"] for entry in index(other)["images"]] != splits[data]
    after = index(data)
    strip = [{k: v for k, v in entry.items() if k != "split"} for entry in before["images"]]
    assert [{k: v for k, v in entry.items() if k != "split"} for entry in after["images"]] == strip
    counts = Counter(splits[data])
    assert abs(counts["val"] - 20 * 0.25) <= 1 and abs(counts["test"] - 20 * 0.1) <= 1
    assert not list(data.glob("*.partial"))


def test_stratified_split_keeps_every_class_in_val(data: Path) -> None:
    classes = index(data)["classes"]
    dominants = {dominant(entry, classes) for entry in index(data)["images"]}
    for seed in range(5):
        split_dataset(data, val=0.25, test=0.1, seed=seed, stratify=True)
        entries = index(data)["images"]
        assert {dominant(entry, classes) for entry in entries if entry["split"] == "val"} == dominants
        assert Counter(entry["split"] for entry in entries)["val"] == 5


def test_split_cli_prints_the_new_counts_and_refuses_bad_fractions(data: Path) -> None:
    made = forklift_data("split", data, "--val", "0.1", "--test", "0.1", "--seed", "3", "--stratify")
    assert made.returncode == 0, made.stderr
    assert "20 images (16 train, 2 val, 2 test)" in made.stdout
    refused = forklift_data("split", data, "--val", "0.6", "--test", "0.5")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "example:\n  forklift data split" in forklift_data("split", "--help").stdout
    assert "example:\n  forklift data check" in forklift_data("check", "--help").stdout


def test_a_set_with_no_classes_yet_splits_stratified_too(tmp_path: Path) -> None:
    """A segment set nobody has labelled (no classes, masks of background) has nothing to stratify by: one group."""
    images = []
    for k in range(4):
        cv2.imwrite(str(tmp_path / f"{k}.png"), np.zeros((8, 8, 3), np.uint8))
        cv2.imwrite(str(tmp_path / f"{k}-mask.png"), np.zeros((8, 8), np.uint8))
        images.append(ImageRecord(f"{k}.png", 8, 8, "train", mask=f"{k}-mask.png"))
    assign_splits(Dataset(Task.SEGMENT, [], images, tmp_path), val=0.5, test=0.0, stratify=True)
    assert sorted(image.split for image in images) == ["train", "train", "val", "val"]
