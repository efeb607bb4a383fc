"""The app's JSON API, against SQLite and against a real PostgreSQL server: data sets, uploads and what they refuse,
annotations with stale writes refused, labels, the grid's filters, export checked with pycocotools, safe zip
imports, video frames, accounts and CSRF, and migrations that keep the data."""

from __future__ import annotations

import io
import json
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from app_helpers import app_client, bomb_png, fresh_database, png, video, zip_of
from fastapi.testclient import TestClient
from PIL import Image as PILImage
from pycocotools.coco import COCO

from forklift.cli import main
from forklift.data.check import check_dataset, usable_images


@pytest.fixture
def client(app_database: str | None, tmp_path: Path) -> Iterator[TestClient]:
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(app_database, data)) as made:
        yield made


def _dataset(client: TestClient, name: str = "shapes", task: str = "detect") -> int:
    made = client.post("/api/datasets", json={"name": name, "task": task})
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def _upload(client: TestClient, dataset: int, files: dict[str, bytes]) -> dict:
    answer = client.post(f"/api/datasets/{dataset}/images", files=[("files", (n, c)) for n, c in files.items()])
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def _box(client: TestClient, image: dict, label: str, box: list[float], version: int | None = None) -> dict:
    shapes = [{"kind": "box", "label": label, "points": box}]
    answer = client.put(f"/api/images/{image['id']}/annotations",
                        json={"version": version or image["version"], "shapes": shapes})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_data_sets_are_made_renamed_duplicated_and_deleted(client: TestClient) -> None:
    dataset = _dataset(client)
    image = _upload(client, dataset, {"a.png": png(seed=1)})["added"][0]
    _box(client, image, "circle", [1, 2, 30, 40])
    assert client.patch(f"/api/datasets/{dataset}", json={"name": "renamed"}).json()["name"] == "renamed"
    copy = client.post(f"/api/datasets/{dataset}/duplicate").json()
    assert copy["name"] == "renamed (copy)" and copy["images"] == 1 and copy["labelled"] == 1
    assert copy["labels"] == [{"id": copy["labels"][0]["id"], "name": "circle", "count": 1, "unreviewed": 0}]
    assert client.delete(f"/api/datasets/{dataset}").status_code == 204
    assert client.get(f"/api/datasets/{dataset}").status_code == 404
    copied = client.get(f"/api/datasets/{copy['id']}/images").json()["items"][0]
    assert client.get(copied["file"]).content == png(seed=1)  # the copy has files of its own
    assert client.post("/api/datasets", json={"name": "  "}).status_code == 422
    put = client.put(f"/api/datasets/{copy['id']}", json={"name": "x"})  # a method the path does not take
    assert put.status_code == 405 and put.headers["allow"] == "DELETE, GET, PATCH"
    assert put.json()["error"] == f"PUT /api/datasets/{copy['id']}: not taken (it takes DELETE, GET, PATCH)"
    segment = client.post("/api/datasets", json={"name": "masks", "task": "segment"})  # the choices as they are sent
    assert segment.json()["error"] == "body.task: Input should be 'detect' or 'classify'"


def test_an_export_is_checked_before_it_is_downloaded(client: TestClient) -> None:
    boxes, kinds = _dataset(client, "boxes"), _dataset(client, "kinds", task="classify")
    _upload(client, boxes, {"a.png": png(seed=1)})  # unlabelled: in COCO, not in VOC
    answers = {
        "coco": client.get(f"/api/datasets/{boxes}/export?format=coco&check=true"),
        "voc": client.get(f"/api/datasets/{boxes}/export?format=voc&check=true"),
        "classify": client.get(f"/api/datasets/{kinds}/export?format=yolo&check=true"),
    }
    assert answers["coco"].status_code == 204 and answers["coco"].content == b""
    assert answers["voc"].status_code == 422 and "'boxes': no images to export in voc format" in answers["voc"].text
    assert answers["classify"].json()["error"] == (
        "data set 'kinds': a classification data set exports in forklift's format only (yolo holds boxes)"
    )


def test_a_data_set_name_is_one_data_sets_only(client: TestClient) -> None:
    made = client.post("/api/datasets", json={"name": "second"}).json()
    first, second = _dataset(client), made["id"]
    assert (
        made["created_at"].endswith("Z")
        and client.get(f"/api/datasets/{second}").json()["created_at"] == (made["created_at"])
    )  # one time, one form: UTC, said so, as made and as read back
    name = client.get(f"/api/datasets/{first}").json()["name"]
    for answer in (client.post("/api/datasets", json={"name": name}),
                   client.patch(f"/api/datasets/{second}", json={"name": name})):  # fmt: skip
        assert answer.status_code == 409
        assert answer.json()["error"] == f"a data set named {name!r} exists already: give this one another name"
    assert client.patch(f"/api/datasets/{first}", json={"name": name}).status_code == 200  # its own name
    for label in ("zebra", "ant", "moose"):  # their numbers in the editor, and a YOLO export's class indices
        client.post(f"/api/datasets/{first}/labels", json={"name": label})
    copied = [client.post(f"/api/datasets/{first}/duplicate").json() for _ in range(3)]
    copies = [copy["name"] for copy in copied]
    assert copies == [f"{name} (copy)", f"{name} (copy 2)", f"{name} (copy 3)"]
    assert [label["name"] for label in copied[0]["labels"]] == ["zebra", "ant", "moose"]  # in the order they were made
    names = [d["name"] for d in client.get("/api/datasets").json()]
    assert sorted(names) == sorted([name, "second", *copies])


def test_a_name_asked_for_by_many_at_once_is_given_once(client: TestClient) -> None:
    """Requests at the same moment each find the name free before they add their set (a check in the app let them all
    through); the database's unique index keeps the name to one set, and the others are told why."""
    start = threading.Barrier(6)

    def make(_: int) -> int:
        start.wait()
        return client.post("/api/datasets", json={"name": "racing"}).status_code

    with ThreadPoolExecutor(6) as pool:
        assert sorted(pool.map(make, range(6))) == [201] + [409] * 5
    source = next(d["id"] for d in client.get("/api/datasets").json() if d["name"] == "racing")

    def duplicate(_: int) -> int:
        start.wait()
        return client.post(f"/api/datasets/{source}/duplicate").status_code

    with ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(duplicate, range(6)))
    names = [d["name"] for d in client.get("/api/datasets").json()]
    assert set(codes) <= {201, 409} and codes.count(201) == len(names) - 1 >= 1
    assert len(set(names)) == len(names)


def test_the_description_says_how_a_request_is_authorised(client: TestClient) -> None:
    """/openapi.json declares the bearer token, the session cookie and the CSRF header (a client found the header's
    name only in a 403; /docs had no Authorize button); the login itself needs none of them."""
    spec = client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["HTTPBearer"]["scheme"] == "bearer"
    assert (schemes["APIKeyCookie"]["name"], schemes["APIKeyHeader"]["name"]) == ("forklift_session", "x-csrf-token")
    assert {"HTTPBearer": []} in spec["paths"]["/api/datasets"]["post"]["security"]
    assert "security" not in spec["paths"]["/api/login"]["post"]


def test_a_removed_records_id_never_names_a_new_one(client: TestClient) -> None:
    """The newest image and data set removed, the next ones added get ids of their own: a page still open on the
    removed image cannot save its boxes onto the new one, nor an old link open it."""
    kept, removed = _dataset(client, "kept"), _dataset(client, "removed")
    first, newest = _upload(client, kept, {"a.png": png(seed=1), "b.png": png(seed=2)})["added"]
    assert client.delete(f"/api/images/{newest['id']}").status_code == 204
    added = _upload(client, kept, {"c.png": png(seed=3)})["added"][0]
    assert added["id"] not in (first["id"], newest["id"])
    stale = client.put(f"/api/images/{newest['id']}/annotations",
                       json={"version": newest["version"], "shapes": [
                           {"kind": "box", "label": "cat", "points": [1, 1, 9, 9]}]})  # fmt: skip
    assert stale.status_code == 404
    assert client.get(f"/api/images/{added['id']}/annotations").json()["shapes"] == []
    assert client.delete(f"/api/datasets/{removed}").status_code == 204
    assert _dataset(client, "later") != removed and client.get(f"/api/datasets/{removed}").status_code == 404


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_uploads_keep_the_good_and_name_each_bad_file(client: TestClient) -> None:
    dataset = _dataset(client)
    good = png(80, 60)
    result = _upload(client, dataset, {
        "good.png": good, "text.png": b"not an image at all", "cut.png": good[: len(good) // 2],
        "bomb.png": bomb_png(),
    })  # fmt: skip
    assert [(i["original_name"], i["width"], i["height"]) for i in result["added"]] == [("good.png", 80, 60)]
    refused = " | ".join(result["refused"])
    assert "text.png: not an image" in refused and "cut.png: a broken or truncated image" in refused
    assert "bomb.png:" in refused and "decompression bomb" in refused
    thumbnail = client.get(result["added"][0]["thumbnail"])
    assert thumbnail.headers["content-type"] == "image/jpeg" and thumbnail.content[:2] == b"\xff\xd8"


def test_a_stale_write_is_refused_and_nothing_is_overwritten(client: TestClient) -> None:
    dataset = _dataset(client)
    image = _upload(client, dataset, {"a.png": png()})["added"][0]
    first = _box(client, image, "cat", [1, 1, 20, 20])  # person A saves
    stale = client.put(f"/api/images/{image['id']}/annotations",
                       json={"version": image["version"], "shapes": []})  # fmt: skip  # person B, from before A
    assert stale.status_code == 409 and "reload it" in stale.json()["error"]
    now = client.get(f"/api/images/{image['id']}/annotations").json()
    assert now == first and now["shapes"][0]["label"] == "cat"
    wide = [{"kind": "box", "label": "x", "points": [0, 0, 999, 5]}]
    outside = client.put(f"/api/images/{image['id']}/annotations", json={"version": now["version"], "shapes": wide})
    assert outside.status_code == 422 and "outside the image" in outside.json()["error"]
    polygon = client.put(f"/api/images/{image['id']}/annotations", json={"version": now["version"], "shapes": [
        {"kind": "polygon", "label": "dog", "points": [[1, 1], [30, 2], [20, 40]]}]})  # fmt: skip
    assert polygon.status_code == 200 and polygon.json()["status"] == "labelled"
    version = polygon.json()["version"]
    crowd = [{"kind": "box", "label": "x", "points": [0, 0, 5, 5]}] * 10_001
    many = [{"kind": "box", "label": f"l{k}", "points": [0, 0, 5, 5]} for k in range(101)]
    for shapes, said in ((crowd, "body.shapes: List should have at most 10000 items"),
                         (many, "shapes: 101 labels new to the data set in one save; at most 100")):  # fmt: skip
        refused = client.put(f"/api/images/{image['id']}/annotations", json={"version": version, "shapes": shapes})
        assert refused.status_code == 422 and refused.json()["error"].startswith(said), refused.text
    assert [label["name"] for label in client.get(f"/api/datasets/{dataset}/labels").json()] == ["cat", "dog"]


def test_labels_are_counted_renamed_merged_and_deleted(client: TestClient) -> None:
    dataset = _dataset(client)
    a, b = _upload(client, dataset, {"a.png": png(seed=1), "b.png": png(seed=2)})["added"]
    _box(client, a, "cat", [1, 1, 10, 10])
    _box(client, b, "kitty", [2, 2, 12, 12])
    labels = {label["name"]: label for label in client.get(f"/api/datasets/{dataset}/labels").json()}
    assert {name: label["count"] for name, label in labels.items()} == {"cat": 1, "kitty": 1}
    both = client.patch(f"/api/labels/{labels['kitty']['id']}", json={"name": "x", "merge_into": labels["cat"]["id"]})
    assert both.status_code == 422 and both.json()["error"] == "give name (rename) or merge_into (merge), not both"
    merged = client.patch(f"/api/labels/{labels['kitty']['id']}", json={"merge_into": labels["cat"]["id"]}).json()
    assert [(label["name"], label["count"]) for label in merged] == [("cat", 2)]
    padded = client.patch(f"/api/labels/{labels['cat']['id']}", json={"name": " feline "})  # as adding one refuses
    assert padded.status_code == 422 and padded.json()["error"].startswith("body.name: String should match pattern")
    assert client.patch(f"/api/labels/{labels['cat']['id']}", json={"name": "feline"}).status_code == 200
    assert client.get(f"/api/images/{b['id']}/annotations").json()["shapes"][0]["label"] == "feline"
    assert client.delete(f"/api/labels/{labels['cat']['id']}").json() == []
    assert client.get(f"/api/images/{a['id']}/annotations").json()["shapes"] == []
    assert {image["status"] for image in client.get(f"/api/datasets/{dataset}/images").json()["items"]} == {
        "unlabelled"
    }


def test_a_save_whose_status_or_class_contradicts_its_shapes_is_refused(client: TestClient) -> None:
    """A status is for what the shapes cannot say (a detection image with none is "nothing here" when labelled);
    an unlabelled image with a box was left out of the VOC, YOLO and PowerAI exports, box and all."""
    dataset = _dataset(client)
    image = _upload(client, dataset, {"a.png": png(seed=1)})["added"][0]
    box = [{"kind": "box", "label": "dog", "points": [1, 1, 5, 5]}]
    url = f"/api/images/{image['id']}/annotations"
    refused = {
        "status unlabelled: the save has 1 shape(s)": {"shapes": box, "status": "unlabelled"},
        "status auto: only an auto-label run gives it": {"shapes": box, "status": "auto"},
        "status reviewed: the image is unlabelled; only auto": {"shapes": box, "status": "reviewed"},
        "class_label: for classification data sets": {"shapes": [], "class_label": "dog"},
        "body.clas_label: Extra inputs are not permitted": {"shapes": box, "clas_label": "dog"},  # a typo: not unsaid
    }
    for said, body in refused.items():
        answer = client.put(url, json={"version": image["version"], **body})
        assert answer.status_code == 422 and answer.json()["error"].startswith(said), answer.text
    not_a_number = "shapes.0.points.list[float].0: Input should be a valid number"
    points = [
        (not_a_number, [{"kind": "box", "label": "dog", "points": [True, 1, 5, 5]}]),  # true is no coordinate
        (not_a_number, [{"kind": "box", "label": "dog", "points": ["1", 1, 5, 5]}]),
        ("polygon 'dog': 10002 points; a polygon has at most 10000",  # a row of megabytes
         [{"kind": "polygon", "label": "dog", "points": [[1, 1], [2, 2], [1, 2]] * 3334}]),
    ]  # fmt: skip
    for said, shapes in points:
        answer = client.put(url, json={"version": image["version"], "shapes": shapes})
        assert answer.status_code == 422 and said in answer.json()["error"], answer.text
    assert client.get(url).json()["version"] == image["version"]  # nothing saved
    for missing, said in (
        (f"/api/datasets/{dataset + 99}", "no data set"),
        ("/api/autolabel/999", "no auto-label run"),
    ):
        answer = client.get(missing)
        assert answer.status_code == 404 and answer.json()["error"].startswith(said), answer.text  # the pages' words
    nothing = client.put(url, json={"version": image["version"], "shapes": [], "status": "labelled"}).json()
    assert nothing["status"] == "labelled" and nothing["shapes"] == []  # "nothing here", as a person says it
    kinds = _dataset(client, "kinds", task="classify")
    photo = _upload(client, kinds, {"b.png": png(seed=2)})["added"][0]
    unclassed = client.put(f"/api/images/{photo['id']}/annotations", json={"version": photo["version"],
                                                                           "status": "labelled"})  # fmt: skip
    assert unclassed.status_code == 422 and "a classification image is labelled by its class" in unclassed.text


@pytest.mark.parametrize("change", ["delete", "rename", "merge"])
def test_an_editor_open_before_a_label_changed_cannot_write_it_back(client: TestClient, change: str) -> None:
    """A page opened on an image before its label was deleted, renamed or merged holds the label as it was: its
    next save is refused (409: the page reloads the image), not written back, which would bring back the shapes
    a delete removed and make the old label again."""
    dataset = _dataset(client)
    image = _upload(client, dataset, {"a.png": png(seed=1)})["added"][0]
    other = _upload(client, dataset, {"b.png": png(seed=2)})["added"][0]
    opened = _box(client, image, "bicycle", [1, 1, 10, 10])  # what the open page holds
    _box(client, other, "car", [2, 2, 12, 12])
    labels = {label["name"]: label["id"] for label in client.get(f"/api/datasets/{dataset}/labels").json()}
    changed = _change_label(client, change, labels["bicycle"], name="bike", into=labels["car"])
    assert changed.status_code == 200, changed.text
    drawn = [*opened["shapes"], {"kind": "box", "label": "bicycle", "points": [5, 5, 30, 30]}]
    stale = client.put(f"/api/images/{image['id']}/annotations", json={"version": opened["version"], "shapes": drawn})
    assert stale.status_code == 409, stale.text
    names = {label["name"] for label in client.get(f"/api/datasets/{dataset}/labels").json()}
    assert "bicycle" not in names
    assert client.get(f"/api/images/{other['id']}/annotations").json()["version"] == 2  # not using it: unchanged


@pytest.mark.parametrize("change", ["delete", "rename", "merge"])
def test_a_label_seen_and_changed_since_is_not_made_again_on_an_image_that_never_used_it(
    client: TestClient, change: str
) -> None:
    """An editor open on an image without the label (its version untouched by the change) saved a new box with the
    label as the page had loaded it: the label came back beside its new name, or after its delete, unsaid. With the
    ids the page saw, such a save is a 409 naming the label; a name the page never saw (typed) is made."""
    dataset = _dataset(client)
    image = _upload(client, dataset, {"a.png": png(seed=1)})["added"][0]
    other = _upload(client, dataset, {"b.png": png(seed=2)})["added"][0]
    _box(client, other, "car", [2, 2, 12, 12])
    _box(client, image, "dog", [3, 3, 13, 13])
    labels = {label["name"]: label["id"] for label in client.get(f"/api/datasets/{dataset}/labels").json()}
    now = client.get(f"/api/images/{image['id']}/annotations").json()
    changed = _change_label(client, change, labels["car"], name="vehicle", into=labels["dog"])
    assert changed.status_code == 200, changed.text
    assert client.get(f"/api/images/{image['id']}/annotations").json()["version"] == now["version"]
    drawn = [*now["shapes"], {"kind": "box", "label": "car", "points": [20, 20, 30, 30]}]
    url = f"/api/images/{image['id']}/annotations"
    refused = client.put(url, json={"version": now["version"], "shapes": drawn, "labels_seen": labels})
    said = {"delete": "deleted", "merge": "merged into 'dog'", "rename": "renamed 'vehicle'"}[change]
    assert refused.status_code == 409 and refused.json()["error"] == (
        f"label 'car' was {said} since this page loaded it: load the labels again"
    )
    assert "car" not in {label["name"] for label in client.get(f"/api/datasets/{dataset}/labels").json()}
    typed = [*now["shapes"], {"kind": "box", "label": "truck", "points": [20, 20, 30, 30]}]
    kept = client.put(url, json={"version": now["version"], "shapes": typed, "labels_seen": {"dog": labels["dog"]}})
    assert kept.status_code == 200 and [s["label"] for s in kept.json()["shapes"]] == ["dog", "truck"], kept.text


def test_a_merged_label_is_followed_to_the_label_its_uses_are_in_now(client: TestClient) -> None:
    dataset = _dataset(client)
    for name in "abc":
        assert client.post(f"/api/datasets/{dataset}/labels", json={"name": name}).status_code == 201
    made = {label["name"]: label["id"] for label in client.get(f"/api/datasets/{dataset}/labels").json()}

    def merges() -> list[tuple[int, int]]:
        listed = client.get(f"/api/datasets/{dataset}").json()["merges"]
        return sorted((merge["label_id"], merge["into_id"]) for merge in listed)

    assert client.patch(f"/api/labels/{made['a']}", json={"merge_into": made["b"]}).is_success
    assert merges() == [(made["a"], made["b"])]
    assert client.patch(f"/api/labels/{made['b']}", json={"merge_into": made["c"]}).is_success
    assert merges() == [(made["a"], made["c"]), (made["b"], made["c"])]  # a's uses are in c now
    image = _upload(client, dataset, {"a.png": png(seed=3)})["added"][0]
    refused = client.put(f"/api/images/{image['id']}/annotations", json={
        "version": image["version"], "shapes": [{"kind": "box", "label": "a", "points": [1, 1, 5, 5]}],
        "labels_seen": {"a": made["a"]}})  # fmt: skip
    assert refused.status_code == 409 and "label 'a' was merged into 'c'" in refused.json()["error"]
    assert client.delete(f"/api/labels/{made['c']}").is_success
    assert merges() == []  # their uses went with c: a and b read as deleted


def _change_label(client: TestClient, change: str, label: int, *, name: str, into: int) -> httpx.Response:
    """Another tab deletes the label, renames it `name` or merges it into the label `into`."""
    if change == "delete":
        return client.delete(f"/api/labels/{label}")
    return client.patch(f"/api/labels/{label}", json={"name": name} if change == "rename" else {"merge_into": into})


def test_the_grid_pages_and_filters(client: TestClient) -> None:
    dataset = _dataset(client)
    added = _upload(client, dataset, {f"{k:02}.png": png(seed=k) for k in range(12)})["added"]
    for image in added[:5]:
        _box(client, image, "dog" if image["id"] % 2 else "cat", [1, 1, 9, 9])
    page = client.get(f"/api/datasets/{dataset}/images?offset=10&limit=5").json()
    assert page["total"] == 12 and [i["original_name"] for i in page["items"]] == ["10.png", "11.png"]
    assert client.get(f"/api/datasets/{dataset}/images?status=unlabelled").json()["total"] == 7
    dogs = sum(1 for image in added[:5] if image["id"] % 2)
    assert client.get(f"/api/datasets/{dataset}/images?label=dog").json()["total"] == dogs
    two = [added[0]["id"], added[1]["id"]]
    moved = client.post(
        f"/api/datasets/{dataset}/images/bulk", json={"image_ids": two, "action": "split", "split": "val"}
    )
    assert moved.json() == {"changed": 2}
    assert client.get(f"/api/datasets/{dataset}/images?split=val").json()["total"] == 2
    gone = client.post(
        f"/api/datasets/{dataset}/images/bulk", json={"image_ids": [added[11]["id"]], "action": "delete"}
    )
    assert gone.json() == {"changed": 1} and client.get(f"/api/images/{added[11]['id']}").status_code == 404
    stale = client.post(f"/api/datasets/{dataset}/images/bulk",
                        json={"image_ids": [added[10]["id"], added[11]["id"]], "action": "delete"})  # fmt: skip
    assert stale.status_code == 422 and stale.json()["error"].startswith(f"image_ids: {added[11]['id']} not in")
    assert client.get(f"/api/images/{added[10]['id']}").status_code == 200  # all or nothing: this one stays
    bad = client.get(f"/api/datasets/{dataset}/images?limit=100000")
    assert bad.status_code == 422 and bad.json()["error"].startswith("query.limit:")


def test_export_to_coco_reads_back_in_pycocotools_and_imports_again(client: TestClient, tmp_path: Path) -> None:
    dataset = _dataset(client)
    images = _upload(client, dataset, {"a.png": png(64, 48, 1), "b.png": png(64, 48, 2), "c.png": png(64, 48, 3)})
    a, b, _unlabelled = images["added"]
    client.post(f"/api/datasets/{dataset}/labels", json={"name": "square"})  # made first, used on the second image
    _box(client, a, "circle", [4, 6, 24, 30])
    _box(client, b, "square", [10.5, 2, 60, 40])
    answer = client.get(f"/api/datasets/{dataset}/export?format=coco")
    assert answer.status_code == 200 and int(answer.headers["content-length"]) == len(answer.content)
    zipped = zipfile.ZipFile(io.BytesIO(answer.content))
    (annotations,) = [name for name in zipped.namelist() if name.endswith("annotations.json")]
    (tmp_path / "coco.json").write_bytes(zipped.read(annotations))
    coco = COCO(str(tmp_path / "coco.json"))
    assert len(coco.getImgIds()) == 3 and sorted(c["name"] for c in coco.loadCats(coco.getCatIds())) == [  # c too
        "circle",
        "square",
    ]
    square = coco.loadAnns(coco.getAnnIds(catIds=coco.getCatIds(catNms=["square"])))[0]
    assert square["bbox"] == pytest.approx([10.5, 2, 49.5, 38])  # COCO's x, y, width, height
    again = _dataset(client, "again")
    imported = client.post(f"/api/datasets/{again}/import", data={"format": "coco"},
                           files={"file": ("export.zip", answer.content)})  # fmt: skip
    assert imported.status_code == 201, imported.text
    assert [i["status"] for i in imported.json()["added"]] == ["labelled", "labelled", "unlabelled"]
    counts = {label["name"]: label["count"] for label in client.get(f"/api/datasets/{again}/labels").json()}
    assert counts == {"circle": 1, "square": 1}
    assert list(counts) == ["square", "circle"]  # in the order made (square first): the editor's keys 1-9 stay
    assert client.get(f"/api/datasets/{dataset}/export?format=nope").status_code == 422


def test_polygons_come_back_as_drawn_from_forklift_and_coco_exports(client: TestClient) -> None:
    """An outline drawn in the editor is a polygon again after its export is imported (forklift's format keeps
    it beside its box, COCO as the object's segmentation); VOC and YOLO hold boxes only."""
    dataset = _dataset(client)
    (image,) = _upload(client, dataset, {"a.png": png(64, 48, 1)})["added"]
    shapes = [{"kind": "polygon", "label": "roof", "points": [[4.5, 6], [30, 2.25], [40, 30], [10, 44]]},
              {"kind": "box", "label": "door", "points": [20, 20, 30, 40]}]  # fmt: skip
    saved = client.put(f"/api/images/{image['id']}/annotations", json={"version": image["version"], "shapes": shapes})
    assert saved.status_code == 200, saved.text
    for format_name in ("forklift", "coco", "yolo"):
        exported = client.get(f"/api/datasets/{dataset}/export?format={format_name}").content
        again = _dataset(client, f"from {format_name}")
        imported = client.post(f"/api/datasets/{again}/import", data={"format": format_name},
                               files={"file": ("export.zip", exported)})  # fmt: skip
        (copy,) = imported.json()["added"]
        found = client.get(f"/api/images/{copy['id']}/annotations").json()["shapes"]
        if format_name == "yolo":  # its bounds only
            bounds = [{"kind": "box", "label": "door", "points": [20, 20, 30, 40]},
                      {"kind": "box", "label": "roof", "points": [4.5, 2.25, 40, 44]}]  # fmt: skip
            assert _drawn(found) == _drawn(bounds)
            continue
        assert _drawn(found) == _drawn(shapes), format_name


def _drawn(shapes: list[dict]) -> list[tuple]:
    """Shapes as (kind, label, their numbers to 3 places), in one order: what a person drew, compared."""

    def numbers(points: list) -> tuple[float, ...]:
        flat = [v for point in points for v in (point if isinstance(point, list) else [point])]
        return tuple(round(float(v), 3) for v in flat)  # YOLO keeps corners as fractions of the image

    return sorted((s["kind"], s["label"], numbers(s["points"])) for s in shapes)


def test_a_zip_import_refuses_unsafe_entries_and_keeps_the_rest(client: TestClient) -> None:
    dataset = _dataset(client)
    archive = zip_of({"ok/one.png": png(seed=1), "two.png": png(seed=2), "../evil.png": png(seed=3),
                      "/abs.png": png(seed=4), "bomb.bin": b"\0" * (30 * 2**20), "notes.txt": b"hello",
                      "": png(seed=5), ".": png(seed=6), "./": png(seed=7)},
                     symlinks=("link.png",))  # fmt: skip
    answer = client.post(f"/api/datasets/{dataset}/import", files={"file": ("batch.zip", archive)})
    assert answer.status_code == 201, answer.text
    result = answer.json()
    assert sorted(i["original_name"] for i in result["added"]) == ["ok/one.png", "two.png"]
    refused = " | ".join(result["refused"])
    for said in ("../evil.png: an absolute path or one that climbs out", "/abs.png: an absolute path",
                 "link.png: a symlink", "bomb.bin: unpacks to", "notes.txt: not an image",
                 "'': not a file's name", "'.': not a file's name", "'./': not a file's name"):  # fmt: skip
        assert said in refused, refused
    for name in ("x.zip", "unpacked"):  # named as the upload was (one named as a folder the import makes too)
        broken = client.post(f"/api/datasets/{dataset}/import", files={"file": (name, b"PK\3\4 broken")})
        assert broken.status_code == 422 and broken.json()["error"].startswith(f"{name}: not a readable zip")
    for format_name, said in (("voc", "no Annotations in it for a voc import"), ("yolo", "no data.yaml in it")):
        wrong = client.post(f"/api/datasets/{dataset}/import", data={"format": format_name},
                            files={"file": ("photos.zip", zip_of({"a.png": png()}))})  # fmt: skip
        assert wrong.status_code == 422 and wrong.json()["error"].startswith(f"photos.zip: {said}")  # not a path


def test_a_set_named_in_other_letters_exports_under_its_name_and_leaves_no_copy(client: TestClient) -> None:
    """A header is Latin-1: the export of "日本 set" was a 500, and each one left a copy of the set in the temporary
    folder (its removal ran only after a sent answer)."""
    dataset = _dataset(client, "日本 set")
    _upload(client, dataset, {"a.png": png()})
    before = set(Path(tempfile.gettempdir()).glob("forklift-export-*"))
    answer = client.get(f"/api/datasets/{dataset}/export?format=forklift")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-disposition"] == (
        "attachment; filename=\"set-forklift.zip\"; filename*=UTF-8''%E6%97%A5%E6%9C%AC-set-forklift.zip"
    )
    assert zipfile.ZipFile(io.BytesIO(answer.content)).namelist()  # a zip, whole
    assert set(Path(tempfile.gettempdir()).glob("forklift-export-*")) <= before


def test_a_zip_bomb_of_many_small_entries_is_refused_whole(client: TestClient) -> None:
    """80 entries of 1 MiB of zeros (80 KB packed): each under the one-entry check's floor, together a bomb (2,000
    of them filled 2 GB of disk from one 2 MB upload)."""
    dataset = _dataset(client)
    archive = zip_of({f"zeros/{k}.png": b"\0" * 2**20 for k in range(80)} | {"a.png": png()})
    answer = client.post(f"/api/datasets/{dataset}/import", files={"file": ("many.zip", archive)})
    assert answer.status_code == 422 and answer.json()["error"].startswith("many.zip: unpacks to 83,"), answer.text
    assert "over 100 times its size (a zip bomb?)" in answer.json()["error"]
    assert client.get(f"/api/datasets/{dataset}/images").json()["total"] == 0


def test_an_image_of_a_forklift_zip_with_a_box_refused_is_left_out_whole(client: TestClient) -> None:
    """Kept without the box, it came in labelled with none: "nothing here", trained on so, beside the object."""
    dataset = _dataset(client)
    entries = [{"file": f"images/{name}.png", "width": 64, "height": 48, "split": "train", "boxes": boxes}
               for name, boxes in (("bad", [{"label": "a", "x1": -5, "y1": 0, "x2": 1000, "y2": 10},
                                            {"label": "a", "x1": 1, "y1": 1, "x2": 9, "y2": 9}]),
                                   ("good", [{"label": "a", "x1": 1, "y1": 1, "x2": 9, "y2": 9}]))]  # fmt: skip
    index = {"format": "forklift-dataset", "version": 1, "task": "detect", "classes": ["a"], "images": entries}
    archive = zip_of({"set/dataset.json": json.dumps(index).encode(), "set/images/bad.png": png(seed=1),
                      "set/images/good.png": png(seed=2)})  # fmt: skip
    answer = client.post(f"/api/datasets/{dataset}/import", data={"format": "forklift"},
                         files={"file": ("set.zip", archive)})  # fmt: skip
    assert answer.status_code == 201, answer.text
    assert [image["original_name"] for image in answer.json()["added"]] == ["good.png"]
    (said,) = answer.json()["refused"]
    assert said.endswith("images[0] boxes[0]: (-5.0, 0.0, 1000.0, 10.0) is not a box inside the 64x48 image; the "
                         "image is left out")  # fmt: skip


def test_a_duplicate_keeps_its_videos_and_each_frames_video_and_time(client: TestClient, tmp_path: Path) -> None:
    """The copy had the frames as plain images: no video beside them, no time, so neither "Copy previous frame"
    nor a capture more, and a time captured before was captured again."""
    dataset = _dataset(client)
    clip = video(tmp_path / "clip.mp4", seconds=2.0, fps=10)
    uploaded = client.post(f"/api/datasets/{dataset}/videos", files={"file": ("clip.mp4", clip.read_bytes())}).json()
    captured = client.post(f"/api/videos/{uploaded['id']}/capture", json={"every_s": 0.5}).json()["added"]
    copy = client.post(f"/api/datasets/{dataset}/duplicate").json()["id"]
    (twin,) = client.get(f"/api/datasets/{copy}/videos").json()
    assert twin["id"] != uploaded["id"] and client.get(twin["file"]).content == clip.read_bytes()
    frames = client.get(f"/api/datasets/{copy}/images").json()["items"]
    assert [(f["video_id"], f["video_time_s"]) for f in frames] == [(twin["id"], f["video_time_s"]) for f in captured]
    again = client.post(f"/api/videos/{twin['id']}/capture", json={"every_s": 0.5}).json()
    assert again["added"] == [] and again["skipped"] == len(captured)  # the copy's frames are its video's
    client.delete(f"/api/datasets/{dataset}")
    assert client.get(frames[1]["file"]).status_code == 200  # the copy's own files


def test_video_frames_are_captured_once_each(client: TestClient, tmp_path: Path) -> None:
    dataset = _dataset(client)
    clip = video(tmp_path / "clip.mp4", seconds=3.0, fps=10)
    uploaded = client.post(f"/api/datasets/{dataset}/videos", files={"file": ("clip.mp4", clip.read_bytes())})
    assert uploaded.status_code == 201, uploaded.text
    facts = uploaded.json()
    assert facts["width"] == 96 and facts["height"] == 64 and facts["duration_s"] == pytest.approx(3.0, abs=0.15)
    every = client.post(f"/api/videos/{facts['id']}/capture", json={"every_s": 1.0}).json()
    times = [image["video_time_s"] for image in every["added"]]
    assert times == [0.0, 1.0, 2.0]  # its last frame starts at 2.9 s: no frame at 3.0
    again = client.post(f"/api/videos/{facts['id']}/capture", json={"at_s": [1.0, 1.5]}).json()
    assert again["skipped"] == 1 and [i["video_time_s"] for i in again["added"]] == [1.5]
    span = client.post(f"/api/videos/{facts['id']}/capture", json={"every_s": 0.5, "from_s": 1.2, "to_s": 2.5})
    assert [i["video_time_s"] for i in span.json()["added"]] == [1.2, 1.7, 2.2]  # a stretch of the video
    span = client.post(f"/api/videos/{facts['id']}/capture", json={"every_s": 0.3, "from_s": 2.2, "to_s": 2.8}).json()
    assert [i["video_time_s"] for i in span["added"]] == [2.5, 2.8] and span["skipped"] == 1  # with 2.8: 2.2 + 0.3 × 2
    # is a hair past it in floating point; 2.2 was captured before
    end = client.post(f"/api/videos/{facts['id']}/capture", json={"every_s": 1.0, "to_s": facts["duration_s"]}).json()
    assert [i["video_time_s"] for i in end["added"]] == [facts["duration_s"]] and end["skipped"] == 3  # its last
    # frame, at the end the form offers as `to` (it was left out, unsaid: 3 already captured, 0 captured)
    for stretch, said in (({"every_s": 0.5, "from_s": 2.0, "to_s": 1.0}, "from_s 2: after to_s 1 "),
                          ({"every_s": 0.5, "from_s": 5.0}, "from_s 5: not before the video's end "),
                          ({"at_s": [1.0], "from_s": 0.5}, "from_s and to_s go with every_s")):  # fmt: skip
        refused = client.post(f"/api/videos/{facts['id']}/capture", json=stretch)
        assert refused.status_code == 422 and refused.json()["error"].startswith(said), refused.text
    times += [1.5, 1.2, 1.7, 2.2, 2.5, 2.8, facts["duration_s"]]
    for every_s, said in ((5e-324, "over 5000 frames"), (1e-4, "over 5000 frames"), (1e308, "less than or equal")):
        odd = client.post(f"/api/videos/{facts['id']}/capture", json={"every_s": every_s})
        assert odd.status_code == 422 and said in odd.json()["error"], odd.text
    frame = client.get(again["added"][0]["file"]).content
    assert frame[:2] == b"\xff\xd8"
    other = _dataset(client, "other")
    for where, status, said in ((dataset, 404, "no video 999"), (other, 422, "not a video of data set 'other'")):
        wrong = client.get(f"/api/datasets/{where}/images?video_id={999 if status == 404 else facts['id']}")
        assert wrong.status_code == status and said in wrong.json()["error"]  # as a label not the set's: said
    first = client.get(f"/api/images/{every['added'][1]['id']}/neighbours").json()
    assert first["previous_frame"] == every["added"][0]["id"]
    corrupt = client.post(f"/api/datasets/{dataset}/videos", files={"file": ("bad.mp4", b"\0\0\0 not a video")})
    assert corrupt.status_code == 422 and corrupt.json()["error"].startswith("bad.mp4: not a video")
    assert str(tmp_path) not in corrupt.json()["error"] and ".partial" not in corrupt.json()["error"]  # no path
    assert client.get(f"/api/datasets/{dataset}/videos").json()[0]["frames"] == len(times)


@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_accounts_sessions_csrf_roles_and_tokens(app_database: str | None, tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    db = fresh_database(app_database, data)
    where = ["--data-dir", str(data), "--db", db]
    assert main(["app", "--host", "0.0.0.0", *where]) == 2  # no admin: refused before listening
    for name, role in (("ana", "admin"), ("vic", "viewer")):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("sys.stdin", io.StringIO("correct horse\n"))
            assert main(["app", "user", "add", name, "--role", role, "--password-stdin", *where]) == 0
    with app_client(data, db, host="0.0.0.0") as client:
        assert client.get("/api/datasets").status_code == 401
        assert client.post("/api/login", json={"name": "ana", "password": "wrong"}).status_code == 401
        nul = client.post("/api/login", json={"name": "a\x00na", "password": "wrong"})  # PostgreSQL refuses a NUL
        assert nul.status_code == 422 and nul.json()["error"].startswith("body.name: String should match"), nul.text
        session = client.post("/api/login", json={"name": "ana", "password": "correct horse"})
        cookie = session.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        csrf = session.json()["csrf"]
        assert client.post("/api/datasets", json={"name": "x"}).status_code == 403  # the cookie alone is not enough
        made = client.post("/api/datasets", json={"name": "x"}, headers={"X-CSRF-Token": csrf})
        assert made.status_code == 201
        client.post("/api/logout")
        client.cookies.clear()
        viewer = client.post("/api/login", json={"name": "vic", "password": "correct horse"}).json()
        assert client.get("/api/datasets").status_code == 200
        refused = client.post("/api/datasets", json={"name": "y"}, headers={"X-CSRF-Token": viewer["csrf"]})
        assert refused.status_code == 403 and "viewer" in refused.json()["error"]
        client.cookies.clear()
    with pytest.MonkeyPatch.context() as patch:
        out = io.StringIO()
        patch.setattr("sys.stdout", out)
        assert main(["app", "token", "add", "script", "--user", "ana", *where]) == 0
        token = out.getvalue().strip()
    with app_client(data, db, host="0.0.0.0") as client:
        scripted = client.post(
            "/api/datasets", json={"name": "by script"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert scripted.status_code == 201  # tokens need no CSRF header: a browser never sends them by itself
        assert client.get("/api/datasets", headers={"Authorization": "Bearer fk_nope"}).status_code == 401


def test_a_restart_migrates_and_keeps_everything(app_database: str | None, tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    db = fresh_database(app_database, data)
    with app_client(data, db) as client:
        dataset = _dataset(client)
        _box(client, _upload(client, dataset, {"a.png": png()})["added"][0], "cat", [1, 1, 9, 9])
    with app_client(data, db) as client:  # upgrade() again on the same database: nothing lost, nothing doubled
        kept = client.get(f"/api/datasets/{dataset}").json()
        assert kept["images"] == 1 and kept["labels"][0]["count"] == 1
        schema = client.get("/openapi.json").json()
        assert "/api/images/{image_id}/annotations" in schema["paths"]
        refused = schema["paths"]["/api/datasets"]["post"]["responses"]["422"]["content"]["application/json"]
        assert refused["schema"]["$ref"] == "#/components/schemas/ErrorOut"  # as errors are sent: status, error
        assert set(schema["components"]["schemas"]["ErrorOut"]["properties"]) == set(
            client.post("/api/datasets", json={"name": ""}).json()
        )
        assert json.loads(json.dumps(schema))["info"]["title"] == "forklift app"


def test_augmented_variants_carry_their_boxes_and_polygons(client: TestClient) -> None:
    dataset = _dataset(client)
    source = _upload(client, dataset, {"a.png": png(160, 120, 5)})["added"][0]
    shapes = [{"kind": "box", "label": "car", "points": [50, 40, 110, 90]},
              {"kind": "polygon", "label": "road", "points": [[60, 50], [100, 52], [80, 85]]}]  # fmt: skip
    client.put(f"/api/images/{source['id']}/annotations", json={"version": 1, "shapes": shapes})
    made = client.post(f"/api/datasets/{dataset}/augment", json={"image_ids": [source["id"]], "variants": 4})
    assert made.status_code == 201, made.text
    variants = made.json()["added"]
    assert len(variants) == 4 and all(v["derived_from"] == source["id"] for v in variants)
    pictures = {client.get(v["file"]).content for v in variants}
    assert len(pictures) == 4  # four different variants
    for variant in variants:
        moved = client.get(f"/api/images/{variant['id']}/annotations").json()["shapes"]
        box = next(s for s in moved if s["kind"] == "box")  # the box is well inside: no operation loses it
        assert 0 <= box["points"][0] < box["points"][2] <= 160 and 0 <= box["points"][1] < box["points"][3] <= 120
    again = client.post(f"/api/datasets/{dataset}/augment", json={"image_ids": [source["id"]], "variants": 1}).json()
    assert client.get(again["added"][0]["file"]).content in pictures  # the same seed makes the same first variant
    bad = client.post(f"/api/datasets/{dataset}/augment", json={"image_ids": [source["id"]], "operations": ["melt"]})
    assert bad.status_code == 422 and bad.json()["error"].startswith("body.operations.0:")


def test_a_16_bit_gray_image_keeps_its_picture_in_its_thumbnail_and_variants(client: TestClient) -> None:
    """A 16-bit gray PNG (a microscope's, a thermal camera's): Pillow's convert("RGB") clipped it at 255, so its
    thumbnail was white and an augmented variant a flat gray, trained on so. Both are scaled as training sees it."""
    gradient = np.tile(np.linspace(0, 65535, 160, dtype=np.uint16), (120, 1))  # black to white, left to right
    encoded = io.BytesIO()
    PILImage.fromarray(gradient).save(encoded, "PNG")
    dataset = _dataset(client)
    (image,) = _upload(client, dataset, {"gray16.png": encoded.getvalue()})["added"]
    with PILImage.open(io.BytesIO(client.get(image["thumbnail"]).content)) as thumbnail:
        small = np.asarray(thumbnail.convert("L"), dtype=np.float32)
    assert abs(small.mean() - 127.5) < 8 and small[:, :10].mean() < 20 and small[:, -10:].mean() > 235
    made = client.post(f"/api/datasets/{dataset}/augment",
                       json={"image_ids": [image["id"]], "variants": 1, "operations": ["blur"]})  # fmt: skip
    assert made.status_code == 201, made.text
    with PILImage.open(io.BytesIO(client.get(made.json()["added"][0]["file"]).content)) as variant:
        pixels = np.asarray(variant.convert("L"), dtype=np.float32)
    assert pixels[:, :10].mean() < 20 and pixels[:, -10:].mean() > 235  # still black to white


@pytest.mark.parametrize("format_name", ["forklift", "voc", "yolo", "powerai"])
@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_every_export_format_imports_back(format_name: str, tmp_path: Path) -> None:
    """On SQLite only: the formats are the same code on either database."""
    with app_client(tmp_path, fresh_database(None, tmp_path)) as client:
        _round_trip(client, format_name)


def _round_trip(client: TestClient, format_name: str) -> None:
    dataset = _dataset(client)
    files = {"a.png": png(64, 48, 1), "b.png": png(64, 48, 2), "c.png": png(64, 48, 3)}
    a, b, _ = _upload(client, dataset, files)["added"]  # c.png: not labelled yet
    client.post(f"/api/datasets/{dataset}/labels", json={"name": "square"})  # made first, used on the second image
    _box(client, a, "circle", [4, 6, 24, 30])
    _box(client, b, "square", [10, 2, 60, 40])
    exported = client.get(f"/api/datasets/{dataset}/export?format={format_name}")
    assert exported.status_code == 200 and int(exported.headers["content-length"]) == len(exported.content)
    if format_name == "forklift":  # the whole set, the image nobody labelled marked so: not trained on as empty
        archive = zipfile.ZipFile(io.BytesIO(exported.content))
        folder = Path(tempfile.mkdtemp())
        archive.extractall(folder)
        (index,) = folder.rglob("dataset.json")
        report = check_dataset(index.parent)
        assert report.findings == [] and [i.original for i in usable_images(report)] == ["a.png", "b.png"]
        assert [i.original for i in report.dataset.images if i.unlabelled] == ["c.png"]
    again = _dataset(client, f"from {format_name}")
    imported = client.post(f"/api/datasets/{again}/import", data={"format": format_name},
                           files={"file": ("export.zip", exported.content)})  # fmt: skip
    assert imported.status_code == 201, imported.text
    counts = {label["name"]: label["count"] for label in client.get(f"/api/datasets/{again}/labels").json()}
    assert counts == {"circle": 1, "square": 1}
    if format_name != "voc":  # VOC has no list of classes, only each image's objects
        assert list(counts) == ["square", "circle"]  # in the order made (square first): the editor's keys 1-9 stay
    labelled = client.get(f"/api/datasets/{again}/images?status=labelled").json()["items"]
    assert sorted(i["original_name"] for i in labelled) == ["a.png", "b.png"]  # the names given, through and back
    if format_name == "forklift":  # the whole set: the image nobody labelled comes back as unlabelled
        unlabelled = client.get(f"/api/datasets/{again}/images?status=unlabelled").json()["items"]
        assert [i["original_name"] for i in unlabelled] == ["c.png"]


def _forklift_zip(task: str, entries: list[dict], files: dict[str, bytes], classes: list[str]) -> bytes:
    """A zip of forklift's layout, as the app's export makes it: one folder of dataset.json and images/."""
    index = {"format": "forklift-dataset", "version": 1, "task": task, "classes": classes, "images": entries}
    return zip_of({"set/dataset.json": json.dumps(index).encode(), **{f"set/{n}": c for n, c in files.items()}})


def test_a_forklift_zip_brings_a_models_unreviewed_labels_back_unreviewed(client: TestClient) -> None:
    """forklift's format is the app's own export: a model's labels no person reviewed (exported with them, marked
    found_by) come back waiting for review with their confidence; the person's are the person's."""
    dataset = _dataset(client)
    model = {"model": "yolo-a", "confidence": 0.42}
    entries = [
        {"file": "images/a.png", "width": 64, "height": 48, "split": "train",
         "boxes": [{"label": "dog", "x1": 1, "y1": 2, "x2": 30, "y2": 40, "found_by": model}]},
        {"file": "images/b.png", "width": 64, "height": 48, "split": "val",
         "boxes": [{"label": "cat", "x1": 5, "y1": 5, "x2": 20, "y2": 20}]},
        {"file": "images/c.png", "width": 64, "height": 48, "split": "train", "boxes": [], "unlabelled": True},
        {"file": "images/e.png", "width": 64, "height": 48, "split": "train", "boxes": []},  # "nothing here"
        {"file": "images/d.png", "width": 64, "height": 48, "split": "train", "boxes": []},  # the file is 32x32
        {"file": "../outside.png", "width": 64, "height": 48, "split": "train", "boxes": []},
    ]  # fmt: skip
    files = {f"images/{n}.png": png(64, 48, seed=k) for k, n in enumerate("abce")} | {"images/d.png": png(32, 32)}
    archive = _forklift_zip("detect", entries, files, ["cat", "dog"])
    answer = client.post(f"/api/datasets/{dataset}/import", data={"format": "forklift"},
                         files={"file": ("export.zip", archive)})  # fmt: skip
    assert answer.status_code == 201, answer.text
    assert [(i["original_name"], i["status"], i["split"]) for i in answer.json()["added"]] == [
        ("a.png", "auto", "train"), ("b.png", "labelled", "val"), ("c.png", "unlabelled", "train"),
        ("e.png", "labelled", "train")]  # fmt: skip
    refused = " | ".join(answer.json()["refused"])
    assert "images/d.png: its labels are for a 64x48 image; the file is 32x32" in refused, refused
    assert "../outside.png: " in refused and "a path inside the data set's folder" in refused, refused
    a, b = answer.json()["added"][:2]
    (auto,) = client.get(f"/api/images/{a['id']}/annotations").json()["shapes"]
    assert (auto["source"], auto["model_id"], auto["confidence"]) == ("auto", None, 0.42)  # no model of that name here
    assert [s["source"] for s in client.get(f"/api/images/{b['id']}/annotations").json()["shapes"]] == ["human"]
    assert [i["image"]["id"] for i in client.get(f"/api/datasets/{dataset}/review").json()["items"]] == [a["id"]]
    assert [label["name"] for label in client.get(f"/api/datasets/{dataset}/labels").json()] == ["cat", "dog"]

    # through COCO (its extra keys): the model's label still the model's, the image nobody labelled still unlabelled
    coco = client.get(f"/api/datasets/{dataset}/export?format=coco&auto=true")
    assert coco.status_code == 200, coco.text
    again = _dataset(client, "through coco")
    answer = client.post(f"/api/datasets/{again}/import", data={"format": "coco"},
                         files={"file": ("coco.zip", coco.content)})  # fmt: skip
    assert answer.status_code == 201, answer.text
    statuses = {i["original_name"]: i["status"] for i in answer.json()["added"]}
    assert statuses == {"a.png": "auto", "b.png": "labelled", "c.png": "unlabelled", "e.png": "unlabelled"}
    (auto,) = client.get(f"/api/images/{answer.json()['added'][0]['id']}/annotations").json()["shapes"]
    assert (auto["source"], auto["confidence"]) == ("auto", 0.42)

    pets = _dataset(client, "pets", task="classify")
    classes = [{"file": "images/a.png", "width": 64, "height": 48, "split": "train", "label": "cat",
                "label_found_by": model}]  # fmt: skip
    answer = client.post(f"/api/datasets/{pets}/import", data={"format": "forklift"},
                         files={"file": ("pets.zip", _forklift_zip("classify", classes, files, ["cat"]))})  # fmt: skip
    (image,) = answer.json()["added"]
    shown = client.get(f"/api/images/{image['id']}/annotations").json()
    assert (image["status"], shown["class_label"], shown["class_confidence"]) == ("auto", "cat", 0.42)
    for into, format_name, archive, said in (
        (dataset, "forklift", _forklift_zip("classify", classes, files, ["cat"]), "a classify data set; 'shapes' is a "
         "detect one"),
        (dataset, "forklift", zip_of({"a.png": png()}), "no dataset.json"),
        (pets, "coco", zip_of({"a.png": png()}), "a classification data set imports images or forklift's format"),
    ):  # fmt: skip
        wrong = client.post(f"/api/datasets/{into}/import", data={"format": format_name},
                            files={"file": ("x.zip", archive)})  # fmt: skip
        assert wrong.status_code == 422 and wrong.json()["error"].startswith(f"x.zip: {said}"), wrong.text


def test_a_classification_set_takes_classes_in_bulk_and_exports_them(client: TestClient) -> None:
    dataset = _dataset(client, "pets", task="classify")
    a, b, c = _upload(client, dataset, {f"{k}.png": png(seed=k) for k in range(3)})["added"]
    given = client.post(f"/api/datasets/{dataset}/images/bulk",
                        json={"image_ids": [a["id"], b["id"]], "action": "class", "class_label": "cat"})  # fmt: skip
    assert given.json() == {"changed": 2}
    one = client.put(f"/api/images/{c['id']}/annotations", json={"version": c["version"], "class_label": "dog"})
    assert one.status_code == 200 and one.json()["class_label"] == "dog"
    counts = {label["name"]: label["count"] for label in client.get(f"/api/datasets/{dataset}/labels").json()}
    assert counts == {"cat": 2, "dog": 1}
    assert client.get(f"/api/datasets/{dataset}/images?label=cat").json()["total"] == 2
    exported = zipfile.ZipFile(io.BytesIO(client.get(f"/api/datasets/{dataset}/export?format=forklift").content))
    index = json.loads(exported.read(next(n for n in exported.namelist() if n.endswith("dataset.json"))))
    assert index["task"] == "classify" and sorted(i["label"] for i in index["images"]) == ["cat", "cat", "dog"]
    refused = client.get(f"/api/datasets/{dataset}/export?format=coco")
    assert (
        refused.status_code == 422
        and "a classification data set exports in forklift's format only (coco holds boxes)" in refused.json()["error"]
    )
    taken = client.post(f"/api/datasets/{dataset}/images/bulk", json={"image_ids": [a["id"]], "action": "unclass"})
    assert taken.json() == {"changed": 1}  # a class given by mistake taken away: unlabelled again
    shown = client.get(f"/api/images/{a['id']}/annotations").json()
    assert (shown["status"], shown["class_label"]) == ("unlabelled", None)
    alone = client.put(f"/api/images/{c['id']}/annotations", json={"version": 2, "class_label": None}).json()
    assert (alone["status"], alone["class_label"]) == ("unlabelled", None)  # the editor's No class
    boxes = _dataset(client, "boxes")
    (box_image,) = _upload(client, boxes, {"d.png": png(seed=9)})["added"]
    wrong = client.post(
        f"/api/datasets/{boxes}/images/bulk", json={"image_ids": [box_image["id"]], "action": "unclass"}
    )
    assert wrong.status_code == 422 and wrong.json()["error"] == "action unclass: for classification data sets"
    dog = {"dog": next(label["id"] for label in client.get(f"/api/datasets/{dataset}/labels").json()
                       if label["name"] == "dog")}  # fmt: skip
    assert client.patch(f"/api/labels/{dog['dog']}", json={"name": "hound"}).status_code == 200  # another tab
    bulk = {"image_ids": [a["id"]], "action": "class", "class_label": "dog", "labels_seen": dog}
    stale = client.post(f"/api/datasets/{dataset}/images/bulk", json=bulk)
    assert stale.status_code == 409 and "label 'dog' was renamed 'hound'" in stale.json()["error"]  # not made again
    assert {label["name"] for label in client.get(f"/api/datasets/{dataset}/labels").json()} == {"cat", "hound"}


def test_a_classification_sets_forklift_export_imports_as_it_was(client: TestClient) -> None:
    """Every image, the one with no class yet too (it was left out), and every class in its order, the unused one
    too (as the page asks for): the app's own copy of the set, imported again, is the set."""
    dataset = _dataset(client, "pets", task="classify")
    a, b, _unclassed = _upload(client, dataset, {f"{k}.png": png(seed=k) for k in range(3)})["added"]
    for name in ("dog", "zebra", "cat"):
        client.post(f"/api/datasets/{dataset}/labels", json={"name": name})
    for image, name in ((a, "cat"), (b, "dog")):
        client.put(f"/api/images/{image['id']}/annotations", json={"version": image["version"], "class_label": name})
    exported = client.get(f"/api/datasets/{dataset}/export?format=forklift&empty_labels=true").content
    again = _dataset(client, "pets again", task="classify")
    imported = client.post(f"/api/datasets/{again}/import", data={"format": "forklift"},
                           files={"file": ("pets.zip", exported)})  # fmt: skip
    assert imported.status_code == 201 and imported.json()["refused"] == [], imported.text
    assert [(i["original_name"], i["status"], i["class_label"]) for i in imported.json()["added"]] == [
        ("0.png", "labelled", "cat"), ("1.png", "labelled", "dog"), ("2.png", "unlabelled", None)]  # fmt: skip
    assert [label["name"] for label in client.get(f"/api/datasets/{again}/labels").json()] == ["dog", "zebra", "cat"]


def test_text_a_column_cannot_keep_is_refused_alike_on_both_databases(client: TestClient, tmp_path: Path) -> None:
    """PostgreSQL refuses text past its column's length or with a NUL; SQLite keeps it: the app refuses it first."""
    dataset = _dataset(client)
    files_before = sum(1 for path in (tmp_path / "app").rglob("*") if path.is_file())
    long_name = "n" * 297 + ".png"
    answer = _upload(client, dataset, {long_name: png(seed=1), "ok.png": png(seed=2)})
    assert [image["original_name"] for image in answer["added"]] == ["ok.png"]
    assert answer["refused"] == [f"images.original_name '{'n' * 40}…': 301 characters, at most 300"]
    assert sum(1 for path in (tmp_path / "app").rglob("*") if path.is_file()) == files_before + 1  # ok.png only
    nul = client.post("/api/datasets", json={"name": "a\x00b"})
    assert nul.status_code == 422 and nul.json()["error"] == "datasets.name 'a\\x00b': has a NUL character"
    image = answer["added"][0]
    label = client.put(f"/api/images/{image['id']}/annotations", json={"version": image["version"], "shapes": [
        {"kind": "box", "label": "a\x00b", "points": [1, 1, 9, 9]}]})  # fmt: skip
    assert label.status_code == 422 and label.json()["error"] == "labels.name 'a\\x00b': has a NUL character"
    assert _box(client, image, "fine", [1, 1, 9, 9])["version"] == image["version"] + 1  # the session goes on
    asked = client.get(f"/api/datasets/{dataset}/images", params={"label": "a\x00b"})
    assert asked.status_code == 422 and "has a NUL character" in asked.json()["error"]
    coco = {"images": [{"id": 1, "file_name": "a.png", "width": 64, "height": 48},
                       {"id": 2, "file_name": "b.png", "width": 64, "height": 48}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 9, 9], "area": 81, "iscrowd": 0},
                            {"id": 2, "image_id": 2, "category_id": 2, "bbox": [1, 1, 9, 9], "area": 81, "iscrowd": 0}],
            "categories": [{"id": 1, "name": "c" * 201}, {"id": 2, "name": "short"}]}  # fmt: skip
    archive = zip_of({"annotations.json": json.dumps(coco).encode(), "a.png": png(seed=3), "b.png": png(seed=4)})
    imported = client.post(f"/api/datasets/{dataset}/import", data={"format": "coco"},
                           files={"file": ("coco.zip", archive)})  # fmt: skip
    assert imported.status_code == 201, imported.text
    assert [i["original_name"] for i in imported.json()["added"]] == ["b.png"]
    assert any("labels.name" in line and "201 characters" in line for line in imported.json()["refused"])
    renamed = client.patch(f"/api/datasets/{dataset}", json={"name": "d" * 200})
    assert renamed.status_code == 200, renamed.text
    copy = client.post(f"/api/datasets/{dataset}/duplicate")
    assert copy.status_code == 201 and copy.json()["name"] == "d" * 193 + " (copy)"


@pytest.mark.parametrize("format_name", ["coco", "forklift", "voc", "yolo", "powerai"])
def test_an_uploads_windows_path_never_becomes_a_climbing_zip_entry(client: TestClient, format_name: str) -> None:
    dataset = _dataset(client)
    image = _upload(client, dataset, {"..\\..\\..\\evil.png": png(seed=5)})["added"][0]
    _box(client, image, "cat", [1, 1, 20, 20])
    exported = client.get(f"/api/datasets/{dataset}/export?format={format_name}")
    assert exported.status_code == 200, exported.text
    names = zipfile.ZipFile(io.BytesIO(exported.content)).namelist()
    assert not any(".." in name or "\\" in name for name in names), names
    assert any(name.endswith("evil.png") for name in names), names  # the name it came with, its last part
