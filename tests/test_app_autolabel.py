"""The auto-label loop through the API, on SQLite and a real PostgreSQL server: a trained job's model labels the
unlabelled images through forklift's serving (its boxes checked against the same model run in-process by
forklift's predictor), the review queue comes lowest confidence first, accept / correct / reject, and a retrain
fine-tunes the model on what people labelled and reviewed, never on unreviewed auto labels."""

from __future__ import annotations

import io
import itertools
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from app_helpers import app_client, fresh_database, model_zip, png, shapes_dataset, wait_for
from torchvision.ops import box_iou

import forklift.app
from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.vision.boxes import one_box_per_object

pytestmark = pytest.mark.slow

CLASSIFIER_CFG = Path(forklift.app.__file__).parent / "cfgs" / "small-classifier.cfg"
TRAIN = {"model": "yolov3-tiny-slim", "batch": 8, "img": 64, "lr": 0.001, "epochs": 2}


def _reference(model_dir: Path, files: dict[int, bytes], conf: float) -> dict[int, list[dict]]:
    """Each image's detections by the model run in this process (forklift's predictor, not its server), one per
    object: a box overlapping a surer one of another class by IoU > .6 is left out."""
    predictor = load_predictor(open_model_dir(model_dir), options=PredictOptions(conf=conf))
    found = {key: predictor.predict([(f"{key}.png", content)]).to_json()["results"][0]["detections"]
             for key, content in files.items()}  # fmt: skip
    return {key: _one_per_object(detections) for key, detections in found.items()}


def _one_per_object(detections: list[dict]) -> list[dict]:
    kept: list[dict] = []
    for d in sorted(detections, key=lambda d: -d["score"]):
        corners = torch.tensor([[d["bbox"][k] for k in ("x1", "y1", "x2", "y2")]], dtype=torch.float32)
        if all(box_iou(corners, torch.tensor([[k["bbox"][c] for c in ("x1", "y1", "x2", "y2")]],
                                             dtype=torch.float32)).item() <= 0.6 for k in kept):  # fmt: skip
            kept.append(d)
    return kept


def _threshold_in_a_gap(scores: list[float]) -> float:
    """A threshold that keeps some scores and not others, halfway across the widest gap between the middle half of
    them: the server computes the scores again (another process, another thread count), and a score near the
    threshold could land on either side."""
    ordered = sorted(scores)
    middle = ordered[len(ordered) // 4 : 3 * len(ordered) // 4 + 1]
    low, high = max(itertools.pairwise(middle), key=lambda pair: pair[1] - pair[0])
    return (low + high) / 2


def _same_boxes(shapes: list[dict], expected: list[dict]) -> bool:
    def key(box: dict) -> tuple:
        return (box["label"], *box["points"])

    found = sorted(key(s) for s in shapes)
    wanted = sorted((d["label"], d["bbox"]["x1"], d["bbox"]["y1"], d["bbox"]["x2"], d["bbox"]["y2"]) for d in expected)
    return len(found) == len(wanted) and all(
        a[0] == b[0] and all(abs(x - y) <= 2 for x, y in zip(a[1:], b[1:], strict=True))
        for a, b in zip(found, wanted, strict=True)
    )


def test_the_loop_labels_reviews_and_retrains(tmp_path: Path) -> None:
    """On SQLite only (a training job, half a minute): the records it touches run on PostgreSQL in the API tests."""
    data_dir = tmp_path / "app"
    data_dir.mkdir()
    with app_client(data_dir, fresh_database(None, data_dir)) as client:
        dataset, data, added = shapes_dataset(client, tmp_path / "shapes", 24, labelled=16)
        job = client.post(f"/api/datasets/{dataset}/jobs", json=TRAIN).json()
        assert wait_for(client, f"/api/jobs/{job['id']}", ("done", "failed"))["state"] == "done"
        (model,) = client.get("/api/models").json()
        unlabelled = {image["id"]: (data.root / record.file).read_bytes()
                      for image, record in zip(added[16:], data.images[16:], strict=True)}  # fmt: skip
        model_dir = data_dir / "jobs" / str(job["id"]) / "model"
        scores = [d["score"] for found in _reference(model_dir, unlabelled, 0.001).values() for d in found]
        assert scores, "the trained model finds nothing at all"
        threshold = _threshold_in_a_gap(scores)  # some boxes kept, some not
        expected = _reference(model_dir, unlabelled, threshold)

        for bad, code in (({"model_id": model["id"], "threshold": 2}, 422), ({"model_id": 999}, 404)):
            answer = client.post(f"/api/datasets/{dataset}/autolabel", json=bad)
            assert answer.status_code == code and "error" in answer.json(), answer.text
        people = sum(label["count"] for label in client.get(f"/api/datasets/{dataset}/labels").json())
        run = client.post(f"/api/datasets/{dataset}/autolabel", json={"model_id": model["id"], "threshold": threshold})
        assert run.status_code == 201, run.text
        refused = client.delete(f"/api/datasets/{dataset}")  # queued (it starts a server first): not under it
        assert refused.status_code == 409 and refused.json()["error"].endswith(
            f"auto-label run {run.json()['id']} is queued or running on it; cancel it on the data set's page first"
        )
        finished = wait_for(client, f"/api/autolabel/{run.json()['id']}", ("done", "failed", "cancelled"))
        assert finished["state"] == "done", finished
        assert finished["total"] == finished["done"] == 8
        assert finished["boxes"] == sum(len(found) for found in expected.values())

        queue = client.get(f"/api/datasets/{dataset}/review").json()
        assert queue["total"] == 8 and {item["image"]["id"] for item in queue["items"]} == set(unlabelled)
        lowest = [item["lowest_confidence"] for item in queue["items"]]
        assert lowest == sorted(lowest, key=lambda v: (v is None, v or 0)), lowest  # least sure first, no box last
        nothing = client.get(f"/api/datasets/{dataset}/review?first=nothing").json()  # or the images it missed first
        lowest = [item["lowest_confidence"] for item in nothing["items"]]
        assert lowest == sorted(lowest, key=lambda v: (v is not None, v or 0)), lowest
        for item in queue["items"]:
            shown = client.get(f"/api/images/{item['image']['id']}/annotations").json()
            assert shown["status"] == "auto" and all(
                s["source"] == "auto" and s["model_id"] == model["id"] and s["confidence"] >= threshold - 1e-4
                for s in shown["shapes"]
            )
            assert _same_boxes(shown["shapes"], expected[item["image"]["id"]]), (shown["shapes"], expected)
        counts = client.get(f"/api/datasets/{dataset}").json()
        assert (counts["to_review"], counts["labelled"]) == (8, 16)  # auto labels are not labelled until reviewed
        labels = client.get(f"/api/datasets/{dataset}/labels").json()  # a model's boxes counted apart from people's
        assert sum(label["unreviewed"] for label in labels) == finished["boxes"]
        assert sum(label["count"] for label in labels) == people  # the people's own, as they were

        first, second, third = (item["image"] for item in queue["items"][:3])
        stale = client.post(f"/api/images/{first['id']}/review", json={"action": "accept", "version": 1})
        assert stale.status_code == 409 and "reload" in stale.json()["error"]
        accepted = client.post(f"/api/images/{first['id']}/review", json={"action": "accept", "version": 2}).json()
        assert accepted["status"] == "reviewed" and all(s["source"] == "auto" for s in accepted["shapes"])
        again = client.post(f"/api/images/{first['id']}/review", json={"action": "accept", "version": 3})
        assert again.status_code == 409 and again.json()["error"] == (  # by name, and who may have decided it
            f"{first['original_name']}: accepted or corrected already (by someone else, or in another tab); it no "
            "longer waits for review")  # fmt: skip
        # an accept is undone (reopen): the image waits for review again with the model's labels, then is accepted
        reopened = client.post(f"/api/images/{first['id']}/review", json={"action": "reopen", "version": 3}).json()
        assert reopened["status"] == "auto" and reopened["shapes"] == accepted["shapes"]
        assert (
            client.post(f"/api/images/{first['id']}/review", json={"action": "accept", "version": 4}).status_code == 200
        )
        shown = client.get(f"/api/images/{second['id']}/annotations").json()  # what the review page showed
        rejected = client.post(f"/api/images/{second['id']}/review", json={"action": "reject", "version": 2}).json()
        assert rejected["status"] == "unlabelled" and rejected["shapes"] == []
        # a reject is undone too: the page sends back the model's labels it showed
        undone = client.post(f"/api/images/{second['id']}/review",
                             json={"action": "reopen", "version": 3, "shapes": shown["shapes"]}).json()  # fmt: skip
        assert undone["status"] == "auto" and undone["shapes"] == shown["shapes"]
        rejected = client.post(f"/api/images/{second['id']}/review", json={"action": "reject", "version": 4}).json()
        assert rejected["status"] == "unlabelled" and rejected["shapes"] == []
        seen = {label["name"]: label["id"] for label in client.get(f"/api/datasets/{dataset}/labels").json()}
        name = shown["shapes"][0]["label"]  # renamed in another tab before the undo: refused, not made again
        assert client.patch(f"/api/labels/{seen[name]}", json={"name": f"{name}-renamed"}).status_code == 200
        stale = client.post(f"/api/images/{second['id']}/review", json={"action": "reopen", "version": 5,
                            "shapes": shown["shapes"], "labels_seen": seen})  # fmt: skip
        assert stale.status_code == 409 and f"label {name!r} was renamed" in stale.json()["error"], stale.text
        assert client.patch(f"/api/labels/{seen[name]}", json={"name": name}).status_code == 200
        edited = client.get(f"/api/images/{third['id']}/annotations").json()
        refused = client.post(
            f"/api/images/{third['id']}/review", json={"action": "reopen", "version": edited["version"]}
        )
        assert refused.status_code == 409 and "nothing to undo" in refused.json()["error"]  # still waiting: no decision
        truth = data.images[added.index(next(a for a in added if a["id"] == third["id"]))].boxes
        shapes = [{"kind": "box", "label": b.label, "points": [b.x1, b.y1, b.x2, b.y2]} for b in truth]
        corrected = client.put(f"/api/images/{third['id']}/annotations", json={"version": 2, "shapes": shapes}).json()
        assert corrected["status"] == "reviewed" and {s["source"] for s in corrected["shapes"]} == {"human"}
        counts = client.get(f"/api/datasets/{dataset}").json()
        assert (counts["to_review"], counts["labelled"]) == (5, 16 + 2)
        assert [i["image"]["id"] for i in client.get(f"/api/datasets/{dataset}/review").json()["items"]] == [
            item["image"]["id"] for item in queue["items"][3:]
        ]
        _exports_keep_unreviewed_auto_labels_apart(client, dataset, {i["image"]["id"] for i in queue["items"][3:]})

        retrain = client.post(f"/api/models/{model['id']}/retrain", json={"epochs": 1})
        assert retrain.status_code == 201, retrain.text
        second_job = retrain.json()
        assert second_job["settings"]["from_model_id"] == model["id"] and second_job["epochs"] == 1
        assert wait_for(client, f"/api/jobs/{second_job['id']}", ("done", "failed"))["state"] == "done"
        trained_on = json.loads((data_dir / "jobs" / str(second_job["id"]) / "data" / "dataset.json").read_text())
        assert len(trained_on["images"]) == 16 + 2  # people's labels and the two reviewed, not the five auto
        newest = client.get("/api/models").json()[0]
        assert newest["id"] != model["id"] and newest["settings"]["from_model_id"] == model["id"]
        train_log = (data_dir / "jobs" / str(second_job["id"]) / "train.log").read_text()
        assert f"fine-tuning: starting from the weights of {model_dir}" in train_log, train_log[-2000:]
        # the model that labelled them deleted: its unreviewed labels are still exported as a model's, not a person's
        unreviewed = [item["image"]["id"] for item in queue["items"][3:]]
        auto_boxes = sum(len(client.get(f"/api/images/{i}/annotations").json()["shapes"]) for i in unreviewed)
        assert client.delete(f"/api/models/{model['id']}").status_code == 204
        zipped = _export(client, dataset, "forklift", "&auto=true")
        saved = json.loads(zipped.read(next(n for n in zipped.namelist() if n.endswith("dataset.json"))))
        found_by = [
            box["found_by"]["model"] for image in saved["images"] for box in image["boxes"] if "found_by" in box
        ]
        assert found_by == ["(a deleted model)"] * auto_boxes


def _export(client: Any, dataset: int, format_name: str, query: str = "") -> zipfile.ZipFile:
    answer = client.get(f"/api/datasets/{dataset}/export?format={format_name}{query}")
    assert answer.status_code == 200, answer.text
    return zipfile.ZipFile(io.BytesIO(answer.content))


def _exports_keep_unreviewed_auto_labels_apart(client: Any, dataset: int, unreviewed: set[int]) -> None:
    """By default an export holds a person's and the reviewed labels only: an unreviewed image goes without its
    model's boxes (COCO, forklift) or not at all (YOLO). With auto=true its boxes are there, each marked with the
    model and its confidence; the reviewed and the person's are not marked."""
    counts = client.get(f"/api/datasets/{dataset}").json()
    auto_boxes = sum(len(client.get(f"/api/images/{i}/annotations").json()["shapes"]) for i in unreviewed)
    assert auto_boxes > 0
    for query, marked_boxes, yolo_images in (
        ("", 0, counts["labelled"]),
        ("&auto=true", auto_boxes, counts["labelled"] + len(unreviewed)),
    ):
        zipped = _export(client, dataset, "coco", query)
        coco = json.loads(zipped.read(next(n for n in zipped.namelist() if n.endswith(".json"))))
        marked = [a for a in coco["annotations"] if a.get("attributes", {}).get("source") == "auto"]
        assert len(marked) == marked_boxes and all(0 <= a["attributes"]["confidence"] <= 1 for a in marked)
        assert len(coco["images"]) == counts["images"]  # COCO holds every image, an unreviewed one without its boxes
        zipped = _export(client, dataset, "forklift", query)
        saved = json.loads(zipped.read(next(n for n in zipped.namelist() if n.endswith("dataset.json"))))
        found_by = [box for image in saved["images"] for box in image["boxes"] if "found_by" in box]
        assert len(found_by) == marked_boxes and all(box["found_by"]["model"] for box in found_by)
        yolo = _export(client, dataset, "yolo", query)
        assert len([n for n in yolo.namelist() if "/labels/" in n and n.endswith(".txt")]) == yolo_images
    _a_forklift_export_imports_as_it_was(client, dataset)


def _a_forklift_export_imports_as_it_was(client: Any, dataset: int) -> None:
    """The app's own export, with the unreviewed auto labels, imported into a new data set: every image with its
    status (reviewed ones as labelled: the export keeps no review of labels that are a person's now) and its
    shapes, a model's unreviewed ones still the model's (linked to it by name) with their confidence."""
    exported = client.get(f"/api/datasets/{dataset}/export?format=forklift&auto=true").content
    again = client.post("/api/datasets", json={"name": "again"}).json()["id"]
    imported = client.post(f"/api/datasets/{again}/import", data={"format": "forklift"},
                           files={"file": ("again.zip", exported)})  # fmt: skip
    assert imported.status_code == 201 and imported.json()["refused"] == [], imported.text
    before, after = _images_by_name(client, dataset), _images_by_name(client, again)
    assert sorted(before) == sorted(after)
    for name, (status, shapes) in before.items():
        was_auto = status == "auto"
        assert after[name][0] == ("labelled" if status == "reviewed" else status), name
        assert after[name][1] == [s if was_auto else {**s, "source": "human", "model_id": None, "confidence": None}
                                  for s in shapes], name  # fmt: skip
    counts, counts_again = client.get(f"/api/datasets/{dataset}").json(), client.get(f"/api/datasets/{again}").json()
    assert [counts_again[k] for k in ("images", "labelled", "to_review")] == [
        counts[k] for k in ("images", "labelled", "to_review")]  # fmt: skip


def _images_by_name(client: Any, dataset: int) -> dict[str, tuple[str, list[dict]]]:
    """Each image's status and shapes (sorted), by the name it was uploaded with."""
    items = client.get(f"/api/datasets/{dataset}/images?limit=500").json()["items"]
    shapes = {i["id"]: client.get(f"/api/images/{i['id']}/annotations").json()["shapes"] for i in items}
    return {i["original_name"]: (i["status"], sorted(shapes[i["id"]], key=json.dumps)) for i in items}


def test_a_run_that_fails_says_why_and_the_next_one_runs(tmp_path: Path) -> None:
    """An image file gone from disk fails its run with one line naming it; the auto-labeller goes on."""
    data_dir = tmp_path / "app"
    data_dir.mkdir()
    with app_client(data_dir, fresh_database(None, data_dir)) as client:
        model = client.post("/api/models/import", files={"file": ("tiny.zip", model_zip(tmp_path))}).json()["model"]
        broken = client.post("/api/datasets", json={"name": "broken"}).json()["id"]
        lost = client.post(f"/api/datasets/{broken}/images", files=[("files", ("a.png", png()))]).json()["added"][0]
        fine = client.post("/api/datasets", json={"name": "fine"}).json()["id"]
        client.post(f"/api/datasets/{fine}/images", files=[("files", ("b.png", png(seed=1)))])
        served = client.get(f"/api/images/{lost['id']}/file").content
        stored = next(path for path in (data_dir / "datasets").rglob("*.png") if path.read_bytes() == served)
        stored.unlink()
        failed = client.post(f"/api/datasets/{broken}/autolabel", json={"model_id": model["id"]}).json()
        failed = wait_for(client, f"/api/autolabel/{failed['id']}", ("done", "failed"))
        assert failed["state"] == "failed" and stored.name in failed["error"], failed
        run = client.post(f"/api/datasets/{fine}/autolabel", json={"model_id": model["id"], "threshold": 0.0}).json()
        assert wait_for(client, f"/api/autolabel/{run['id']}", ("done", "failed"))["state"] == "done"
        assert client.get(f"/api/datasets/{fine}").json()["to_review"] == 1


def test_a_classifier_labels_a_classification_set_its_best_class_at_the_threshold(
    app_database: str | None, tmp_path: Path
) -> None:
    data_dir = tmp_path / "app"
    data_dir.mkdir()
    (tmp_path / "kinds.names").write_text("circle\nsquare\n")
    classifier = model_zip(tmp_path, cfg=CLASSIFIER_CFG, names=tmp_path / "kinds.names")
    with app_client(data_dir, fresh_database(app_database, data_dir)) as client:
        dataset = client.post("/api/datasets", json={"name": "kinds", "task": "classify"}).json()["id"]
        files = {f"{k}.png": png(seed=k) for k in range(8)}
        added = client.post(f"/api/datasets/{dataset}/images", files=[("files", f) for f in files.items()]).json()
        ids = {image["id"]: files[image["original_name"]] for image in added["added"]}
        model = client.post("/api/models/import", files={"file": ("kinds.zip", classifier)}).json()["model"]
        detector = client.post("/api/models/import", files={"file": ("tiny.zip", model_zip(tmp_path / "d"))}).json()
        wrong = client.post(f"/api/datasets/{dataset}/autolabel", json={"model_id": detector["model"]["id"]})
        assert wrong.status_code == 422 and "answers detect" in wrong.json()["error"], wrong.text
        for task, offered in (("classify", model), ("detect", detector["model"])):  # what the forms offer
            assert [m["id"] for m in client.get(f"/api/models?task={task}").json()] == [offered["id"]]

        predictor = load_predictor(open_model_dir(tmp_path / "tiny"))  # the classifier, as it was zipped
        best = {}
        for key, content in ids.items():
            (answer,) = predictor.predict([(f"{key}.png", content)]).to_json()["results"]
            best[key] = max(answer["classes"], key=lambda c: c["score"])
        threshold = _threshold_in_a_gap([b["score"] for b in best.values()])  # some classes kept, some not
        run = client.post(f"/api/datasets/{dataset}/autolabel", json={"model_id": model["id"], "threshold": threshold})
        finished = wait_for(client, f"/api/autolabel/{run.json()['id']}", ("done", "failed", "cancelled"))
        sure = {key for key, b in best.items() if b["score"] >= threshold}
        assert finished["state"] == "done" and finished["boxes"] == len(sure) and 0 < len(sure) < 8, finished
        for key, b in best.items():
            shown = client.get(f"/api/images/{key}/annotations").json()
            assert shown["status"] == "auto" and shown["shapes"] == []
            if key in sure:
                assert shown["class_label"] == b["label"] and shown["class_model_id"] == model["id"]
                assert abs(shown["class_confidence"] - b["score"]) < 1e-3
            else:
                assert shown["class_label"] is None and shown["class_confidence"] is None

        queue = client.get(f"/api/datasets/{dataset}/review?first=nothing").json()["items"]
        lowest = [item["lowest_confidence"] for item in queue]
        assert lowest[: 8 - len(sure)] == [None] * (8 - len(sure))  # asked for: no class first, then the least sure
        assert lowest[8 - len(sure) :] == sorted(best[key]["score"] for key in sure), lowest
        counts = client.get(f"/api/datasets/{dataset}").json()
        assert (counts["to_review"], counts["labelled"]) == (8, 0)
        copy = client.post(f"/api/datasets/{dataset}/duplicate").json()  # keeps whose class each image has
        twins = client.get(f"/api/datasets/{copy['id']}/review?first=nothing").json()["items"]
        assert [t["lowest_confidence"] for t in twins] == lowest
        unsure, least_sure, surest = queue[0]["image"]["id"], queue[-len(sure)]["image"]["id"], queue[-1]["image"]["id"]
        classless = client.post(f"/api/images/{unsure}/review", json={"action": "accept", "version": 2})
        assert classless.status_code == 409 and "no class" in classless.json()["error"]  # it would never train
        augment = client.post(f"/api/datasets/{dataset}/augment", json={"image_ids": [surest], "variants": 1})
        assert augment.status_code == 422 and "waits for review" in augment.json()["error"]
        accepted = client.post(f"/api/images/{surest}/review", json={"action": "accept", "version": 2}).json()
        assert accepted["status"] == "reviewed" and accepted["class_label"] == best[surest]["label"]
        assert client.delete(f"/api/models/{model['id']}").status_code == 204  # its auto classes stay for review
        rejected = client.post(f"/api/images/{least_sure}/review", json={"action": "reject", "version": 2}).json()
        assert rejected["status"] == "unlabelled" and rejected["class_label"] is None
        assert rejected["class_confidence"] is None and rejected["class_model_id"] is None
        corrected = client.put(f"/api/images/{unsure}/annotations",
                               json={"version": 2, "shapes": [], "class_label": "square"}).json()  # fmt: skip
        assert corrected["status"] == "reviewed" and corrected["class_label"] == "square"
        assert corrected["class_model_id"] is None and corrected["class_confidence"] is None
        counts = client.get(f"/api/datasets/{dataset}").json()
        assert (counts["to_review"], counts["labelled"]) == (5, 2)


def test_an_object_gets_one_auto_box_the_surest_of_the_classes_found_on_it() -> None:
    boxes = [("circle", 0.9, [0.0, 0.0, 10.0, 10.0]), ("square", 0.7, [0.0, 0.0, 10.0, 9.0]),  # one object
             ("star", 0.8, [5.0, 0.0, 15.0, 10.0]), ("cross", 0.6, [20.0, 20.0, 30.0, 30.0])]  # fmt: skip
    kept = one_box_per_object(boxes)
    assert [label for label, _, _ in kept] == ["circle", "star", "cross"]  # the star overlaps the circle by 1/3
    assert one_box_per_object(boxes[:1]) == boxes[:1] and one_box_per_object([]) == []
