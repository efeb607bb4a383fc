"""The demo's last step: the whole product in the app. `forklift app` over OUT/app gets a data set of the demo's
shapes (most labelled with their true boxes, some held back unlabelled), the demo's trained model in its registry
(trained on that data set, so Retrain fine-tunes it there), deployed, and an auto-label run of the held-back
images waiting in the review queue. Run from a terminal, the app stays up until Ctrl-C; otherwise it stops once
every page has answered. The deployment's server stops with it but the model stays deployed in the app's records,
so `forklift app` over the same folder serves it again as it starts.

OUT/app is never deleted: a second demo finds the data set, the model and whatever a person made there since
(labels, reviews, other data sets and models), and adds only what is missing.
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from forklift.app.database import make_engine, session_factory, sqlite_url
from forklift.app.deploy import deployed, stop_serving
from forklift.app.registry import model_files
from forklift.app.tables import ACTIVE, JobState
from forklift.data.dataset import Dataset, ImageRecord, load_dataset
from forklift.errors import ForkliftError
from forklift.serve.process import free_port, wait_until_answering

APP_PORT = 8080
DATASET, MODEL = "demo shapes", "demo: slim yolov3-tiny"  # the names the demo gives what it puts in the app
LABELLED, HELD_BACK = 160, 40  # images of the demo's set put in the app: with their true boxes, and unlabelled
THRESHOLD = 0.5
CHUNK = 40  # images per upload request
PAGES = ("/", "/api/datasets", "/api/models", "/api/deployments", "/api/jobs", "/openapi.json")


def show_in_app(out: Path, data: Path, model_dir: Path, *, interactive: bool) -> str:
    """The app over OUT/app with the demo loaded (its URL is returned once it stopped)."""
    folder = out / "app"
    if (folder / "app.db").is_file():
        print(f"  reusing the app in {folder}: its data sets, labels and models are kept")
    folder.mkdir(parents=True, exist_ok=True)
    port = APP_PORT if _port_free(APP_PORT) else free_port()
    url = f"http://127.0.0.1:{port}"
    with _app(folder, port, out / "app.log") as process, httpx.Client(base_url=url, timeout=300) as client:
        dataset = _demo_dataset(client, load_dataset(data))
        model_id = _demo_model(client, model_dir, dataset)
        running = [d for d in _checked_list(client.get("/api/deployments")) if d["model_id"] == model_id]
        deployment = running[0] if running else _checked(client.post(f"/api/models/{model_id}/deploy"))
        try:
            unlabelled = _checked(client.get(f"/api/datasets/{dataset}/images?status=unlabelled"))["total"]
            if unlabelled:
                run = _checked(client.post(f"/api/datasets/{dataset}/autolabel",
                                           json={"model_id": model_id, "threshold": THRESHOLD}))  # fmt: skip
                run = _finished(client, f"/api/autolabel/{run['id']}")
                print(f"  auto-labelled {run['done']} held-back images: {run['boxes']} boxes at score >= "
                      f"{THRESHOLD}, waiting in the review queue")  # fmt: skip
            for page in PAGES:
                _checked(client.get(page))
            print(f"  the app: {url}/#/datasets/{dataset} (its data set), {url}/#/datasets/{dataset}/review (the "
                  f"review queue), {url}/#/models (the model, deployed at {deployment['url']})")  # fmt: skip
            if interactive:
                print(f"  open {url} in a browser; Ctrl-C stops the app and the deployment", flush=True)
                with _until_interrupted():
                    process.wait()
            else:
                print("  every page answered (not run from a terminal: stopping the app)")
        finally:
            process.terminate()
            process.wait(30)
            pause_deployments(folder)
    command = Path(sys.executable).with_name("forklift")
    print(f"  reopen the app: {command if command.exists() else 'forklift'} app --data-dir {folder} (the model is "
          f"deployed again as it starts)")  # fmt: skip
    return url


def pause_deployments(folder: Path) -> None:
    """Stop the servers of the app's deployments but keep their records, which `forklift app` over the folder
    starts again (`deploy.restore`): the demo's model is deployed whenever its app runs, and nothing outlives the
    demo."""
    engine = make_engine(sqlite_url(folder))
    with session_factory(engine)() as session:
        for deployment, model_dir in deployed(session, folder):
            stop_serving(deployment, model_dir)
    engine.dispose()


def _demo_dataset(client: httpx.Client, data: Dataset) -> int:
    """The demo's data set in the app: the one an earlier demo made, as it is now, else a new one."""
    found = [d["id"] for d in _checked_list(client.get("/api/datasets")) if d["name"] == DATASET]
    return int(found[0]) if found else _load_dataset(client, data)


def _demo_model(client: httpx.Client, model_dir: Path, dataset: int) -> int:
    """The demo's model in the registry, trained on the demo's data set: the one there, else imported."""
    found = [m["id"] for m in _checked_list(client.get("/api/models")) if m["name"] == MODEL]
    if found:
        return int(found[0])
    files = {"file": ("demo-model.zip", _zipped(model_dir))}
    model = _checked(client.post("/api/models/import", files=files, data={"dataset_id": str(dataset)}))["model"]
    _checked(client.patch(f"/api/models/{model['id']}", json={"name": MODEL}))
    return int(model["id"])


def _load_dataset(client: httpx.Client, data: Dataset) -> int:
    """A data set in the app of the first LABELLED + HELD_BACK images, the first LABELLED with their boxes."""
    dataset = _checked(client.post("/api/datasets", json={"name": DATASET}))["id"]
    chosen: list[ImageRecord] = data.images[: LABELLED + HELD_BACK]
    added: list[dict] = []
    for start in range(0, len(chosen), CHUNK):
        files = [("files", (Path(r.file).name, data.path(r).read_bytes())) for r in chosen[start : start + CHUNK]]
        added += _checked(client.post(f"/api/datasets/{dataset}/images", files=files))["added"]
    for image, record in zip(added[:LABELLED], chosen[:LABELLED], strict=True):
        shapes = [{"kind": "box", "label": b.label, "points": [b.x1, b.y1, b.x2, b.y2]} for b in record.boxes]
        _checked(client.put(f"/api/images/{image['id']}/annotations", json={"version": image["version"],
                                                                            "shapes": shapes}))  # fmt: skip
    print(f"  a data set of {len(added)} images: {LABELLED} labelled, {HELD_BACK} held back unlabelled")
    return int(dataset)


def _zipped(model_dir: Path) -> bytes:
    """The model directory as the registry imports it (its training state left out)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, name in model_files(model_dir):
            archive.write(path, f"{model_dir.name}/{name}")
    return buffer.getvalue()


def _checked_list(answer: httpx.Response) -> list[dict]:
    found = _checked(answer)
    assert isinstance(found, list)
    return found


def _checked(answer: httpx.Response) -> Any:
    if answer.status_code >= 400:
        raise ForkliftError(f"the demo's app: {answer.request.method} {answer.request.url.path} answered "
                            f"{answer.status_code}: {answer.text[:300]}")  # fmt: skip
    return answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}


def _finished(client: httpx.Client, url: str, seconds: float = 600) -> dict:
    deadline = time.monotonic() + seconds
    while (seen := _checked(client.get(url)))["state"] in ACTIVE:
        if time.monotonic() > deadline:
            raise ForkliftError(f"the demo's app: {url} still {seen['state']} after {seconds:.0f} s")
        time.sleep(0.5)
    if seen["state"] != JobState.DONE:
        raise ForkliftError(f"the demo's app: {url} {seen['state']}: {seen.get('error')}")
    return seen


@contextmanager
def _app(folder: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "forklift.cli", "app", "--data-dir", str(folder), "--port", str(port)]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_until_answering(f"http://127.0.0.1:{port}/api/session", process, log, 120)
        yield process
    finally:
        process.terminate()
        process.wait(30)


@contextmanager
def _until_interrupted() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        print("\n  stopping the app")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0
