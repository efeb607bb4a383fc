"""The app killed (SIGKILL) in the middle of an upload, or right after a confirmed save of annotations while another
save is on its way, keeps everything it had confirmed, and starts again cleanly."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from app_helpers import as_drawn, fresh_database, png, start_app

from forklift.serve.process import free_port

pytestmark = pytest.mark.slow


def _slow_body(boundary: str, stop: threading.Event) -> Iterator[bytes]:
    """A multipart upload that never finishes: the server is killed while it reads it."""
    yield f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="slow.png"\r\n\r\n'.encode()
    while not stop.wait(0.05):
        yield b"\0" * 65536


def test_a_kill_during_an_upload_loses_nothing_confirmed(tmp_path: Path) -> None:
    data, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_app(data, port)
    try:
        dataset = httpx.post(f"{url}/api/datasets", json={"name": "kept"}).json()["id"]
        added = httpx.post(f"{url}/api/datasets/{dataset}/images", files=[("files", ("a.png", png(seed=1)))]).json()
        image = added["added"][0]
        shapes = [{"kind": "box", "label": "cat", "points": [1, 2, 30, 40]}]
        assert httpx.put(f"{url}/api/images/{image['id']}/annotations",
                         json={"version": 1, "shapes": shapes}).status_code == 200  # fmt: skip
        stop = threading.Event()
        boundary = "forkliftboundary"

        def upload() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server dies under it, as intended
                httpx.post(f"{url}/api/datasets/{dataset}/images", content=_slow_body(boundary, stop), timeout=30,
                           headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip

        uploading = threading.Thread(target=upload)
        uploading.start()
        time.sleep(1.0)  # part of the body is in
        (data / "datasets" / str(dataset) / "images" / "leftover.png.partial").write_bytes(b"half")  # a copy cut off
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        stop.set()
        uploading.join(10)
    finally:
        if server.poll() is None:
            server.kill()
    server = start_app(data, port)
    try:
        page = httpx.get(f"{url}/api/datasets/{dataset}/images").json()
        assert [i["original_name"] for i in page["items"]] == ["a.png"]
        assert as_drawn(httpx.get(f"{url}/api/images/{image['id']}/annotations").json()["shapes"]) == shapes
        assert httpx.get(f"{url}/api/images/{image['id']}/file").content == png(seed=1)
        assert not list(data.rglob("*.partial"))  # swept at start
        again = httpx.post(f"{url}/api/datasets/{dataset}/images", files=[("files", ("b.png", png(seed=2)))])
        assert again.status_code == 201  # and it works as before
    finally:
        server.terminate()
        server.wait(20)


def _shapes(round_: int, image: int) -> list[dict]:
    """A different set of boxes and polygons for each save."""
    k = round_ * 3 + image
    box = {"kind": "box", "label": f"box {k % 4}", "points": [1 + k % 7, 2, 30 + k % 9, 40]}
    polygon = {"kind": "polygon", "label": "outline", "points": [[5, 5], [40 + k % 5, 8], [20, 30 + k % 11]]}
    return [box, polygon][: 1 + k % 2]


def test_a_kill_right_after_confirmed_saves_keeps_them_exactly(app_database: str | None, tmp_path: Path) -> None:
    """Two images saved in turn, each save confirmed (200), while a third is saved over and over from another
    thread; killed right after a confirmed save, restarted on the same data and database: the two read back
    exactly as last confirmed, the third as its last confirmed save or the one on its way when the app died."""
    data, port = tmp_path / "data", free_port()
    data.mkdir()
    db = fresh_database(app_database, data)
    url = f"http://127.0.0.1:{port}"
    server = start_app(data, port, db=db)
    confirmed: dict[int, tuple[int, list[dict]]] = {}  # image id -> (version, shapes) as last confirmed
    on_its_way: list[list[dict]] = []
    try:
        dataset = httpx.post(f"{url}/api/datasets", json={"name": "edits"}).json()["id"]
        files = [("files", (f"{k}.png", png(seed=k))) for k in range(3)]
        first, second, busy = httpx.post(f"{url}/api/datasets/{dataset}/images", files=files).json()["added"]
        stop = threading.Event()

        def keep_saving() -> None:
            version = busy["version"]
            for round_ in range(100_000):
                if stop.is_set():
                    return
                on_its_way.append(_shapes(round_, 2))
                try:
                    answer = httpx.put(f"{url}/api/images/{busy['id']}/annotations",
                                       json={"version": version, "shapes": on_its_way[-1]}, timeout=10)  # fmt: skip
                except httpx.HTTPError:  # the server died under it, as intended
                    return
                assert answer.status_code == 200, answer.text
                version = answer.json()["version"]
                confirmed[busy["id"]] = version, on_its_way[-1]

        saving = threading.Thread(target=keep_saving)
        saving.start()
        versions = {first["id"]: first["version"], second["id"]: second["version"]}
        for round_ in range(15):
            for k, image in enumerate((first, second)):
                shapes = _shapes(round_, k)
                answer = httpx.put(f"{url}/api/images/{image['id']}/annotations",
                                   json={"version": versions[image["id"]], "shapes": shapes})  # fmt: skip
                assert answer.status_code == 200, answer.text
                versions[image["id"]] = answer.json()["version"]
                confirmed[image["id"]] = versions[image["id"]], shapes
        server.send_signal(signal.SIGKILL)  # right after the last confirmed save
        server.wait(10)
        stop.set()
        saving.join(20)
    finally:
        if server.poll() is None:
            server.kill()
    assert len(on_its_way) > 1  # the other thread was saving all along
    server = start_app(data, port, db=db)
    try:
        for image_id, (version, shapes) in confirmed.items():
            now = httpx.get(f"{url}/api/images/{image_id}/annotations").json()
            if image_id == busy["id"]:
                assert (now["version"], as_drawn(now["shapes"])) in [(version, shapes), (version + 1, on_its_way[-1])]
            else:
                assert (now["version"], as_drawn(now["shapes"])) == (version, shapes)
                assert now["status"] == "labelled"
    finally:
        server.terminate()
        server.wait(20)
