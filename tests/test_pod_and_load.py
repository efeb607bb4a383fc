"""`forklift pod` behind a real NGINX, and the load tools `post` and `sweep` against real servers."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cv2
import httpx
import numpy as np
import psutil
import pytest
from core_parts import nginx
from helpers import CFGS, Server, forklift, free_port, shared

from forklift.serve.pod import state_dir
from forklift.serve.recommendation import load_recommendation

pytestmark = pytest.mark.slow  # real servers, training or full-size reference nets: seconds each


@pytest.fixture(scope="module")
def model(darknet_models) -> Path:
    return darknet_models(CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names")


def _served(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    line = next((x for x in text.splitlines() if x.startswith('forklift_requests_total{code="200"')), None)
    return float(line.split()[-1]) if line else 0.0


def _listening(port: int) -> set[str]:
    """The addresses a socket listens on at `port`, as the kernel has them."""
    return {
        c.laddr.ip for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


def test_pod_behind_nginx(model: Path) -> None:
    nginx()
    port = free_port()
    started = forklift("pod", model, "-n", "2", "--port", port)
    try:
        assert f"behind NGINX on 127.0.0.1:{port}" in started.stdout
        assert _listening(port) == {"127.0.0.1"}  # loopback unless --host says otherwise, as serve and app
        dog = shared("images/dog.jpg")
        result = json.loads(forklift("post", dog, "24", "--url", f"http://127.0.0.1:{port}/", "--concurrency", "4",
                                     "--json").stdout)  # fmt: skip
        assert result["ok"] == 24 and result["errors"] == 0
        counts = [_served(port + 1), _served(port + 2)]  # the instances' own ports stay reachable
        assert sum(counts) == 24 and min(counts) >= 4  # least_conn spread the load over both
        again = forklift("pod", model, "-n", "2", "--port", port, check=False)
        assert again.returncode == 2 and "already runs" in again.stderr
    finally:
        stopped = forklift("pod", "stop", "--port", port)
    assert "stopped the pod" in stopped.stdout
    for p in (port, port + 1, port + 2):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{p}/healthz", timeout=2)
    missing = forklift("pod", "stop", "--port", port, check=False)
    assert missing.returncode == 2 and "no pod runs" in missing.stderr


def test_a_pod_on_every_address_answers_both_families(model: Path) -> None:
    """`--host ::` is NGINX on [::] with ipv6only=off: one socket that takes IPv4 and IPv6 (uvicorn's `::` takes
    IPv6 only, so an IPv4 client was refused)."""
    nginx()
    port = free_port()
    forklift("pod", model, "-n", "1", "--port", port, "--host", "::")
    try:
        assert _listening(port) == {"::"}
        for url in (f"http://127.0.0.1:{port}", f"http://[::1]:{port}"):
            assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200, url
    finally:
        forklift("pod", "stop", "--port", port)


def test_a_pod_passes_a_stream_on_and_its_instances_answer_a_body_too_big(tmp_path: Path) -> None:
    """NGINX answered /stream/MODEL's WebSocket upgrade with 404 (it dropped the Upgrade header), and a body over
    20 MB with its own HTML 413, where the instances answer in JSON and name the option that sets the limit."""
    nginx()
    forklift("models", "new-style", tmp_path / "style", "--width", "0.25", "--seed", "0")
    clip = tmp_path / "clip.mp4"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"mp4v"), 10, (96, 64))
    for k in range(6):
        writer.write(np.full((64, 96, 3), 40 * k, np.uint8))
    writer.release()
    port = free_port()
    forklift("pod", tmp_path / "style", "-n", "1", "--port", port)
    try:
        streamed = forklift(
            "stream", "--model", "style", "--video", clip, "--url", f"http://127.0.0.1:{port}", "--json"
        )
        report = json.loads(streamed.stdout)
        assert report["answered"] >= 1 and report["errors"] == [], report
        big = httpx.post(f"http://127.0.0.1:{port}/predict/style", files={"imagefile": ("big.jpg", bytes(21 << 20))},
                         timeout=60)  # fmt: skip
        assert big.status_code == 413 and "--max-upload-mb" in big.json()["error"], big.text[:200]
    finally:
        forklift("pod", "stop", "--port", port)


def test_post_reports_percentiles_and_errors(model: Path) -> None:
    server = Server(f"{model}=shapes", "--instances", "1")
    try:
        dog = shared("images/dog.jpg")
        text = forklift("post", dog, "10", "--url", f"{server.url}/predict/shapes").stdout
        assert "10 requests, 1 in flight" in text and "p99" in text and "errors: 0" in text
        bad = forklift("post", dog, "5", "--url", f"{server.url}/predict/nope", "--json", check=False)
        assert bad.returncode == 1 and json.loads(bad.stdout)["error_codes"] == {"404": 5}
        unanswered = forklift("post", dog, "3", "--url", f"{server.url}/predict/nope", check=False).stdout
        assert "latency: none measured (no request was answered with 200)" in unanswered and "p50" not in unanswered
    finally:
        server.stop()
    for args, said in (  # refused before the first request (each was a run of errors: UnsupportedProtocol, 400)
        ([dog, "5", "--url", "notaurl"], "--url notaurl: not an http(s) URL"),
        ([shared("darknet/coco.names"), "5"], "coco.names: not an image (JPEG, PNG"),
        ([f"{dog},", "5"], "holds an empty image name (a comma too many?)"),  # it named the folder '.'
    ):
        refused = forklift("post", *args, check=False)
        assert refused.returncode == 2 and said in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    nobody = forklift("post", dog, "3", "--url", f"http://127.0.0.1:{free_port()}/", check=False)  # nothing there
    assert nobody.returncode == 2 and nobody.stderr.strip().endswith("cannot connect (3 tries): is a server "
                                                                     "listening there?"), nobody.stderr  # fmt: skip
    assert "requests/s" not in nobody.stdout


def test_sweep_writes_results_and_serve_auto_uses_them(model: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the saved recommendation goes here
    env = dict(os.environ)
    out = tmp_path / "sweep"
    result = forklift("sweep", model, "--image", shared("images/dog.jpg"), "--instances", "1,2", "--threads", "1",
                      "--concurrency", "1,2", "--requests", "12", "--out", out, env=env)  # fmt: skip
    assert "recommended:" in result.stdout
    with (out / "sweep.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["instances"], r["concurrency"]) for r in rows} == {("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")}
    assert all(float(r["throughput"]) > 0 and r["errors"] == "0" for r in rows)
    for plot in ("sweep-throughput.png", "sweep-p99.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = max(rows, key=lambda r: float(r["throughput"]))
    saved = load_recommendation(model)
    assert saved is not None and saved.instances == int(best["instances"])
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "forklift.cli", "serve", str(model), "--port", str(port)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    try:
        first = serve.stdout.readline()
        assert first.startswith(f"layout from the saved sweep: {saved.instances} instances")
    finally:
        serve.terminate()
        serve.wait(timeout=60)


@pytest.mark.parametrize("verb", ["sweep", "pod"])
def test_sigterm_while_servers_start_stops_them(model: Path, tmp_path: Path, verb: str) -> None:
    """`kill` (SIGTERM) on a sweep or on a pod starting ended the command alone: its servers went on serving,
    adopted by init, holding their ports."""
    if verb == "pod":
        nginx()
    port = free_port()
    args = {"sweep": ["sweep", model, "--instances", "1", "--threads", "1", "--concurrency", "1", "--requests", "400",
                      "--out", tmp_path / "sweep"],
            "pod": ["pod", model, "-n", "2", "--port", str(port)]}[verb]  # fmt: skip
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = subprocess.Popen([sys.executable, "-m", "forklift.cli", *map(str, args)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    parent = psutil.Process(command.pid)
    deadline = time.monotonic() + 60
    while not parent.children(recursive=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    servers = parent.children(recursive=True)
    assert servers, "no server was started"
    command.terminate()
    assert command.wait(timeout=90) != 0
    _, alive = psutil.wait_procs(servers, timeout=30)
    assert not alive, [server.cmdline() for server in alive]
    assert not (state_dir(port) / "pod.json").exists()
