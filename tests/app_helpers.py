"""Helpers for the app's tests: an app over a fresh data directory and database (SQLite, or a database of its own on
a real PostgreSQL server), generated images, zips and videos, a labelled data set and waiting for jobs."""

from __future__ import annotations

import io
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import av
import core_parts
import httpx
import numpy as np
from fastapi.testclient import TestClient
from helpers import CFGS
from PIL import Image
from sqlalchemy import create_engine, text

from forklift.app.config import AppConfig
from forklift.app.database import sqlite_url
from forklift.app.server import create_app
from forklift.cli import main
from forklift.data.dataset import Dataset
from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.serve.process import wait_until_answering
from forklift.shared_data import shared_data_root


def fresh_database(server_url: str | None, data_dir: Path) -> str:
    """SQLite in the data directory, or a new empty database on the PostgreSQL server at `server_url`."""
    if server_url is None:
        return sqlite_url(data_dir)
    name = f"app_{uuid.uuid4().hex[:10]}"
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def start_app(
    data_dir: Path, port: int, *, db: str | None = None, login: bool = False, timeout: float = 60, more: tuple = ()
) -> subprocess.Popen[bytes]:
    """`forklift app` as a process of its own on loopback (with `login`, asking for one; `more`: other options),
    returned once it answers; its output is appended to app-PORT.log beside the data directory (an error quotes it
    when the app dies or does not answer)."""
    log = data_dir.parent / f"app-{port}.log"
    command = [sys.executable, "-m", "forklift.cli", "app", "--data-dir", str(data_dir), "--port", str(port)]
    options = [*(["--db", db] if db else []), *(["--login"] if login else []), *map(str, more)]
    with log.open("ab") as out:
        server = subprocess.Popen([*command, *options], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_answering(f"http://127.0.0.1:{port}/openapi.json", server, log, timeout)
    except ForkliftError:
        server.kill()
        raise
    return server


@contextmanager
def app_client(
    data_dir: Path, db_url: str, *, host: str = "127.0.0.1", jobs_per_device: int = 1, **config: Any
) -> Iterator[TestClient]:
    """A test client of the app; `config`: other AppConfig fields (its limits)."""
    app = create_app(AppConfig(data_dir, db_url, host=host, jobs_per_device=jobs_per_device, **config))
    named = f"[{host}]" if ":" in host else host  # an IPv6 address in brackets
    names = f"http://{named}:8080" if app.state.config.local else "http://testserver"  # the local app's own names
    with TestClient(app, base_url=names) as client:
        yield client
    app.state.engine.dispose()


def png(width: int = 64, height: int = 48, seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def bomb_png() -> bytes:
    """A small PNG whose header claims 30000 x 30000 pixels: decoding it would take gigabytes."""
    buffer = io.BytesIO()
    Image.new("1", (30000, 30000)).save(buffer, "PNG")
    return buffer.getvalue()


def zip_of(entries: dict[str, bytes], *, symlinks: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, content in entries.items():
            info = zipfile.ZipInfo("-", date_time=(2026, 1, 1, 0, 0, 0))
            info.filename, info.compress_type = name, zipfile.ZIP_DEFLATED  # "" too, which writestr cannot name
            with zipped.open(info, "w") as entry:
                entry.write(content)
        for name in symlinks:
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16  # a symlink's mode
            zipped.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def video(
    path: Path, *, seconds: float = 3.0, fps: int = 10, size: tuple[int, int] = (96, 64), codec: str | None = None
) -> Path:
    """A generated video, its container by `path`'s suffix (.mp4, .avi, .mov, .webm...), its frames a bright square
    moving right; `codec` an encoder of PyAV's FFmpeg (default: H.264 when the build has it, else MPEG-4 part 2)."""
    width, height = size
    with av.open(str(path), "w") as container:
        try:
            stream = container.add_stream(codec or "libx264", rate=fps)
        except (av.error.FFmpegError, ValueError):
            if codec:
                raise
            stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for k in range(round(seconds * fps)):
            frame = np.full((height, width, 3), 40, dtype=np.uint8)
            x = int(k * (width - 16) / max(1, seconds * fps - 1))
            frame[20:36, x : x + 16] = 230
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def shapes_dataset(
    client: httpx.Client, folder: Path, count: int, *, labelled: int | None = None
) -> tuple[int, Dataset, list[dict]]:
    """(its id, the generated set, the images as added) of a data set of `count` generated 64 px shapes images
    made through the API, the first `labelled` (default: all) with their true boxes."""
    data = synth_shapes(folder, count, 64, seed=0)
    dataset = client.post("/api/datasets", json={"name": "shapes"}).json()["id"]
    files = [("files", (Path(r.file).name, (data.root / r.file).read_bytes())) for r in data.images]
    added = client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    for image, record in list(zip(added, data.images, strict=True))[:labelled]:
        shapes = [{"kind": "box", "label": b.label, "points": [b.x1, b.y1, b.x2, b.y2]} for b in record.boxes]
        client.put(f"/api/images/{image['id']}/annotations", json={"version": 1, "shapes": shapes})
    return int(dataset), data, added


def wait_for(client: httpx.Client, url: str, done: tuple[str, ...], *, epoch: int = 0, seconds: float = 240) -> dict:
    """The record at `url` (a job or an auto-label run) once its state is one of `done` (a job: at `epoch` or
    later)."""
    deadline = time.monotonic() + seconds
    while True:
        seen = client.get(url).json()
        if seen["state"] in done and seen.get("epoch", 0) >= epoch:
            return dict(seen)
        assert time.monotonic() < deadline, seen
        time.sleep(0.3)


def as_drawn(shapes: list[dict]) -> list[dict]:
    """Shapes as drawn (kind, label, points), without where they came from (source, model, confidence)."""
    return [{key: shape[key] for key in ("kind", "label", "points")} for shape in shapes]


def model_zip(tmp_path: Path, *, cfg: Path | None = None, names: Path | None = None) -> bytes:
    """A zip of a Darknet model directory with seeded random weights, as the registry imports it (default: the
    tests' small 96-pixel detector with COCO's names: what the app does with it does not depend on its size)."""
    darknet = shared_data_root() / "darknet"
    assert main(["models", "new-darknet", "--cfg", str(cfg or CFGS / "tiny-detector.cfg"), "--names",
                 str(names or darknet / "coco.names"), str(tmp_path / "tiny")]) == 0  # fmt: skip
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        for path in (tmp_path / "tiny").iterdir():
            zipped.write(path, f"tiny/{path.name}")
    return buffer.getvalue()


FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # fmt: skip


@contextmanager
def chromium_page(height: int) -> Iterator[tuple[Any, list[str]]]:
    """A page of Debian's Chromium (Playwright) 1280 px wide, and the errors its scripts throw (and what the app's
    Content-Security-Policy refused), collected."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(core_parts.chromium()), args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": height})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
            yield page, errors
        finally:
            browser.close()
