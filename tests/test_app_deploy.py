"""One-click deploy: a registered model served by `forklift serve` on its own port, answering forklift's native
and PowerAI Vision's protocols, back after an app restart, and gone (port free) after undeploy."""

from __future__ import annotations

import io
import os
import signal
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from app_helpers import app_client, fresh_database, model_zip, zip_of

from forklift.shared_data import shared_data_root

pytestmark = pytest.mark.slow


def _answering(url: str, seconds: float = 120) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            time.sleep(0.3)
    return False


def test_deploy_answer_restart_and_undeploy(tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    db = fresh_database(None, data)
    photo = (shared_data_root() / "images" / "dog.jpg").read_bytes()
    with app_client(data, db) as client:
        model = client.post("/api/models/import", files={"file": ("tiny.zip", model_zip(tmp_path))}).json()["model"]
        made = client.post(f"/api/models/{model['id']}/deploy")
        assert made.status_code == 201, made.text
        deployment = made.json()
        assert deployment["curl"]["native"].endswith(f"/predict/{deployment['name']}")
        assert client.post(f"/api/models/{model['id']}/deploy").status_code == 409
        tried = client.post(f"/api/deployments/{deployment['id']}/predict", files={"file": ("dog.jpg", photo)}).json()
        assert tried["status_code"] == 200 and tried["results"][0]["file"] == "dog.jpg"
        trying = f"/api/deployments/{deployment['id']}/predict"
        low, high = (client.post(trying, files={"file": ("dog.jpg", photo)}, data={"conf": conf}).json()
                     for conf in ("0.001", "0.999"))  # fmt: skip
        assert len(low["results"][0]["detections"]) > len(high["results"][0]["detections"])  # the page's threshold
        bad = client.post(trying, files={"file": ("dog.jpg", photo)}, data={"conf": "2"})
        assert bad.status_code == 422 and "conf" in bad.json()["error"]
        text = client.post(trying, files={"file": ("notes.jpg", b"not a picture")})  # the page says why, no picture
        assert text.status_code == 400 and text.json()["error"].startswith("notes.jpg: not an image")
        url = f"http://127.0.0.1:{deployment['port']}"
        powerai = httpx.post(f"{url}/api/dlapis/{deployment['name']}", files={"files": ("dog.jpg", photo)}).json()
        assert powerai["result"] == "success"
    with app_client(data, db) as client:  # the server outlived the app: found again, not started twice
        (again,) = client.get("/api/deployments").json()
        assert again["port"] == deployment["port"] and _answering(url, 5)
        pid = next(int(p) for p in os.listdir("/proc") if p.isdigit() and _serves(int(p), deployment["name"]))
    os.kill(pid, signal.SIGKILL)
    with app_client(data, db) as client:  # the server died with the machine: started again, on its port when free
        (restored,) = client.get("/api/deployments").json()  # (the killed server's workers may hold it a moment)
        url = f"http://127.0.0.1:{restored['port']}"
        assert _answering(url, 120)
        restarted = next(int(p) for p in os.listdir("/proc") if p.isdigit() and _serves(int(p), deployment["name"]))
        assert client.delete(f"/api/deployments/{again['id']}").status_code == 204
        assert not _answering(url, 3) and client.get("/api/deployments").json() == []
        assert not Path(f"/proc/{restarted}").exists()  # reaped: no defunct process left behind


def _serves(pid: int, name: str, under: Path | None = None) -> bool:
    """Whether the process is `forklift serve` of a model named `name` (from a model folder `under` that one)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"serve" in command and f"={name}".encode() in command and str(under or "").encode() in command


def test_deleting_a_deployed_model_stops_its_server(tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(None, data)) as client:
        tiny = model_zip(tmp_path)
        model, again = (client.post("/api/models/import", files={"file": ("tiny.zip", tiny)}).json()["model"]
                        for _ in range(2))  # fmt: skip
        assert (model["name"], again["name"]) == ("tiny", "tiny (2)")  # the lists tell them apart
        assert client.delete(f"/api/models/{again['id']}").status_code == 204
        # two deploys at once (two tabs, two scripts): both pass the check before the server starts; one deploys
        with ThreadPoolExecutor(2) as pool:
            made = list(pool.map(lambda _: client.post(f"/api/models/{model['id']}/deploy"), range(2)))
        assert sorted(answer.status_code for answer in made) == [201, 409], [answer.text for answer in made]
        deployment = next(answer.json() for answer in made if answer.status_code == 201)
        url = f"http://127.0.0.1:{deployment['port']}"
        assert _answering(url, 60)
        (pid,) = (int(p) for p in os.listdir("/proc") if p.isdigit() and _serves(int(p), deployment["name"], data))
        assert client.delete(f"/api/models/{model['id']}").status_code == 204
        assert client.get("/api/deployments").json() == [] and not _answering(url, 3)
        assert not Path(f"/proc/{pid}").exists()  # stopped and reaped, not left answering from deleted files


def test_a_deployment_listens_where_the_app_does(tmp_path: Path) -> None:
    """An app on ::1 deploys on ::1: its URL and curl lines name it (bracketed), and its test page reaches it there
    (a deployment on 127.0.0.1 behind a URL of the app's address was out of reach wherever the app was not on
    loopback)."""
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(None, data), host="::1") as client:
        model = client.post("/api/models/import", files={"file": ("tiny.zip", model_zip(tmp_path))}).json()["model"]
        deployment = client.post(f"/api/models/{model['id']}/deploy").json()
        url = f"http://[::1]:{deployment['port']}"
        assert deployment["url"] == url and deployment["curl"]["native"].endswith(f"{url}/predict/{deployment['name']}")
        assert _answering(url, 30)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{deployment['port']}/healthz")
        photo = (shared_data_root() / "images" / "dog.jpg").read_bytes()
        tried = client.post(f"/api/deployments/{deployment['id']}/predict", files={"file": ("dog.jpg", photo)})
        assert tried.status_code == 200 and tried.json()["results"][0]["file"] == "dog.jpg"
        assert client.delete(f"/api/deployments/{deployment['id']}").status_code == 204


@pytest.fixture(scope="module")
def tiny_zip(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """One model zip for the module's tests that only read it."""
    return model_zip(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize(
    ("record", "said"),
    [
        (b'{"settings": "oops"}', "model.json: settings: Input should be an object"),
        (b"{not json", "model.json: the file: Invalid JSON"),
        (b"[1, 2]", "model.json: the file: Input should be an object"),
        (
            b'{"settings": ' + b'{"a": ' * 50 + b"1" + b"}" * 51,
            "model.json: settings.a.str: Input should be a valid string",
        ),
        (b'{"name": ""}', "model.json: name: String should have at least 1 character"),
    ],
    ids=["settings-a-string", "broken", "a-list", "deep", "empty-name"],
)
def test_an_imported_models_record_is_checked_and_nothing_is_kept_on_refusal(
    tmp_path: Path, tiny_zip: bytes, record: bytes, said: str
) -> None:
    data = tmp_path / "app"
    data.mkdir()
    zipped = io.BytesIO(tiny_zip)
    with zipfile.ZipFile(zipped, "a") as archive:
        archive.writestr("tiny/model.json", record)
    with app_client(data, fresh_database(None, data)) as client:
        answer = client.post("/api/models/import", files={"file": ("tiny.zip", zipped.getvalue())})
        assert answer.status_code == 422 and answer.json()["error"].startswith(f"tiny.zip: {said}"), answer.text
        assert client.get("/api/models").json() == []  # the registry answers, with nothing half-added
        assert not any((data / "models").iterdir()) if (data / "models").exists() else True


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({"notes.txt": b"hello"}, "up.zip: not a model directory (no .cfg"),
        ({"model.onnx": b"garbage", "labels.txt": b"a\n"}, "up.zip: model.onnx: ONNX Runtime cannot load it"),
        ({"m/model.onnx": b"garbage"}, "up.zip: m: missing the labels file"),
    ],
    ids=["no-model", "broken-onnx", "no-labels"],
)
def test_a_model_that_cannot_load_is_refused_naming_its_files_in_the_zip(
    tmp_path: Path, files: dict[str, bytes], said: str
) -> None:
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(None, data)) as client:
        answer = client.post("/api/models/import", files={"file": ("up.zip", zip_of(files))})
        error = answer.json()["error"]
        assert answer.status_code == 422 and error.startswith(said), error
        assert str(data) not in error and "/models/" not in error  # where the server unpacked it is not said
