"""forklift-serve built in the background while the other tests run (conftest starts it when
test_container_images.py is collected): the Debian root filesystem and the image take about two minutes, mostly
downloads, unpacking and compression, so at the lowest CPU and I/O priority they fill the time the other tests leave
idle. Under pytest-xdist the controller starts it and the worker that runs the image test waits for it: the build
writes its exit status to a file, and a file names the process that started it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "build" / "images" / "build.log"
STATUS = LOG.with_name("build.status")  # the build's exit status, written when it ends
STARTER = LOG.with_name("build.starter")  # the pid of the pytest process that started it
TOOLS = ("podman", "buildah", "mmdebstrap", "skopeo")
IMAGE_BUILD = pytest.StashKey[subprocess.Popen[bytes] | None]()  # the session's build, when it started one


def start_build() -> subprocess.Popen[bytes] | None:
    """`deploy/images/build.sh serve` started at nice 19 and idle I/O; None when a tool is missing (the test says
    which)."""
    if not all(shutil.which(tool) for tool in TOOLS):
        return None
    LOG.parent.mkdir(parents=True, exist_ok=True)
    STATUS.unlink(missing_ok=True)
    STARTER.write_text(str(os.getpid()), encoding="utf-8")
    script = '"$0" serve; status=$?; echo "$status" > "$1"; exit "$status"'
    build = ["bash", "-c", script, str(ROOT / "deploy" / "images" / "build.sh"), str(STATUS)]
    with LOG.open("wb") as log:
        return subprocess.Popen(["nice", "-n", "19", "ionice", "-c", "3", *build], stdout=log,
                                stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip


def built(config: pytest.Config, *, timeout: float) -> int:
    """The exit status of this session's build, waited for: the one this process or its parent (pytest-xdist's
    controller) started, else one started now."""
    mine = config.stash.get(IMAGE_BUILD, None)
    by_parent = STARTER.is_file() and STARTER.read_text(encoding="utf-8").strip() == str(os.getppid())
    if mine is None and not by_parent:
        mine = config.stash[IMAGE_BUILD] = start_build()
        assert mine is not None, f"one of {', '.join(TOOLS)} is missing"
    deadline = time.monotonic() + timeout
    while not STATUS.is_file() or not STATUS.read_text(encoding="utf-8").strip():
        assert time.monotonic() < deadline, f"the image build ran past {timeout:.0f} s: {LOG}"
        time.sleep(1)
    return int(STATUS.read_text(encoding="utf-8"))
