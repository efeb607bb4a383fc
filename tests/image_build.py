"""forklift-serve built in the background while other work runs: the Debian root filesystem and the image take
about two minutes, mostly downloads, unpacking and compression, at the lowest CPU and I/O priority. `make test`
starts it (`python tests/image_build.py`) as soon as the venv and the app's front end are there, beside lint, types
and the docs, which leave a core idle, and tells pytest so (FORKLIFT_IMAGE_BUILD=background); a bare pytest run
starts it when test_container_images.py is collected (conftest). The build's shell writes its exit status to
STATUS, which the image test waits for."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "build" / "images" / "build.log"
STATUS = LOG.with_name("build.status")  # the exit status of build.sh, written when it ends
PID = LOG.with_name("build.pid")  # the build's shell, the leader of its process group
TOOLS = ("podman", "buildah", "mmdebstrap", "skopeo")
STARTED = "FORKLIFT_IMAGE_BUILD"  # "background": make started the build before pytest
IMAGE_BUILD = pytest.StashKey[int | None]()  # the pid of the session's build, when the session started one


def start_build() -> int | None:
    """`deploy/images/build.sh serve` started at nice 19 and idle I/O in a process group of its own; the pid of its
    shell, or None when a tool is missing (the test says which)."""
    if not all(shutil.which(tool) for tool in TOOLS):
        return None
    LOG.parent.mkdir(parents=True, exist_ok=True)
    STATUS.unlink(missing_ok=True)
    build = shlex.quote(str(ROOT / "deploy" / "images" / "build.sh"))
    script = f"{build} serve >{shlex.quote(str(LOG))} 2>&1; echo $? >{shlex.quote(str(STATUS))}"
    process = subprocess.Popen(
        ["nice", "-n", "19", "ionice", "-c", "3", "sh", "-c", script],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    PID.write_text(str(process.pid))
    return process.pid


def build_status(timeout: float) -> int:
    """The build's exit status, once it has ended (waiting up to `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not STATUS.exists():
        if not PID.exists() or not _running(int(PID.read_text())):
            time.sleep(0.5)  # the status is written just before the shell ends
            if STATUS.exists():
                break
            raise AssertionError(f"the image build ended without an exit status; {LOG}: {_tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the image build took over {timeout:.0f} s; {LOG}: {_tail()}")
        time.sleep(1)
    return int(STATUS.read_text())


def stop_build(pid: int) -> None:
    """Stop a build that is still running (the session ended before the image test waited for it)."""
    if not STATUS.exists() and _running(pid):
        os.killpg(pid, signal.SIGTERM)


def _running(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"  # a child of this process that ended and was not waited for yet


def _tail() -> str:
    return LOG.read_text(errors="replace")[-3000:] if LOG.exists() else "(no log)"


if __name__ == "__main__":
    if start_build() is not None:
        print(f"forklift-serve's image: building in the background (log: {LOG.relative_to(ROOT)})")
