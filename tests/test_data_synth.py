"""Synthetic shapes data sets and the dataset.json layout: determinism, boxes that fit the drawn shapes, loading."""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import forklift

from forklift.data.dataset import Dataset, load_dataset, save_dataset
from forklift.data.synth import CLASSES, synth_shapes
from forklift.errors import ForkliftError


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """200 detection images of 320x320, the size the brief's timing is about, made once."""
    return synth_shapes(tmp_path_factory.mktemp("synth") / "shapes", 200, 320, seed=0)


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        synth_shapes(tmp_path / name, 12, 96, seed=seed)
    first, again, other = files(tmp_path / "a"), files(tmp_path / "b"), files(tmp_path / "c")
    assert len(first) == 13 and first == again
    assert first.keys() == other.keys()
    assert all(first[name] != other[name] for name in first)


def contrast(image: np.ndarray, x1: int, y1: int, x2: int, y2: int) -> float:
    """How far the colour of a box's middle is from that of a 4-pixel ring around the box."""
    w, h = x2 - x1, y2 - y1
    middle = image[y1 + h // 4 : y2 - h // 4, x1 + w // 4 : x2 - w // 4].reshape(-1, 3).mean(axis=0)
    ring = np.zeros(image.shape[:2], bool)
    ring[max(0, y1 - 4) : y2 + 4, max(0, x1 - 4) : x2 + 4] = True
    ring[y1:y2, x1:x2] = False
    return float(np.linalg.norm(middle - image[ring].mean(axis=0))) if ring.any() else float("nan")


def edges_touch(image: np.ndarray, x1: int, y1: int, x2: int, y2: int) -> bool:
    """Whether each of the box's four outermost rows and columns holds a pixel of the colour of its middle."""
    w, h = x2 - x1, y2 - y1
    colour = np.median(image[y1 + h // 4 : y2 - h // 4, x1 + w // 4 : x2 - w // 4].reshape(-1, 3), axis=0)
    near = np.linalg.norm(image[y1:y2, x1:x2].astype(float) - colour, axis=2) < 45
    return bool(near[0].any() and near[-1].any() and near[:, 0].any() and near[:, -1].any())


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_boxes_are_inside_sized_and_tight_around_the_shapes(shapes: Dataset) -> None:
    rng = np.random.default_rng(0)
    real, shuffled, touching, grown = [], [], [], []
    for record in shapes.images:
        image = cv2.imread(str(shapes.path(record)))
        assert image.shape == (record.height, record.width, 3)
        assert 1 <= len(record.boxes) <= 4
        for box in record.boxes:
            assert 0 <= box.x1 < box.x2 <= record.width and 0 <= box.y1 < box.y2 <= record.height
            assert box.x2 - box.x1 >= 6 and box.y2 - box.y1 >= 6
            x1, y1, x2, y2 = int(box.x1), int(box.y1), int(box.x2), int(box.y2)
            real.append(contrast(image, x1, y1, x2, y2))
            touching.append(edges_touch(image, x1, y1, x2, y2))
            grown.append(
                edges_touch(
                    image, max(0, x1 - 3), max(0, y1 - 3), min(record.width, x2 + 3), min(record.height, y2 + 3)
                )
            )
            x, y = (
                int(rng.integers(0, record.width - (x2 - x1) + 1)),
                int(rng.integers(0, record.height - (y2 - y1) + 1)),
            )
            shuffled.append(contrast(image, x, y, x + x2 - x1, y + y2 - y1))
    # a box's middle stands out from its surroundings; the same boxes put anywhere else mostly do not
    assert np.nanpercentile(real, 10) > 50 and np.nanmedian(shuffled) < 40
    # tight: the shape reaches all four sides, and a box 3 pixels larger leaves a side it does not reach
    assert np.mean(touching) > 0.95 and np.mean(grown) < 0.05


def test_classes_balanced_and_splits_about_80_10_10(shapes: Dataset) -> None:
    counts = Counter(box.label for record in shapes.images for box in record.boxes)
    assert shapes.classes == CLASSES and len(CLASSES) >= 4 and set(counts) == set(CLASSES)
    mean = sum(counts.values()) / len(CLASSES)
    assert all(0.7 * mean < count < 1.3 * mean for count in counts.values()), counts
    assert Counter(record.split for record in shapes.images) == {"train": 160, "val": 20, "test": 20}


def test_classify_has_one_label_per_image(tmp_path: Path) -> None:
    dataset = synth_shapes(tmp_path / "classify", 30, 96, seed=1, task="classify")
    written = json.loads((tmp_path / "classify" / "dataset.json").read_text())
    assert written["task"] == "classify"
    assert all(set(entry) == {"file", "width", "height", "split", "label"} for entry in written["images"])
    assert all(record.label in CLASSES and not record.boxes for record in dataset.images)
    assert len({record.label for record in dataset.images}) > 1


def test_save_then_load_round_trips(shapes: Dataset, tmp_path: Path) -> None:
    assert load_dataset(shapes.root) == shapes
    copy = Dataset(shapes.task, shapes.classes, shapes.images, tmp_path)
    assert load_dataset(save_dataset(copy, tmp_path)) == copy
    assert not list(tmp_path.glob("*.partial"))


def broken(tmp_path: Path, text: str) -> str:
    """The error load_dataset gives for a dataset.json holding text, checked to be one line naming the file."""
    index = tmp_path / "dataset.json"
    index.write_text(text)
    with pytest.raises(ForkliftError) as caught:
        load_dataset(tmp_path)
    message = str(caught.value)
    assert str(index) in message and "\n" not in message
    return message


def valid() -> dict:
    box = {"label": "circle", "x1": 1.0, "y1": 2.0, "x2": 30.0, "y2": 40.0}
    image = {"file": "images/000001.png", "width": 64, "height": 64, "split": "train", "boxes": [box]}
    return {"format": "forklift-dataset", "version": 1, "task": "detect", "classes": ["circle"], "images": [image]}


def test_load_errors_name_the_file_and_entry(tmp_path: Path) -> None:
    assert load_dataset(save_dataset(Dataset("detect", ["circle"], [], tmp_path), tmp_path)).images == []
    assert "not valid JSON" in broken(tmp_path, '{"format": "forklift-dataset",')
    wrong_format = {**valid(), "format": "coco"}
    assert "format is 'coco'" in broken(tmp_path, json.dumps(wrong_format))
    unknown = valid()
    unknown["images"][0]["boxes"][0]["label"] = "hexagon"
    message = broken(tmp_path, json.dumps(unknown))
    assert "images[0] (images/000001.png) boxes[0]" in message and "'hexagon'" in message
    outside = valid()
    outside["images"][0]["boxes"][0]["x2"] = 65
    assert "not a box inside the 64x64 image" in broken(tmp_path, json.dumps(outside))


forklift_synth = partial(forklift, "data", "synth", "shapes", check=False)


def test_cli_writes_the_data_set_and_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    out = tmp_path / "shapes"
    made = forklift_synth("--n", "10", "--size", "64", "--seed", "2", out)
    assert made.returncode == 0, made.stderr
    assert "10 images (8 train, 1 val, 1 test)" in made.stdout and "boxes: circle" in made.stdout
    assert len(load_dataset(out).images) == 10
    refused = forklift_synth("--n", "10", "--size", "64", out)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "not an empty folder" in refused.stderr
    assert "example:\n  forklift data synth shapes" in forklift_synth("--help").stdout
