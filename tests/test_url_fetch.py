"""`serve --url-timeout` bounds the whole URL fetch, not each read: a slow-dripping image host gets a 504 in time.

A real `forklift serve` process fetches from an image host on loopback that can answer at once, drip one byte
every DRIP_EVERY_S seconds (httpx's per-read timeout never fires on such a host), redirect or send too much.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from helpers import CFGS
from PIL import Image

from forklift.serve.process import ServerProcess

pytestmark = pytest.mark.slow  # real servers, training or full-size reference nets: seconds each

URL_TIMEOUT_S = 1.5
MARGIN_S = 1.0  # event loop, connection set-up and the answer itself
DRIP_EVERY_S = 0.3
DRIP_BYTES = 16  # at most 4.8 s of dripping per request, so a hung fetch cannot hold the test for long
UPLOAD_LIMIT_MB = 0.05  # also the URL size limit: 52,428 bytes


def jpeg(size: int = 96) -> bytes:
    """A small real JPEG, so the fast fetch runs the model rather than failing to decode."""
    out = io.BytesIO()
    Image.new("RGB", (size, size), (200, 60, 30)).save(out, "JPEG")
    return out.getvalue()


class ImageHost(ThreadingHTTPServer):
    """An image host on 127.0.0.1 in a thread: `/fast.jpg`, `/slow.jpg` (a drip), `/moved.jpg`, `/big.jpg`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), DripHandler)
        self.image = jpeg()
        self.stop = threading.Event()
        self.hung_up = threading.Event()  # set when the fetching server closed a drip early
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> ImageHost:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()  # drips end within DRIP_EVERY_S
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=5)


class DripHandler(BaseHTTPRequestHandler):
    server: ImageHost

    def do_GET(self) -> None:
        """Valid headers with the true Content-Length, then the body at the speed the path asks for."""
        image = self.server.image
        if self.path == "/moved.jpg":
            self.send_response(302)
            self.send_header("Location", "/fast.jpg")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = image + bytes(60_000) if self.path == "/big.jpg" else image
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path != "/slow.jpg":
            self.wfile.write(body)
            return
        try:
            for i in range(DRIP_BYTES):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                if self.server.stop.wait(DRIP_EVERY_S):
                    return
        except (BrokenPipeError, ConnectionResetError):
            self.server.hung_up.set()
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # quiet: pytest shows failures, not every request
        pass


@pytest.fixture(scope="module")
def image_host() -> Iterator[ImageHost]:
    with ImageHost() as host:
        yield host


@pytest.fixture(scope="module")
def server(darknet_models, image_host: ImageHost) -> Iterator[ServerProcess]:
    model: Path = darknet_models(CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names")
    with ServerProcess(
        f"{model}=shapes", "--instances", "1", "--max-upload-mb", str(UPLOAD_LIMIT_MB),
        "--url-allow-host", image_host.url.removeprefix("http://"), "--url-timeout", str(URL_TIMEOUT_S),
    ) as running:  # fmt: skip
        yield running
        assert running.stop() == 0


def assert_still_answers(server: ServerProcess, image: bytes) -> None:
    assert httpx.get(f"{server.url}/healthz", timeout=10).json()["status"] == "OK"
    response = httpx.post(f"{server.url}/api/dlapis/shapes", files={"files": ("red.jpg", image)}, timeout=60)
    assert response.status_code == 200 and response.json()["result"] == "success", response.text


@pytest.mark.parametrize(("path", "parameter"), [("/api/dlapis/shapes", "imageUrl"), ("/detect_url", "url")])
def test_slow_drip_gets_504_within_the_limit(
    server: ServerProcess, image_host: ImageHost, path: str, parameter: str
) -> None:
    slow = f"{image_host.url}/slow.jpg"
    image_host.hung_up.clear()
    params = {parameter: slow, "model": "shapes"} if parameter == "url" else {parameter: slow}
    started = time.monotonic()
    response = httpx.get(f"{server.url}{path}", params=params, timeout=30)
    took = time.monotonic() - started
    assert response.status_code == 504, response.text
    body = response.json()
    assert body["status"] == "error" and slow in body["error"] and f"{URL_TIMEOUT_S:g} s" in body["error"], body
    assert URL_TIMEOUT_S - 0.1 <= took < URL_TIMEOUT_S + MARGIN_S, f"504 after {took:.2f} s"
    assert took < DRIP_BYTES * DRIP_EVERY_S - 2  # well before even the capped drip would have ended
    assert image_host.hung_up.wait(2.0), "the server kept reading the drip after its 504"
    assert_still_answers(server, image_host.image)


def test_fast_fetch_within_the_limit_still_works(server: ServerProcess, image_host: ImageHost) -> None:
    started = time.monotonic()
    response = httpx.get(f"{server.url}/api/dlapis/shapes", params={"imageUrl": f"{image_host.url}/fast.jpg"})
    assert response.status_code == 200 and response.json()["result"] == "success", response.text
    assert time.monotonic() - started < URL_TIMEOUT_S + MARGIN_S


@pytest.mark.parametrize(("name", "status", "words"), [("moved", 502, "answered 302"), ("big", 413, "size limit")])
def test_redirects_and_size_limit_still_refused(
    server: ServerProcess, image_host: ImageHost, name: str, status: int, words: str
) -> None:
    url = f"{image_host.url}/{name}.jpg"
    response = httpx.get(f"{server.url}/api/dlapis/shapes", params={"imageUrl": url}, timeout=30)
    assert response.status_code == status and words in response.json()["error"], response.text
    assert_still_answers(server, image_host.image)
