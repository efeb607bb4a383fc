"""A viewer cannot starve the app with job event streams: between events a stream holds neither a database
connection nor a worker thread, it ends when its client goes, and an account has at most MAX_STREAMS open.
A real `forklift app` process and real HTTP clients, on loopback."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from app_helpers import start_app

from forklift.app.routes.jobs import MAX_STREAMS
from forklift.serve.process import free_port

pytestmark = pytest.mark.slow


def _running_job(data: Path, dataset: int, pid: int) -> int:
    """A job the app takes as running (its process is `pid`, whose command line names the job's folder, as a
    training process's does), so that its event stream stays open."""
    with contextlib.closing(sqlite3.connect(data / "app.db")) as db, db:
        cursor = db.execute(
            "INSERT INTO jobs (dataset_id, model, settings, state, device, pid, out_dir, created_by, created_at, "
            "epoch, epochs) VALUES (?, 'yolov3-tiny', '{}', 'running', 'cpu', ?, 'jobs/x', 'local', '2026-01-01', "
            "0, 3)",
            (dataset, pid),
        )
        return int(cursor.lastrowid or 0)


def test_event_streams_are_bounded_and_hold_nothing_between_events(tmp_path: Path) -> None:
    data, port = tmp_path / "app", free_port()
    server = start_app(data, port)
    url = f"http://127.0.0.1:{port}"
    training = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "jobs/x/"])
    try:
        dataset = httpx.post(f"{url}/api/datasets", json={"name": "streams"}).json()["id"]
        job = _running_job(data, dataset, training.pid)
        with contextlib.ExitStack() as streams:
            clients = [streams.enter_context(httpx.Client(base_url=url, timeout=10)) for _ in range(MAX_STREAMS)]
            opened = [streams.enter_context(c.stream("GET", f"/api/jobs/{job}/events")) for c in clients]
            assert all(r.status_code == 200 for r in opened)
            lines = opened[0].iter_lines()  # kept: an iterator dropped part-way closes its response
            assert next(lines).startswith("event: state")
            over = httpx.get(f"{url}/api/jobs/{job}/events", timeout=10)
            assert over.status_code == 429 and "close one first" in over.json()["error"]
            started = time.monotonic()
            for _ in range(30):  # the app answers everyone else meanwhile
                assert httpx.get(f"{url}/api/datasets", timeout=5).status_code == 200
            assert time.monotonic() - started < 15
        deadline = time.monotonic() + 10  # the clients went: their streams end and count no more
        while True:
            with (
                httpx.Client(base_url=url, timeout=10) as client,
                client.stream("GET", f"/api/jobs/{job}/events") as again,
            ):
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "streams of clients that left still count"
            time.sleep(0.5)
    finally:
        training.kill()
        training.wait()
        server.terminate()
        server.wait(20)
