"""The forklift-serve image, built here from Debian's packages without any registry (deploy/images/build.sh, what
`make images` runs): labelled, unprivileged, without PyTorch, saved as an OCI archive; run as `forklift plan --emit
podman` starts an instance (pinned with --cpuset-cpus/--cpuset-mems, the model directory mounted read-only), it
answers a request through a published port as the host's own `forklift serve` does, and its health check passes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from core_parts import image_builders
from helpers import Server, forklift, shared
from image_build import LOG, built

from forklift import __version__
from forklift.deployment.kubernetes import SERVE_IMAGE

# a Debian root filesystem and an image: about two minutes, in the background; the test runs last (conftest)
pytestmark = [pytest.mark.slow, pytest.mark.images]
ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "build" / "images" / "forklift-serve.oci.tar"
CONF = {"CONTAINERS_CONF": str(ROOT / "deploy" / "images" / "containers.conf")}


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120, check=check,
                          env=os.environ | CONF)  # fmt: skip


@pytest.fixture(scope="module")
def serve_image(request: pytest.FixtureRequest) -> str:
    """The image the session's background build made (started again here when the session did not start it)."""
    image_builders()
    assert built(request.config, timeout=1200) == 0, LOG.read_text()[-3000:]
    return SERVE_IMAGE


def test_the_archive_is_labelled_unprivileged_and_slim(serve_image: str) -> None:
    inspected = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"oci-archive:{ARCHIVE}"],
                                          capture_output=True, text=True, check=True).stdout)  # fmt: skip
    config = inspected["config"]
    assert config["Labels"]["org.opencontainers.image.version"] == __version__
    assert config["Labels"]["io.forklift.source-digest"].startswith("sha256:")
    assert config["User"] == "1000" and config["Entrypoint"] == ["forklift"]
    healthcheck = json.loads(_podman("image", "inspect", serve_image).stdout)[0]["Healthcheck"]
    assert healthcheck["Test"][-2:] == ["/healthz", "5000"]
    probe = "import importlib.util as u; print([m for m in ('torch', 'fastapi', 'optuna') if u.find_spec(m)])"
    found = _podman("run", "--rm", "--network=none", "--entrypoint", "python3", serve_image, "-c", probe)
    assert found.stdout.strip() == "[]"


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def container(serve_image: str, exported_detector: Path) -> Iterator[tuple[str, int]]:
    """The first instance of this machine's plan, started as `plan --emit podman` writes it, its port published
    on loopback instead of through the pod's NGINX (whose image no registry here can give)."""
    script = forklift("plan", "--instances", "1", "--emit", "podman", "--model", exported_detector).stdout
    [line] = [line for line in script.splitlines() if line.startswith("podman run") and "--name forklift-0" in line]
    assert "--cpuset-cpus=" in line and "--cpuset-mems=" in line and ":/model:ro" in line
    words = shlex.split(line.replace('"$MODEL_DIR"', shlex.quote(str(exported_detector))))
    port = int(words[words.index("--port") + 1])
    name = f"forklift-test-{uuid.uuid4().hex[:8]}"
    pod = words.index("--pod")
    words[pod : pod + 2] = ["-p", f"127.0.0.1:{port}:{port}", "--health-interval=disable"]
    words[words.index("--name") + 1] = name
    started = _podman(*words[1:], check=False)
    assert started.returncode == 0, started.stderr
    try:
        yield name, port
    finally:
        _podman("rm", "--force", "--time", "5", name, check=False)


def test_the_image_serves_as_the_host_does(container: tuple[str, int], exported_detector: Path) -> None:
    name, port = container
    deadline = time.monotonic() + 120
    while not _answers(f"http://127.0.0.1:{port}/healthz"):
        running = _podman("inspect", "--format", "{{.State.Running}}", name, check=False).stdout.strip() == "true"
        assert running and time.monotonic() < deadline, _podman("logs", name, check=False).stderr[-2000:]
        time.sleep(0.5)
    photo = shared("images/dog.jpg").read_bytes()
    headers = {"content-type": "image/jpeg"}
    served = httpx.post(f"http://127.0.0.1:{port}/", content=photo, headers=headers, timeout=60)
    assert served.status_code == 200, served.text
    with Server(exported_detector, "--instances", "1") as host:
        expected = httpx.post(f"{host.url}/", content=photo, headers=headers, timeout=60).json()
    got, want = served.json()["results"][0]["detections"], expected["results"][0]["detections"]
    assert [d["label"] for d in got] == [d["label"] for d in want]
    for a, b in zip(got, want, strict=True):
        assert all(abs(a["bbox"][k] - b["bbox"][k]) <= 1 for k in a["bbox"]) and abs(a["score"] - b["score"]) < 1e-3
    pinned = _podman("inspect", "--format", "{{.HostConfig.CpusetCpus}} {{.HostConfig.CpusetMems}}", name).stdout
    assert pinned.split() and all(pinned.split())
    assert _podman("healthcheck", "run", name, check=False).returncode == 0  # on the instance's own --port
