"""The demo's last step: a fresh app over OUT/app with the demo's data set (labelled and held-back images), its
model imported and deployed, and the held-back images auto-labelled; not run from a terminal, it checks the pages
and stops the app and the deployment."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from forklift.app.demo import HELD_BACK, LABELLED, show_in_app
from forklift.cli import main
from forklift.data.synth import synth_shapes
from forklift.shared_data import shared_data_root

pytestmark = pytest.mark.slow


def _serving_processes() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"forklift.cli\x00serve" in command and b"demo-model" in command:
            found.append(int(pid))
    return found


def test_the_demo_ends_in_the_app_and_stops_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = synth_shapes(tmp_path / "shapes", LABELLED + HELD_BACK, 64, seed=0)
    darknet = shared_data_root() / "darknet"
    model_dir = tmp_path / "demo-model"
    assert main(["models", "new-darknet", "--cfg", str(darknet / "yolov3-tiny.cfg"), "--names",
                 str(darknet / "coco.names"), str(model_dir)]) == 0  # fmt: skip
    url = show_in_app(tmp_path, data.root, model_dir, interactive=False)
    said = capsys.readouterr().out
    assert f"{LABELLED} labelled, {HELD_BACK} held back" in said and "every page answered" in said, said
    assert f"auto-labelled {HELD_BACK} held-back images" in said, said
    with pytest.raises(httpx.TransportError):  # the app stopped
        httpx.get(f"{url}/api/session", timeout=2)
    assert _serving_processes() == []  # and so did the deployment
    assert (tmp_path / "app" / "app.db").is_file()
