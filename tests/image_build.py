"""forklift-serve built in the background while the other tests run (conftest starts it when
test_container_images.py is collected): the Debian root filesystem and the image take about two minutes, mostly
downloads, unpacking and compression, so at the lowest CPU and I/O priority they fill the time the other tests leave
idle."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "build" / "images" / "build.log"
TOOLS = ("podman", "buildah", "mmdebstrap", "skopeo")
IMAGE_BUILD = pytest.StashKey[subprocess.Popen[bytes] | None]()  # the session's build, when it started one


def start_build() -> subprocess.Popen[bytes] | None:
    """`deploy/images/build.sh serve` started at nice 19 and idle I/O; None when a tool is missing (the test says
    which)."""
    if not all(shutil.which(tool) for tool in TOOLS):
        return None
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("wb") as log:
        command = ["nice", "-n", "19", "ionice", "-c", "3", str(ROOT / "deploy" / "images" / "build.sh"), "serve"]
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
