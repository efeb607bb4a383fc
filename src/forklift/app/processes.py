"""Processes the app started and must find again after it restarts (training jobs, deployments): a pid alone is
not enough, since the system may have given it to another program since."""

from __future__ import annotations

from pathlib import Path


def runs(pid: int | None, *markers: bytes) -> bool:
    """Whether process `pid` is alive and its command line holds every one of `markers`."""
    if pid is None:
        return False
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return all(marker in command for marker in markers)
