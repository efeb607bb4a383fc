"""Evaluation: exact answers on hand-made boxes, checked against pycocotools called on its own, and `forklift eval`."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from helpers import CFGS, forklift_here
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from forklift.data.dataset import Box, ImageRecord
from forklift.data.synth import CLASSES, synth_shapes
from forklift.evaluation.classification import classification_metrics
from forklift.evaluation.detection import detection_metrics
from forklift.nets.fresh_weights import new_darknet_dir
from forklift.vision.results import ClassScore, Detection

NAMES = ["circle", "square"]
TRUTH = [
    ImageRecord("a.png", 100, 100, "val", [Box("circle", 10, 10, 40, 40), Box("square", 50, 50, 90, 90)]),
    ImageRecord("b.png", 100, 100, "val", [Box("circle", 20, 20, 60, 60)]),
]


def found(shift: float = 0.0, scores: tuple[float, ...] = (1.0, 1.0, 1.0)) -> list[list[Detection]]:
    """The truth boxes as detections, moved right by `shift` pixels, with the given scores in order."""
    score = iter(scores)
    return [[Detection(b.x1 + shift, b.y1, b.x2 + shift, b.y2, b.label, next(score)) for b in i.boxes] for i in TRUTH]


def direct_cocoeval(detections: list[list[Detection]]) -> COCOeval:
    """pycocotools on the same boxes, built here by hand rather than by forklift."""
    truth = COCO()
    truth.dataset = {
        "images": [{"id": 1, "width": 100, "height": 100}, {"id": 2, "width": 100, "height": 100}],
        "categories": [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 30], "area": 900, "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 2, "bbox": [50, 50, 40, 40], "area": 1600, "iscrowd": 0},
            {"id": 3, "image_id": 2, "category_id": 1, "bbox": [20, 20, 40, 40], "area": 1600, "iscrowd": 0},
        ],
    }
    results = [
        {"image_id": i, "category_id": NAMES.index(d.label) + 1, "bbox": [d.x1, d.y1, d.x2 - d.x1, d.y2 - d.y1],
         "score": d.score}
        for i, image in enumerate(detections, start=1) for d in image
    ]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        truth.createIndex()
        cocoeval = COCOeval(truth, truth.loadRes(results), "bbox")
        cocoeval.evaluate()
        cocoeval.accumulate()
        cocoeval.summarize()
    return cocoeval


def test_perfect_detections_score_one() -> None:
    metrics = detection_metrics(TRUTH, found(), NAMES)
    assert metrics.map == pytest.approx(1.0) and metrics.map50 == pytest.approx(1.0)
    assert metrics.ap50 == {"circle": pytest.approx(1.0), "square": pytest.approx(1.0)}
    assert metrics.map50_small == pytest.approx(1.0)  # the 30 px circle is COCO-small (under 32 x 32)
    assert (metrics.precision, metrics.recall) == (1.0, 1.0)
    assert metrics.confusion == [[2, 0, 0], [0, 1, 0], [0, 0, 0]]


def test_shifted_boxes_match_pycocotools() -> None:
    # 12 px to the right: the 30 px circle falls to IoU 0.43 (missed at .5), the 40 px boxes keep 0.54
    detections = found(shift=12, scores=(0.9, 0.7, 0.8))
    metrics = detection_metrics(TRUTH, detections, NAMES)
    direct = direct_cocoeval(detections)
    assert metrics.map == pytest.approx(direct.stats[0]) and metrics.map50 == pytest.approx(direct.stats[1])
    assert metrics.map50 < 1.0 and metrics.map < metrics.map50
    assert metrics.ap50["circle"] == pytest.approx(direct.eval["precision"][0, :, 0, 0, -1].mean())
    assert metrics.ap50["square"] == pytest.approx(1.0)
    assert metrics.map50_small == 0.0  # the only small object is the circle missed at IoU .5
    assert (metrics.precision, metrics.recall) == (pytest.approx(2 / 3), pytest.approx(2 / 3))


def test_missing_detection_lowers_recall() -> None:
    detections = found()
    detections[0].pop()  # the square is not found
    metrics = detection_metrics(TRUTH, detections, NAMES)
    assert metrics.recall == pytest.approx(2 / 3) and metrics.precision == 1.0
    assert metrics.ap50["square"] == 0.0 and metrics.map50 == pytest.approx(direct_cocoeval(detections).stats[1])
    assert metrics.confusion[1] == [0, 0, 1]  # the square: missed, as background


def test_small_objects_measured_apart() -> None:
    """Finding only the 40 px objects: mAP@.5 is high, mAP@.5 on the small ones (the 30 px circle) is 0, as
    pycocotools' own small-area precision says; without any small object the figure is None, not 0."""
    detections = found()
    detections[0].pop(0)  # the 30 px circle of a.png is not found
    metrics = detection_metrics(TRUTH, detections, NAMES)
    direct = direct_cocoeval(detections).eval["precision"][0, :, :, 1, -1]
    assert metrics.map50 is not None and metrics.map50 > 0.5
    assert metrics.map50_small == pytest.approx(direct[direct > -1].mean()) == 0.0
    large_only = [ImageRecord("b.png", 100, 100, "val", [Box("circle", 20, 20, 60, 60)])]
    assert detection_metrics(large_only, [[]], NAMES).map50_small is None


def test_operating_point_counts_by_hand() -> None:
    detections = found()
    detections[0].append(Detection(0, 60, 30, 95, "circle", 0.5))  # a false positive above the threshold
    detections[0].append(Detection(60, 0, 95, 30, "square", 0.1))  # one below it: ignored at 0.25
    detections[1][0] = Detection(20, 20, 60, 60, "square", 0.9)  # the right box, the wrong class
    metrics = detection_metrics(TRUTH, detections, NAMES, threshold=0.25)
    assert metrics.precision == pytest.approx(2 / 4) and metrics.recall == pytest.approx(2 / 3)
    # rows: circle, square, background (truth); columns: predicted circle, square, background
    assert metrics.confusion == [[1, 1, 0], [0, 1, 0], [1, 0, 0]]


def test_no_detections_is_zero_not_an_error() -> None:
    """Nothing found: mAP and recall 0; precision, 0 right of 0 kept, is no figure (it read 0.0000)."""
    metrics = detection_metrics(TRUTH, [[], []], NAMES)
    assert (metrics.map, metrics.map50, metrics.precision, metrics.recall) == (0.0, 0.0, None, 0.0)


def test_classification_top1_top5() -> None:
    images = [ImageRecord(f"{i}.png", 8, 8, "val", label=label) for i, label in enumerate(["circle", "square"])]
    answers = [
        [ClassScore("circle", 0.9), ClassScore("square", 0.1)],
        [ClassScore("circle", 0.6), ClassScore("square", 0.4)],
    ]
    metrics = classification_metrics(images, answers, NAMES)
    assert (metrics.top1, metrics.top5, metrics.confusion) == (0.5, 1.0, [[1, 0], [1, 0]])


def shapes_model(tmp: Path, names: list[str]) -> Path:
    """A random-weights detector for the synthetic shapes: the test cfg with 5 classes (3 x (5 + 5) = 30 filters)."""
    cfg = tmp / "shapes5.cfg"
    text = (CFGS / "v3-spp-groups.cfg").read_text()
    cfg.write_text(text.replace("filters=24", "filters=30").replace("classes=3", "classes=5"))
    (tmp / "shapes5.names").write_text("\n".join(names) + "\n")
    return new_darknet_dir(cfg, tmp / "shapes5.names", tmp / "model", seed=1)


@pytest.mark.slow  # a process of its own, seconds
def test_forklift_eval_end_to_end(tmp_path: Path) -> None:
    data = tmp_path / "data"
    synth_shapes(data, n=16, size=96, seed=3)
    model = shapes_model(tmp_path, CLASSES)
    result = forklift_here("eval", model, "--data", data, "--out", tmp_path / "eval", "--json", check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert report == json.loads(result.stdout)
    assert report["task"] == "detect" and report["images"] >= 1 and report["skipped"] == 0
    kept = sum(sum(row[:-1]) for row in report["confusion"])  # detections at the threshold: the predicted columns
    assert (report["precision"] is None) == (kept == 0)  # none kept: no precision, where it read 0.0
    for key in ("map", "map50", "recall") + (("precision",) if kept else ()):
        assert 0.0 <= report[key] <= 1.0
    assert all(ap is None or 0.0 <= ap <= 1.0 for ap in report["ap50"].values())
    for picture in ("confusion.png", "pr-curves.png"):
        assert (tmp_path / "eval" / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # a process of its own, seconds
def test_forklift_eval_matches_classes_by_name(tmp_path: Path) -> None:
    """The model's classes and the data set's are matched by name, whatever their order; a class on one side only
    is named; a model sharing no class with the data set is one line, exit 2."""
    data = tmp_path / "data"
    synth_shapes(data, n=16, size=96, seed=3)  # 16: some of them in val
    (tmp_path / "reordered").mkdir()
    reordered = shapes_model(tmp_path / "reordered", [*reversed(CLASSES[:4]), "hexagon"])
    result = forklift_here("eval", reordered, "--data", data, "--json", "--out", tmp_path / "eval", check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["classes"] == CLASSES and set(report["ap50"]) == set(CLASSES)
    assert report["notes"] == [
        f"class {CLASSES[4]!r} of the data set is not a class of the model: it is never found",
        "the model's classes 'hexagon' are not in the data set: left out",
    ]
    (tmp_path / "other").mkdir()
    other = shapes_model(tmp_path / "other", ["a", "b", "c", "d", "e"])
    refused = forklift_here("eval", other, "--data", data, check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "share no class" in refused.stderr
