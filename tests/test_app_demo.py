"""The demo's last step: a fresh app over OUT/app with the demo's data set (labelled and held-back images), its
model imported and deployed, and the held-back images auto-labelled; not run from a terminal, it checks the pages
and stops the app and the deployment's server, the model staying deployed for the app's next start."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_helpers import app_client
from helpers import CFGS, shared

from forklift.app.demo import DATASET, HELD_BACK, LABELLED, MODEL, pause_deployments, show_in_app
from forklift.cli import main
from forklift.data.synth import synth_shapes

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


def _until_restored(client: Any) -> None:
    """Wait for the app's start to have restarted its deployments (`deploy.restore` holds this lock meanwhile)."""
    time.sleep(0.5)  # the restoring thread starts with the app
    with client.app.state.deploying:
        pass


def test_the_demo_ends_in_the_app_and_stops_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = synth_shapes(tmp_path / "shapes", LABELLED + HELD_BACK, 64, seed=0)
    model_dir = tmp_path / "demo-model"  # a small detector of the shapes: the app's part of the demo is what is tested
    assert main(["models", "new-darknet", "--cfg", str(CFGS / "tiny-detector.cfg"), "--names",
                 str(shared("darknet/coco.names")), str(model_dir)]) == 0  # fmt: skip
    url = show_in_app(tmp_path, data.root, model_dir, interactive=False)
    said = capsys.readouterr().out
    assert f"{LABELLED} labelled, {HELD_BACK} held back" in said and "every page answered" in said, said
    assert f"auto-labelled {HELD_BACK} held-back images" in said, said
    with pytest.raises(httpx.TransportError):  # the app stopped
        httpx.get(f"{url}/api/session", timeout=2)
    assert _serving_processes() == []  # and so did the deployment
    assert (tmp_path / "app" / "app.db").is_file()

    # reopened, the app serves the demo's model again; a person's work in it survives a second demo: a data set of
    # their own, a label changed
    with app_client(tmp_path / "app", f"sqlite:///{tmp_path / 'app' / 'app.db'}") as client:
        _until_restored(client)
        (deployment,) = client.get("/api/deployments").json()
        assert httpx.get(f"http://127.0.0.1:{deployment['port']}/healthz", timeout=10).status_code == 200
        mine = client.post("/api/datasets", json={"name": "my photos"}).json()["id"]
        (demo,) = [d for d in client.get("/api/datasets").json() if d["name"] == DATASET]
        models = client.get("/api/models").json()
        assert [m["dataset_id"] for m in models if m["name"] == MODEL] == [demo["id"]]  # so Retrain is offered
        first = client.get(f"/api/datasets/{demo['id']}/images?status=labelled").json()["items"][0]
        shapes = client.get(f"/api/images/{first['id']}/annotations").json()
        changed = [{**shapes["shapes"][0], "label": "my label"}]
        assert client.put(f"/api/images/{first['id']}/annotations",
                          json={"version": shapes["version"], "shapes": changed}).status_code == 200  # fmt: skip
    show_in_app(tmp_path, data.root, model_dir, interactive=False)
    said = capsys.readouterr().out
    assert "reusing the app" in said and "held back unlabelled" not in said, said  # nothing loaded twice
    assert _serving_processes() == []
    with app_client(tmp_path / "app", f"sqlite:///{tmp_path / 'app' / 'app.db'}") as client:
        names = [d["name"] for d in client.get("/api/datasets").json()]
        assert sorted(names) == sorted([DATASET, "my photos"]) and mine
        assert [m["name"] for m in client.get("/api/models").json()].count(MODEL) == 1
        again = client.get(f"/api/images/{first['id']}/annotations").json()["shapes"]
        assert again[0]["label"] == "my label"
        _until_restored(client)
        assert httpx.get(f"http://127.0.0.1:{deployment['port']}/healthz", timeout=10).status_code == 200
    pause_deployments(tmp_path / "app")
    assert _serving_processes() == []
