"""The real parts forklift's tests run against (PostgreSQL, Chromium, NGINX, sshd and namespaces, the shared
reference data, the built front end): when one is missing, a developer's run skips what needs it, and a CI run
(CI=true, as `.ci/run` sets) fails, since a skip there would pass having tested nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest


def missing(reason: str) -> NoReturn:
    """Skip the test, or fail it in CI, saying which part is missing and how to get it."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def chromium() -> Path:
    """Debian's Chromium, which the page tests drive with Playwright."""
    found = Path(shutil.which("chromium") or "/usr/bin/chromium")
    if not found.exists():
        missing("Debian's chromium is not installed (.ci/run installs it)")
    return found


def nginx() -> Path:
    found = Path(shutil.which("nginx") or "/usr/sbin/nginx")
    if not found.exists():
        missing("nginx is not installed (.ci/run installs it with apt-get)")
    return found


def helm() -> Path:
    """The helm binary `make test` unpacks into build/tools (from the npm package that ships it), or one on PATH."""
    here = Path(__file__).resolve().parent.parent / "build" / "tools" / "helm"
    found = here if here.exists() else Path(shutil.which("helm") or here)
    if not found.exists():
        missing("helm is not unpacked (make build/tools/helm)")
    return found


def image_builders() -> None:
    """podman, buildah and mmdebstrap, which build forklift's images without a registry (.ci/run installs them)."""
    from image_build import TOOLS

    absent = [tool for tool in TOOLS if not shutil.which(tool)]
    if absent:
        missing(f"{', '.join(absent)} not installed (.ci/run installs them with apt-get)")
