"""The app killed (SIGKILL) in the middle of an upload keeps everything it had confirmed, and starts again cleanly."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from app_helpers import as_drawn, png, start_app

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
