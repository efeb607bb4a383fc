"""The grid's status filters (labelled, auto-labelled, reviewed, unlabelled, with a label) and adding a label to a
data set, against SQLite and PostgreSQL."""

from __future__ import annotations

import threading

from app_helpers import png
from fastapi.testclient import TestClient
from sqlalchemy import update

from forklift.app.records import label_named
from forklift.app.tables import Annotation, Image, Job


def _names(api: TestClient, dataset: int, query: str) -> list[str]:
    page = api.get(f"/api/datasets/{dataset}/images?{query}")
    assert page.status_code == 200, page.text
    return [image["original_name"] for image in page.json()["items"]]


def _auto_labelled(api: TestClient, image: dict, label: str) -> None:
    """As an auto-label run leaves an image: a model's box with its score, the image waiting for review."""
    with api.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        found = label_named(session, image["dataset_id"], label, create=True)
        session.add(Annotation(image_id=image["id"], label_id=found.id, kind="box", points=[2, 2, 20, 20],
                               source="auto", confidence=0.8))  # fmt: skip
        session.execute(update(Image).where(Image.id == image["id"]).values(status="auto", version=Image.version + 1))
        session.commit()


def test_the_grid_filters_by_each_status_and_label(api: TestClient) -> None:
    dataset = api.post("/api/datasets", json={"name": "grid"}).json()["id"]
    files = [("files", (f"{name}.png", png(seed=k))) for k, name in enumerate("abcdef")]
    a, b, c, d, _e, _f = api.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    for image, label in ((a, "cat"), (b, "dog")):
        box = [{"kind": "box", "label": label, "points": [1, 1, 9, 9]}]
        assert api.put(f"/api/images/{image['id']}/annotations", json={"version": 1, "shapes": box}).status_code == 200
    _auto_labelled(api, c, "cat")
    _auto_labelled(api, d, "dog")
    review = api.put(f"/api/images/{d['id']}/annotations", json={"version": 2, "shapes": []})  # corrected: none
    assert review.status_code == 200 and review.json()["status"] == "reviewed"
    assert _names(api, dataset, "status=labelled") == ["a.png", "b.png"]
    assert _names(api, dataset, "status=auto") == ["c.png"]
    assert _names(api, dataset, "status=reviewed") == ["d.png"]
    assert _names(api, dataset, "status=unlabelled") == ["e.png", "f.png"]
    assert _names(api, dataset, "label=cat") == ["a.png", "c.png"]  # a person's box and a model's
    assert _names(api, dataset, "status=labelled&label=cat") == ["a.png"]
    assert _names(api, dataset, "status=auto&label=dog") == []
    bad = api.get(f"/api/datasets/{dataset}/images?status=maybe")
    assert bad.status_code == 422 and bad.json()["error"].startswith("query.status:")


def test_a_label_is_added_once(api: TestClient) -> None:
    dataset = api.post("/api/datasets", json={"name": "labels"}).json()["id"]
    added = api.post(f"/api/datasets/{dataset}/labels", json={"name": "zebra"})
    assert added.status_code == 201
    assert [(label["name"], label["count"]) for label in added.json()] == [("zebra", 0)]
    again = api.post(f"/api/datasets/{dataset}/labels", json={"name": "zebra"})
    assert again.status_code == 201 and len(again.json()) == 1  # the same label, not a second one
    more = api.post(f"/api/datasets/{dataset}/labels", json={"name": "ant"}).json()
    assert [label["name"] for label in more] == ["zebra", "ant"]  # in the order made: their numbers in the editor
    assert api.get(f"/api/datasets/{dataset}/labels").json() == more
    assert _names(api, dataset, "label=zebra") == []  # a known label used by nothing yet
    unknown = api.get(f"/api/datasets/{dataset}/images?label=okapi")
    assert unknown.status_code == 422 and "not a label of this data set" in unknown.json()["error"]
    assert api.post(f"/api/datasets/{dataset}/labels", json={"name": " "}).status_code == 422
    assert api.post("/api/datasets/999/labels", json={"name": "x"}).status_code == 404


def test_two_people_saving_boxes_of_one_new_label_at_once(api: TestClient) -> None:
    """Each save makes its label when the data set has none of that name: saved at the same moment, the second
    takes the label the first made (no 5xx from the unique (data set, name))."""
    dataset = api.post("/api/datasets", json={"name": "together"}).json()["id"]
    files = [("files", (f"{k}.png", png(seed=k))) for k in range(2)]
    images = api.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    failures: list[str] = []

    def save_all(image: dict) -> None:
        version = image["version"]
        for round_ in range(25):
            shapes = [{"kind": "box", "label": f"new {round_}", "points": [1, 1, 9, 9]}]
            answer = api.put(f"/api/images/{image['id']}/annotations", json={"version": version, "shapes": shapes})
            if answer.status_code != 200:
                failures.append(f"round {round_}: {answer.status_code} {answer.text}")
                return
            version = answer.json()["version"]

    people = [threading.Thread(target=save_all, args=(image,)) for image in images]
    for person in people:
        person.start()
    for person in people:
        person.join(60)
    assert failures == []
    counts = {label["name"]: label["count"] for label in api.get(f"/api/datasets/{dataset}/labels").json()}
    assert counts == {**{f"new {r}": 0 for r in range(24)}, "new 24": 2}


def test_thumbnails_count_boxes_and_a_nothing_here_review_can_be_found_and_undone(api: TestClient) -> None:
    """Each image says how many boxes it has; an auto image accepted with nothing in it (a "nothing here"
    example for training) is found by status=reviewed&empty=true, and reopen undoes the accept."""
    dataset = api.post("/api/datasets", json={"name": "empties"}).json()["id"]
    files = [("files", (f"{name}.png", png(seed=k))) for k, name in enumerate("abc")]
    a, b, c = api.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    boxes = [
        {"kind": "box", "label": "cat", "points": [1, 1, 9, 9]},
        {"kind": "box", "label": "dog", "points": [20, 5, 40, 30]},
    ]
    assert api.put(f"/api/images/{a['id']}/annotations", json={"version": 1, "shapes": boxes}).status_code == 200
    _auto_labelled(api, b, "cat")
    with api.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        session.execute(update(Image).where(Image.id == c["id"]).values(status="auto", version=Image.version + 1))
        session.commit()  # the model found nothing in c
    counts = {i["original_name"]: i["shapes"] for i in api.get(f"/api/datasets/{dataset}/images").json()["items"]}
    assert counts == {"a.png": 2, "b.png": 1, "c.png": 0}
    accepted = api.post(f"/api/images/{c['id']}/review", json={"action": "accept", "version": 2}).json()
    assert accepted["status"] == "reviewed"
    assert _names(api, dataset, "status=reviewed&empty=true") == ["c.png"]
    assert _names(api, dataset, "empty=false") == ["a.png", "b.png"]
    reopened = api.post(f"/api/images/{c['id']}/review", json={"action": "reopen", "version": accepted["version"]})
    assert reopened.status_code == 200 and reopened.json()["status"] == "auto"
    assert _names(api, dataset, "status=reviewed&empty=true") == []


def test_an_undone_reject_puts_back_only_shapes_a_save_could_store(api: TestClient) -> None:
    """reopen after a reject sends the model's labels back: they are checked as any save's are (they went in
    unchecked: boxes outside the image, a polygon of 50,000 points, 151 new labels, NaN as a confidence)."""
    dataset = api.post("/api/datasets", json={"name": "undo"}).json()["id"]
    (image,) = api.post(f"/api/datasets/{dataset}/images", files=[("files", ("a.png", png(64, 48)))]).json()["added"]
    auto = {"source": "auto", "model_id": None, "confidence": 0.5}
    inside = {"kind": "box", "label": "cat", "points": [1, 1, 9, 9], **auto}
    review = f"/api/images/{image['id']}/review"
    for shapes, said in (
        ([{**inside, "points": [-500, -500, 9000, 9000]}], "is empty or outside the image"),
        ([{**inside, "kind": "polygon", "points": [[1.0, 1.0]] * 50_000}], "a polygon has at most 10000"),
        ([{**inside, "label": f"L{k}"} for k in range(151)], "151 labels new to the data set in one save"),
    ):
        answer = api.post(
            f"/api/images/{image['id']}/review", json={"action": "reopen", "version": 1, "shapes": shapes}
        )
        assert answer.status_code == 422 and said in answer.json()["error"], answer.text
    nan = '{"action": "reopen", "version": 1, "shapes": [{"kind": "box", "label": "cat", "points": [1, 1, 9, 9], ' \
          '"source": "auto", "model_id": null, "confidence": NaN}]}'  # fmt: skip
    answer = api.post(review, content=nan, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert api.get(f"/api/images/{image['id']}/annotations").json() | {"version": 1} == {
        "image_id": image["id"], "version": 1, "status": "unlabelled", "shapes": [], "class_label": None,
        "class_model_id": None, "class_confidence": None}  # fmt: skip
    review = f"/api/images/{image['id']}/review"
    wrong_task = api.post(review, json={"action": "reopen", "version": 1, "class_label": "cat"})
    assert wrong_task.status_code == 422 and wrong_task.json()["error"].startswith("class_label: for classification")
    gone = {**inside, "model_id": 999_999}  # a model deleted since the review: a 500 (a foreign key) before
    put_back = api.post(review, json={"action": "reopen", "version": 1, "shapes": [gone]})
    assert put_back.status_code == 200 and put_back.json()["status"] == "auto"
    assert [(s["source"], s["model_id"]) for s in put_back.json()["shapes"]] == [("auto", None)]


def test_a_finished_job_without_an_evaluation_says_why(api: TestClient) -> None:
    """A job over a set too small to hold images apart for val ends done with no eval.json: the page said nothing
    (a 404 it showed as no panel), where the reason is known."""
    dataset = api.post("/api/datasets", json={"name": "one image"}).json()["id"]
    with api.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        for state in ("done", "failed"):
            session.add(Job(dataset_id=dataset, model="small-classifier", settings={}, state=state,
                            out_dir=f"jobs/{state}", created_by="local", epochs=2))  # fmt: skip
        session.commit()
    done, failed = (api.get(f"/api/jobs/{job}/evaluation") for job in (1, 2))
    assert done.status_code == 404 and done.json()["error"].startswith(
        "job 1's model was not measured: no image was held out to validate on"
    )
    assert failed.status_code == 404 and failed.json()["error"] == "job 2 has no evaluation (it is failed)"


def test_an_export_with_no_labels_for_its_format_is_refused_before_the_download(api: TestClient) -> None:
    """Images a model found nothing in, exported to VOC with their unreviewed labels: the page's check said 204,
    then the download failed (a 422 naming a folder of the server's)."""
    dataset = api.post("/api/datasets", json={"name": "found nothing"}).json()["id"]
    (image,) = api.post(f"/api/datasets/{dataset}/images", files=[("files", ("a.png", png()))]).json()["added"]
    with api.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        session.execute(update(Image).where(Image.id == image["id"]).values(status="auto", version=Image.version + 1))
        session.commit()
    for check in ("true", "false"):
        answer = api.get(f"/api/datasets/{dataset}/export?format=voc&auto=true&check={check}")
        assert answer.status_code == 422 and answer.json()["error"] == (
            "data set 'found nothing': none of its 1 image(s) has labels for a voc export, whose empty label file "
            "says nothing is there (a model that found nothing is not a person's 'nothing here')")  # fmt: skip
    assert api.get(f"/api/datasets/{dataset}/export?format=coco&auto=true&check=true").status_code == 204
