"""Exports of polygons and of unlabelled images: COCO gives a polygon as its segmentation with a consistent bbox
and area (checked with pycocotools), VOC and YOLO its bounding box; COCO and forklift's format hold the unlabelled
images too, the others not."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from app_helpers import png
from fastapi.testclient import TestClient
from pycocotools.coco import COCO

TRIANGLE = [[10, 8], [60, 12], [30, 44]]  # in a 64 x 48 image


def _labelled_set(api: TestClient) -> int:
    """A box in a.png, a polygon in b.png, nothing in c.png."""
    dataset = api.post("/api/datasets", json={"name": "shapes"}).json()["id"]
    files = [("files", (f"{name}.png", png(64, 48, seed))) for seed, name in enumerate("abc")]
    a, b, _c = api.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    for image, shape in ((a, {"kind": "box", "label": "square", "points": [4, 6, 24, 30]}),
                         (b, {"kind": "polygon", "label": "triangle", "points": TRIANGLE})):  # fmt: skip
        saved = api.put(f"/api/images/{image['id']}/annotations", json={"version": 1, "shapes": [shape]})
        assert saved.status_code == 200, saved.text
    return int(dataset)


def _exported(api: TestClient, dataset: int, format_name: str) -> zipfile.ZipFile:
    answer = api.get(f"/api/datasets/{dataset}/export?format={format_name}")
    assert answer.status_code == 200, answer.text
    return zipfile.ZipFile(io.BytesIO(answer.content))


def test_coco_gives_polygons_as_segmentations_and_lists_unlabelled_images(api: TestClient, tmp_path: Path) -> None:
    zipped = _exported(api, _labelled_set(api), "coco")
    (tmp_path / "coco.json").write_bytes(zipped.read(next(n for n in zipped.namelist() if n.endswith(".json"))))
    coco = COCO(str(tmp_path / "coco.json"))
    names = {image["id"]: Path(image["file_name"]).name for image in coco.loadImgs(coco.getImgIds())}
    assert len(names) == 3 and sum(n.endswith(".png") for n in zipped.namelist()) == 3  # c.png too, with no labels
    assert sorted(names.values()) == ["a.png", "b.png", "c.png"]  # the names the files were uploaded with
    by_image = {names[i]: coco.loadAnns(coco.getAnnIds(imgIds=[i])) for i in names}
    assert sorted(len(found) for found in by_image.values()) == [0, 1, 1]
    (triangle,) = coco.loadAnns(coco.getAnnIds(catIds=coco.getCatIds(catNms=["triangle"])))
    assert triangle["segmentation"] == [[float(v) for point in TRIANGLE for v in point]]
    mask = coco.annToMask(triangle)
    assert mask.shape == (48, 64) and mask.sum() > 0
    assert triangle["area"] == pytest.approx(mask.sum())  # the pixels pycocotools draws
    assert triangle["area"] == pytest.approx(0.5 * abs(50 * 36 - 20 * 4), rel=0.1)  # about the triangle's area: 880
    ys, xs = np.nonzero(mask)
    assert triangle["bbox"] == [10, 8, 50, 36]  # x, y, width, height of the polygon
    drawn = [xs.min(), ys.min(), xs.max() + 1 - xs.min(), ys.max() + 1 - ys.min()]  # the mask's own bounds
    assert triangle["bbox"] == pytest.approx(drawn, abs=1.5)
    (square,) = coco.loadAnns(coco.getAnnIds(catIds=coco.getCatIds(catNms=["square"])))
    assert square["segmentation"] == [] and square["bbox"] == [4, 6, 20, 24] and square["area"] == 480


@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_forklift_format_holds_every_image_and_voc_and_yolo_the_labelled_ones_as_boxes(api: TestClient) -> None:
    """forklift's format keeps a polygon beside its bounds; VOC and YOLO take the bounds."""
    dataset = _labelled_set(api)
    forklift = _exported(api, dataset, "forklift")
    index = json.loads(forklift.read(next(n for n in forklift.namelist() if n.endswith("dataset.json"))))
    boxes = {Path(image["file"]).name: image["boxes"] for image in index["images"]}
    assert sorted(len(found) for found in boxes.values()) == [0, 1, 1]  # the unlabelled image, with no boxes
    assert [b for found in boxes.values() for b in found if b["label"] == "triangle"] == [
        {"label": "triangle", "x1": 10.0, "y1": 8.0, "x2": 60.0, "y2": 44.0,
         "polygon": [[float(x), float(y)] for x, y in TRIANGLE]}
    ]  # fmt: skip
    voc = _exported(api, dataset, "voc")
    xmls = [n for n in voc.namelist() if n.endswith(".xml")]
    assert len(xmls) == 2
    triangle = next(voc.read(n).decode() for n in xmls if b"triangle" in voc.read(n))
    bounds = ("<xmin>11</xmin>", "<ymin>9</ymin>", "<xmax>60</xmax>", "<ymax>44</ymax>")  # VOC counts from 1
    assert all(said in triangle for said in bounds) and "<polygon" not in triangle, triangle
    yolo = _exported(api, dataset, "yolo")
    labels = [yolo.read(n).decode().split() for n in yolo.namelist() if n.endswith(".txt")]
    assert len(labels) == 2 and all(len(line) == 5 for line in labels)  # class, centre and size: boxes


def test_an_export_of_only_unlabelled_images(api: TestClient) -> None:
    dataset = api.post("/api/datasets", json={"name": "fresh"}).json()["id"]
    api.post(f"/api/datasets/{dataset}/images", files=[("files", ("a.png", png()))])
    coco = _exported(api, dataset, "coco")
    document = json.loads(coco.read(next(n for n in coco.namelist() if n.endswith(".json"))))
    assert len(document["images"]) == 1 and document["annotations"] == []
    refused = api.get(f"/api/datasets/{dataset}/export?format=yolo")
    assert refused.status_code == 422 and "no images to export in yolo format" in refused.json()["error"]


def test_a_label_no_shape_uses_is_a_class_only_when_asked_and_classes_keep_their_order(api: TestClient) -> None:
    """Classes are the labels in use, in the order they were made (their numbers in the editor), not by name;
    empty_labels=true keeps a label nothing uses (one made ahead of labelling, say)."""
    dataset = _labelled_set(api)  # square made first, then triangle
    assert api.post(f"/api/datasets/{dataset}/labels", json={"name": "alpha"}).status_code == 201
    assert [label["name"] for label in api.get(f"/api/datasets/{dataset}").json()["labels"]] == [
        "square", "triangle", "alpha"
    ]  # fmt: skip
    for query, classes in (("", ["square", "triangle"]), ("&empty_labels=true", ["square", "triangle", "alpha"])):
        answer = api.get(f"/api/datasets/{dataset}/export?format=coco{query}")
        zipped = zipfile.ZipFile(io.BytesIO(answer.content))
        coco = json.loads(zipped.read(next(n for n in zipped.namelist() if n.endswith(".json"))))
        assert [c["name"] for c in sorted(coco["categories"], key=lambda c: c["id"])] == classes
        yolo = zipfile.ZipFile(io.BytesIO(api.get(f"/api/datasets/{dataset}/export?format=yolo{query}").content))
        config = yaml.safe_load(yolo.read(next(n for n in yolo.namelist() if n.endswith("data.yaml"))))
        assert config["names"] == classes and config["nc"] == len(classes)
