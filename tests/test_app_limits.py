"""Upload limits: a request past its route's limit is refused with a 413 while it arrives (by its Content-Length,
or by counting a chunked body: a real server answers before the body ends), a file past its own limit is refused
by name, and a request with more files than a multipart form may carry says how many it may. On SQLite only: the
limits are the same code on either database."""

from __future__ import annotations

import contextlib
import io
import json
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from app_helpers import app_client, fresh_database, png, zip_of
from fastapi.testclient import TestClient
from PIL import Image as PILImage

from forklift.app.config import AppConfig
from forklift.app.database import sqlite_url
from forklift.app.limits import MAX_FILES
from forklift.app.security import COOKIE
from forklift.app.server import create_app
from forklift.serve.http_protocol import HEAD_TIMEOUT_S, MAX_HEAD_BYTES, http_config
from forklift.serve.process import free_port

LIMITS = {"max_image_bytes": 20_000, "max_video_bytes": 200_000, "max_zip_bytes": 300_000,
          "max_batch_bytes": 100_000, "max_json_bytes": 50_000}  # fmt: skip


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with app_client(tmp_path, fresh_database(None, tmp_path), **LIMITS) as made:
        yield made


def _dataset(client: TestClient) -> int:
    return int(client.post("/api/datasets", json={"name": "limits"}).json()["id"])


def test_a_video_past_its_limit_is_refused_by_the_request_or_by_name(client: TestClient) -> None:
    dataset = _dataset(client)
    whole = client.post(f"/api/datasets/{dataset}/videos", files={"file": ("long.mp4", b"\0" * 400_000)})
    assert whole.status_code == 413
    assert whole.json()["error"] == (f"POST /api/datasets/{dataset}/videos: the request's body is larger than the "
                                     f"limit of 200,000 bytes for a video")  # fmt: skip
    just = client.post(f"/api/datasets/{dataset}/videos", files={"file": ("just.mp4", b"\0" * 200_001)})
    assert just.status_code == 413 and just.json()["error"] == "just.mp4: larger than the upload limit of 200,000 bytes"
    assert client.get(f"/api/datasets/{dataset}/videos").json() == []


def test_a_video_of_frames_past_an_images_pixel_limit_is_refused_by_name(client: TestClient) -> None:
    """A 66-byte GIF whose screen is 16000 x 16000: each frame decodes to 256 M pixels (4 GB to capture one from),
    past the 100 M an image upload may have. Refused from the header, before a frame is decoded."""
    frames = [PILImage.new("P", (2, 2), k) for k in range(2)]
    encoded = io.BytesIO()
    frames[0].save(encoded, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    gif = bytearray(encoded.getvalue())
    gif[6:10] = struct.pack("<HH", 16000, 16000)  # the logical screen, which FFmpeg decodes each frame onto
    dataset = _dataset(client)
    answer = client.post(f"/api/datasets/{dataset}/videos", files={"file": ("huge.gif", bytes(gif))})
    assert answer.status_code == 422 and answer.json()["error"] == (
        "huge.gif: its frames are 16000x16000 pixels, more than 100,000,000 (the most an image may have)"
    )
    assert client.get(f"/api/datasets/{dataset}/videos").json() == []


def test_a_zip_past_its_limit_is_refused_by_the_request_or_by_name(client: TestClient) -> None:
    dataset = _dataset(client)
    big = zip_of({f"{k}.png": png(64, 64, k) for k in range(40)})  # random pixels: stored about as large
    assert len(big) > 300_000
    whole = client.post(f"/api/datasets/{dataset}/import", files={"file": ("big.zip", big)})
    assert whole.status_code == 413 and whole.json()["error"].endswith("limit of 300,000 bytes for a zip to import")
    just = client.post(f"/api/datasets/{dataset}/import", files={"file": ("just.zip", big[:300_100])})
    assert just.status_code == 413 and just.json()["error"] == "just.zip: larger than the upload limit of 300,000 bytes"
    model = client.post("/api/models/import", files={"file": ("model.zip", big)})
    assert model.status_code == 413 and model.json()["error"].endswith("limit of 300,000 bytes for a model's zip")


def test_images_past_their_limit_and_a_batch_past_its_limit(client: TestClient) -> None:
    dataset = _dataset(client)
    large = png(100, 80, 1)  # about 24 kB of random pixels
    assert len(large) > 20_000
    some = client.post(f"/api/datasets/{dataset}/images", files=[("files", ("small.png", png(8, 8))),
                                                                  ("files", ("large.png", large))])  # fmt: skip
    assert some.status_code == 201
    assert [i["original_name"] for i in some.json()["added"]] == ["small.png"]
    assert some.json()["refused"] == ["large.png: larger than the upload limit of 20,000 bytes"]
    many = [("files", (f"{k}.png", png(64, 48, k))) for k in range(12)]  # each under 20 kB, all over 100 kB
    batch = client.post(f"/api/datasets/{dataset}/images", files=many)
    assert batch.status_code == 413
    assert batch.json()["error"].endswith("limit of 100,000 bytes for an image upload (all its files)")
    assert client.get(f"/api/datasets/{dataset}").json()["images"] == 1


def test_a_json_body_past_its_limit_is_refused(client: TestClient) -> None:
    dataset = _dataset(client)
    image = client.post(f"/api/datasets/{dataset}/images", files={"files": ("a.png", png())}).json()["added"][0]
    shapes = [{"kind": "box", "label": f"label {k}", "points": [1, 1, 9, 9]} for k in range(2000)]
    answer = client.put(f"/api/images/{image['id']}/annotations", json={"version": 1, "shapes": shapes})
    assert answer.status_code == 413 and answer.json()["error"].endswith("limit of 50,000 bytes for a request")


def test_an_upload_without_credentials_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Served beyond loopback, an upload with neither a token this app issued nor a signed session cookie gets a
    401 before its body is parsed (so nobody unknown makes the server spool files): a malformed form says 401, not
    400, and a made-up bearer token is no credential either."""
    with app_client(tmp_path, fresh_database(None, tmp_path), host="0.0.0.0") as client:
        malformed = {"Content-Type": "multipart/form-data; boundary=x"}
        for cookies in ({}, {COOKIE: "forged.value.signature"}):
            client.cookies.clear()
            client.cookies.update(cookies)
            answer = client.post("/api/datasets/1/images", content=b"--x\r\nnot a part", headers=malformed)
            assert answer.status_code == 401 and answer.json()["error"].startswith("log in first"), answer.text
        client.cookies.clear()
        spooled = len(list(tmp_path.rglob("*")))
        made_up = {**malformed, "Authorization": "Bearer made-up"}
        answer = client.post("/api/datasets/1/images", content=b"--x\r\n" + b"\0" * (1 << 20), headers=made_up)
        assert answer.status_code == 401 and answer.json()["error"].startswith("log in first"), answer.text
        assert len(list(tmp_path.rglob("*"))) == spooled  # nothing written for it


def test_more_files_than_a_request_may_carry_are_refused_saying_how_many(tmp_path: Path) -> None:
    with app_client(tmp_path, fresh_database(None, tmp_path)) as client:  # the default limits
        dataset = _dataset(client)
        tiny = png(2, 2)
        files = [("files", (f"{k}.png", tiny)) for k in range(MAX_FILES + 1)]
        answer = client.post(f"/api/datasets/{dataset}/images", files=files)
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"] == (f"POST /api/datasets/{dataset}/images: more than 1000 files in one "
                                          f"request; send at most 1000 at a time")  # fmt: skip
        assert client.get(f"/api/datasets/{dataset}").json()["images"] == 0


def test_an_unreadable_form_or_a_text_field_for_a_file_says_what_is_wrong(tmp_path: Path) -> None:
    with app_client(tmp_path, fresh_database(None, tmp_path)) as client:
        dataset = _dataset(client)
        long_name = [("files", ("a" * 5000 + ".png", png(2, 2), "image/png"))]  # its part's header line is too long
        answer = client.post(f"/api/datasets/{dataset}/images", files=long_name)
        assert answer.status_code == 400 and answer.json()["error"].startswith(
            f"POST /api/datasets/{dataset}/images: the multipart form could not be read"), answer.text  # fmt: skip
        assert "header lines is over 4,224 bytes" in answer.json()["error"]
        text = client.post(f"/api/datasets/{dataset}/images", data={"files": "a.png"})
        assert text.status_code == 422 and text.json()["error"] == (
            "body.files.0: a file is expected here (a part with a file name), not a text field")  # fmt: skip
        assert client.get(f"/api/datasets/{dataset}").json()["images"] == 0


@contextmanager
def _served(data: Path, *, head_timeout_s: float = HEAD_TIMEOUT_S) -> Iterator[int]:
    """The app with LIMITS under uvicorn in a thread, as `forklift app` serves it; yields its port."""
    port = free_port()
    app = create_app(AppConfig(data, sqlite_url(data), **LIMITS))
    server = uvicorn.Server(http_config(app, host="127.0.0.1", port=port, head_timeout_s=head_timeout_s,
                                        log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_chunked_upload_is_refused_while_it_arrives(tmp_path: Path) -> None:
    """A body with no Content-Length is counted as it comes: the 413 comes back once the limit is passed, while the
    body is still being sent (it is never ended here)."""
    with _served(tmp_path) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(b"POST /api/datasets/1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                           b"Content-Type: multipart/form-data; boundary=cut\r\n\r\n")  # fmt: skip
        head = b'--cut\r\nContent-Disposition: form-data; name="file"; filename="endless.mp4"\r\n\r\n'
        connection.sendall(b"%x\r\n%s\r\n" % (len(head), head))
        sent, chunk = 0, b"\0" * 16_384
        while not select.select([connection], [], [], 0.01)[0]:  # the server reads as it is sent
            assert sent < 2_000_000, "no answer after ten times the limit"
            connection.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        answer = connection.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 413"), answer
    assert "the request's body is larger than the limit of 200,000 bytes for a video" in answer
    assert 200_000 - 65_536 < sent < 600_000


def test_a_large_jpeg_is_checked_and_thumbnailed_without_decoding_it_whole(tmp_path: Path) -> None:
    """A 48-megapixel JPEG (144 MiB of pixels decoded whole) is checked and thumbnailed at a reduced scale: the
    process's peak memory grows by a fraction of that. In a fresh process, so that the peak is this one's."""
    big = tmp_path / "big.jpg"
    PILImage.new("RGB", (8000, 6000), (90, 140, 200)).save(big, "JPEG", quality=80)
    script = f"""
import sys
from pathlib import Path
from forklift.app.storage import Storage, check_image
def peak():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) // 1024
before = peak()
kind, width, height = check_image(Path({str(big)!r}), "big.jpg")
storage = Storage(Path({str(tmp_path)!r}))
thumb = storage.thumbnail("big.jpg", 1, 1)
print(kind, width, height, peak() - before)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    kind, width, height, grown = result.stdout.split()
    assert (kind, width, height) == ("JPEG", "8000", "6000")
    assert int(grown) < 40, f"peak memory grew by {grown} MiB"  # whole: 144 MiB of pixels, twice over
    assert PILImage.open(tmp_path / "datasets" / "1" / "thumbs" / "1.jpg").size == (256, 192)


@contextmanager
def _small_disk(folder: Path, megabytes: int) -> Iterator[Path]:
    """A tmpfs of `megabytes` mounted at `folder` (the tests run as root, as .ci/run does)."""
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def test_a_full_disk_is_a_507_that_leaves_nothing_half_written(tmp_path: Path) -> None:
    big = png(1200, 1000)  # random pixels: about 3.6 MB, more than the disk has
    with _small_disk(tmp_path / "data", 2) as data, app_client(data, sqlite_url(tmp_path)) as client:
        dataset = _dataset(client)
        uploads = {f"/api/datasets/{dataset}/images": {"files": ("big.png", big)},
                   f"/api/datasets/{dataset}/import": {"file": ("big.zip", zip_of({"big.png": big}))}}  # fmt: skip
        for route, files in uploads.items():
            full = client.post(route, files=files)
            assert full.status_code == 507, full.text
            assert full.json()["error"].startswith(f"POST {route}: no space left on the server's disk")
            assert [p.name for p in data.rglob("*") if p.is_file() and p.suffix not in (".key",)] == []
        assert client.get(f"/api/datasets/{dataset}").json()["images"] == 0
        small = client.post(f"/api/datasets/{dataset}/images", files={"files": ("small.png", png())})
        assert small.status_code == 201 and len(small.json()["added"]) == 1  # the space freed is used again


def _answer(port: int, request: bytes) -> bytes:
    """What the server sends back to `request` on a connection of its own, until it closes it; the request is sent
    in pieces until the server answers (it may answer before the request ends)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        answer = b""
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # the rest, unread, resets the connection
            for start in range(0, len(request), 16_384):
                if select.select([connection], [], [], 0.001)[0]:
                    break
                connection.sendall(request[start : start + 16_384])
            while chunk := connection.recv(65536):
                answer += chunk
        return answer


@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_oversized_heads_are_refused_and_slow_clients_cut_off(tmp_path: Path) -> None:
    """A 16 MiB header, 100,000 header lines and a head a little over MAX_HEAD_BYTES get a 400 in JSON (at most
    MAX_HEAD_BYTES is read of a head; the last came whole, and was taken); a client that sends half a head, or half a
    body, and then nothing is disconnected (the head's deadline, the body's idle time), and the server goes on
    answering."""
    with _served(tmp_path, head_timeout_s=1.0) as port:
        get = b"GET /api/datasets HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        big = b"X-Big: " + b"a" * 16 * 2**20 + b"\r\n"
        for head in (get + big + b"\r\n", get + b"X-A: b\r\n" * 100_000 + b"\r\n", get + big[:66_000] + b"\r\n\r\n"):
            assert len(head) > MAX_HEAD_BYTES
            answer = _answer(port, head)
            assert answer.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in answer.lower()
            assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"].startswith("the request's head is")
        just = get + b"X-Big: " + b"a" * (MAX_HEAD_BYTES - len(get) - 11) + b"\r\n\r\n"
        assert len(just) == MAX_HEAD_BYTES and _answer(port, just).startswith(b"HTTP/1.1 200 ")
        with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
            slow.sendall(b"GET /api/datasets HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and the rest never comes
            started = time.monotonic()
            assert slow.recv(100) == b"" and 0.9 < time.monotonic() - started < 5
        answer = _answer(port, b"GET /api/datasets HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"[]")
