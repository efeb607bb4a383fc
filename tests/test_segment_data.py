"""Segmentation data sets: generated masks, check/stats/split, and COCO and PNG-mask import/export round trips
checked with pycocotools as the independent reader."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from helpers import forklift
from PIL import Image
from pycocotools import mask as coco_mask
from pycocotools.coco import COCO

from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import Dataset, load_dataset
from forklift.data.interchange import export_dataset, import_dataset
from forklift.data.masks import (
    MASK_SIZE,
    MASK_VALUES,
    MISSING_MASK,
    UNREADABLE_MASK,
    load_mask,
    write_mask,
)
from forklift.data.split import split_dataset
from forklift.data.stats import dataset_stats
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return synth_shapes(tmp_path_factory.mktemp("segment") / "shapes", n=16, size=96, seed=4, task="segment")


@pytest.fixture
def data(pristine: Dataset, tmp_path: Path) -> Path:
    """A fresh copy of the clean data set for a test to change."""
    return Path(shutil.copytree(pristine.root, tmp_path / "shapes"))


def masks(dataset: Dataset) -> dict[str, np.ndarray]:
    return {Path(image.file).name: load_mask(dataset, image) for image in dataset.images}


forklift_data = partial(forklift, "data", check=False)


# ---- generated data ----------------------------------------------------------------------------------------------


def test_synth_masks_are_deterministic_and_match_the_detect_boxes(pristine: Dataset, tmp_path: Path) -> None:
    again = synth_shapes(tmp_path / "again", n=16, size=96, seed=4, task="segment")
    detect = synth_shapes(tmp_path / "detect", n=16, size=96, seed=4, task="detect")
    for a, b, d in zip(pristine.images, again.images, detect.images, strict=True):
        assert a.mask is not None and (pristine.root / a.mask).read_bytes() == (again.root / b.mask).read_bytes()
        assert (pristine.path(a)).read_bytes() == detect.path(d).read_bytes()  # the same scene as detect draws
        labels = load_mask(pristine, a)
        assert labels.shape == (96, 96) and set(np.unique(labels)) <= set(range(len(pristine.classes) + 1))
        for k, name in enumerate(pristine.classes, start=1):
            boxes = [box for box in d.boxes if box.label == name]
            ys, xs = np.nonzero(labels == k)
            assert bool(boxes) == bool(len(xs)), (a.file, name)
            if boxes:  # each box is tight around its shape's visible pixels, so the class's pixels span the boxes
                span = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
                union = (min(b.x1 for b in boxes), min(b.y1 for b in boxes))
                union += (max(b.x2 for b in boxes), max(b.y2 for b in boxes))
                assert span == union, (a.file, name)
    with Image.open(pristine.root / pristine.images[0].mask) as png:
        assert png.mode == "L"


def test_cli_synth_segment(tmp_path: Path) -> None:
    result = forklift_data("synth", "shapes", "--task", "segment", "--n", "3", "--size", "64", tmp_path / "s")
    assert result.returncode == 0, result.stderr
    assert "masks of circle" in result.stdout
    assert json.loads((tmp_path / "s" / "dataset.json").read_text())["images"][0]["mask"] == "masks/000001.png"


# ---- check, stats, split -----------------------------------------------------------------------------------------


def test_check_finds_every_mask_problem_once(data: Path) -> None:
    assert not check_dataset(data).findings
    document = json.loads((data / "dataset.json").read_text())
    entries = document["images"]
    (data / entries[0]["mask"]).unlink()
    (data / entries[1]["mask"]).write_bytes(b"not a png")
    write_mask(data / entries[2]["mask"], np.zeros((50, 96), np.uint8))
    write_mask(data / entries[3]["mask"], np.full((96, 96), 9, np.uint8))
    Image.new("RGB", (96, 96)).save(data / entries[4]["mask"])
    entries[5]["mask"] = "../outside.png"
    (data / "dataset.json").write_text(json.dumps(document))
    report = check_dataset(data)
    found = sorted((f.problem, f.file) for f in report.findings)
    files = [entry["file"] for entry in entries]
    assert found == sorted(
        [
            (MISSING_MASK, files[0]),
            (UNREADABLE_MASK, files[1]),
            (MASK_SIZE, files[2]),
            (MASK_VALUES, files[3]),
            (UNREADABLE_MASK, files[4]),
            ("bad entry", files[5]),
        ]
    )
    assert len(usable_images(report)) == len(entries) - 6 and report.skipped == 6
    values = next(f for f in report.findings if f.problem == MASK_VALUES)
    assert "values 9 are neither a class (1-5) nor 255" in values.detail
    result = forklift_data("check", data, "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["skipped"] == 6


def test_ignore_value_is_allowed(data: Path) -> None:
    dataset = load_dataset(data)
    labels = load_mask(dataset, dataset.images[0])
    labels[:4] = 255
    write_mask(data / dataset.images[0].mask, labels)
    assert not check_dataset(data).findings
    stats = dataset_stats(load_dataset(data))
    assert stats["pixel_share"]["ignore"] == pytest.approx(4 * 96 / (16 * 96 * 96), abs=1e-6)


def test_stats_recount_pixels_and_images_per_class(pristine: Dataset) -> None:
    stats = dataset_stats(pristine)
    counts = np.zeros(256, np.int64)
    showing = dict.fromkeys(pristine.classes, 0)
    for labels in masks(pristine).values():
        counts += np.bincount(labels.ravel(), minlength=256)
        for k, name in enumerate(pristine.classes, start=1):
            showing[name] += bool((labels == k).any())
    assert stats["objects_per_class"]["all"] == showing
    total = counts.sum()
    assert stats["pixel_share"]["background"] == pytest.approx(counts[0] / total, abs=1e-6)
    for k, name in enumerate(pristine.classes, start=1):
        assert stats["pixel_share"][name] == pytest.approx(counts[k] / total, abs=1e-6)
    assert sum(stats["pixel_share"].values()) == pytest.approx(1.0, abs=1e-5)


def test_split_keeps_the_masks(data: Path, pristine: Dataset) -> None:
    split = split_dataset(data, val=0.25, test=0.25, seed=1, stratify=True)
    assert {image.split for image in split.images} == {"train", "val", "test"}
    reloaded = load_dataset(data)
    assert [i.mask for i in reloaded.images] == [i.mask for i in pristine.images]
    assert {k: v.tobytes() for k, v in masks(reloaded).items()} == {k: v.tobytes() for k, v in masks(pristine).items()}
    assert not check_dataset(data).findings


# ---- import and export -------------------------------------------------------------------------------------------


def test_coco_rle_round_trip_is_exact_and_pycocotools_reads_it(pristine: Dataset, tmp_path: Path) -> None:
    summary = export_dataset("coco", pristine.root, tmp_path / "coco")
    truth = masks(pristine)
    assert summary.images == 16 and summary.boxes == sum(len(np.unique(m[m > 0])) for m in truth.values())
    coco = COCO(str(tmp_path / "coco" / "annotations.json"))
    for image_id, entry in coco.imgs.items():
        expected = truth[Path(entry["file_name"]).name]
        for annotation in coco.loadAnns(coco.getAnnIds(imgIds=image_id)):
            inside = coco.annToMask(annotation).astype(bool)
            assert (inside == (expected == annotation["category_id"])).all()
            assert annotation["area"] == int(inside.sum())
            rle = coco_mask.encode(np.asfortranarray(inside.astype(np.uint8)))
            assert annotation["bbox"] == coco_mask.toBbox(rle).tolist()
    back = import_dataset("coco", tmp_path / "coco" / "annotations.json", tmp_path / "back", task="segment")
    assert back.line().startswith("imported 16 images, 5 classes")
    imported = load_dataset(tmp_path / "back")
    assert imported.task == "segment" and imported.classes == pristine.classes
    assert [i.split for i in imported.images] == [i.split for i in pristine.images]
    assert {k: v.tobytes() for k, v in masks(imported).items()} == {k: v.tobytes() for k, v in truth.items()}


def test_coco_polygons_rle_and_crowd_paint_in_order(tmp_path: Path) -> None:
    Image.new("RGB", (40, 30)).save(tmp_path / "a.png")
    square = coco_mask.encode(np.asfortranarray(np.pad(np.ones((10, 10), np.uint8), ((5, 15), (20, 10)))))
    uncompressed = {"size": [30, 40], "counts": [152, 126, 922]}  # column-major runs of 0s, 1s, 0s
    document = {
        "images": [{"id": 7, "file_name": "a.png", "width": 40, "height": 30}],
        "categories": [{"id": 3, "name": "cat"}, {"id": 1, "name": "dog"}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 3, "segmentation": [[0, 0, 20, 0, 20, 20, 0, 20]], "bbox": []},
            {"id": 2, "image_id": 7, "category_id": 1, "segmentation": [[10, 10, 30, 10, 30, 25, 10, 25]]},
            {"id": 3, "image_id": 7, "category_id": 3, "iscrowd": 1, "segmentation": uncompressed},
            {"id": 4, "image_id": 7, "category_id": 1,
             "segmentation": {"size": [30, 40], "counts": square["counts"].decode()}},
        ],
    }  # fmt: skip
    (tmp_path / "a.json").write_text(json.dumps(document))
    summary = import_dataset("coco", tmp_path / "a.json", tmp_path / "out", task="segment")
    assert summary.crowd == 1
    dataset = load_dataset(tmp_path / "out")
    assert dataset.classes == ["dog", "cat"]  # category id order
    expected = np.zeros((30, 40), np.uint8)
    reference = COCO()
    reference.dataset = document
    reference.createIndex()
    for annotation, value in zip(document["annotations"], (2, 1, 255, 1), strict=True):
        expected[reference.annToMask(annotation).astype(bool)] = value
    assert (load_mask(dataset, dataset.images[0]) == expected).all()
    assert (expected == 255).any() and (expected == 2).any() and (expected == 1).any()


def test_coco_bad_segmentation_is_one_line(tmp_path: Path) -> None:
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    document = {
        "images": [{"id": 1, "file_name": "a.png", "width": 8, "height": 8}],
        "categories": [{"id": 1, "name": "x"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "segmentation": {"size": [4, 4], "counts": "0"}}],
    }
    (tmp_path / "a.json").write_text(json.dumps(document))
    with pytest.raises(ForkliftError, match=r"annotations\[0\]: RLE needs size \[8, 8\]"):
        import_dataset("coco", tmp_path / "a.json", tmp_path / "out", task="segment")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ForkliftError, match="voc imports detect"):
        import_dataset("voc", tmp_path, tmp_path / "out", task="segment")


def test_png_masks_round_trip_and_palette_masks(pristine: Dataset, tmp_path: Path) -> None:
    summary = export_dataset("masks", pristine.root, tmp_path / "png")
    assert summary.line().startswith("exported 16 images, 16 masks, 5 classes")
    assert (tmp_path / "png" / "classes.txt").read_text().split() == pristine.classes
    first = tmp_path / "png" / "masks" / "000001.png"
    with Image.open(first) as gray:  # Pascal VOC stores masks as palette PNGs: the indices are the values
        palette = gray.convert("P")
    palette.save(first)
    import_dataset("masks", tmp_path / "png", tmp_path / "back")
    back = load_dataset(tmp_path / "back")
    assert back.task == "segment" and back.classes == pristine.classes
    assert {k: v.tobytes() for k, v in masks(back).items()} == {k: v.tobytes() for k, v in masks(pristine).items()}
    (tmp_path / "png" / "masks" / "000002.png").unlink()
    # an image without its mask is skipped and reported, the rest imported (the import policy of every format)
    summary = import_dataset("masks", tmp_path / "png", tmp_path / "again")
    assert summary.skipped == 1 and summary.lines()[1:] == ["skipped 1 image without a mask (000002.png)"]
    with pytest.raises(ForkliftError, match="a detect data set has no masks"):
        export_dataset("masks", synth_shapes(tmp_path / "d", n=1, size=64).root, tmp_path / "none")


def test_cli_import_export_segment(pristine: Dataset, tmp_path: Path) -> None:
    exported = forklift_data("export", "--to", "coco", pristine.root, tmp_path / "coco")
    assert exported.returncode == 0 and "16 images" in exported.stdout, exported.stderr
    imported = forklift_data(
        "import", "--from", "coco", "--task", "segment", tmp_path / "coco/annotations.json", tmp_path / "b"
    )
    assert imported.returncode == 0 and "crowd regions marked ignore" in imported.stdout, imported.stderr
    refused = forklift_data("export", "--to", "yolo", pristine.root, tmp_path / "y")
    assert refused.returncode == 2 and "a segment data set has no boxes" in refused.stderr
