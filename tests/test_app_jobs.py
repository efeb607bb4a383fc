"""Training jobs in the app: a real `forklift train` process per job, followed to the end, cancelled and resumed,
and found again by an app started anew while it runs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import time
import zipfile
from pathlib import Path

import psutil
import pytest
from app_helpers import app_client, fresh_database, shapes_dataset, wait_for, zip_of
from fastapi.testclient import TestClient

from forklift.app.tables import Job
from forklift.data.synth import synth_shapes

pytestmark = pytest.mark.slow

SMALL = {"model": "yolov3-tiny", "batch": 8, "img": 64, "lr": 0.001}


def _labelled_set(client: TestClient, tmp_path: Path) -> int:
    return shapes_dataset(client, tmp_path / "shapes", 24)[0]


def _wait(client: TestClient, job: int, done: tuple[str, ...], *, epoch: int = 0, seconds: float = 240) -> dict:
    return wait_for(client, f"/api/jobs/{job}", done, epoch=epoch, seconds=seconds)


def test_a_job_trains_in_its_own_process_and_resumes_after_a_cancel(tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(None, data)) as client:
        dataset = _labelled_set(client, tmp_path)
        job = client.post(f"/api/datasets/{dataset}/jobs", json={**SMALL, "epochs": 3}).json()
        assert job["state"] == "queued" and job["created_by"] == "local"
        running = _wait(client, job["id"], ("running",), epoch=1)
        recorded = len(client.get(f"/api/jobs/{job['id']}/metrics").json())  # then the list: it counts them all
        assert next(j for j in client.get("/api/jobs").json() if j["id"] == job["id"])["epoch"] >= recorded
        assert client.get(f"/api/datasets/{dataset}").json()["running"] == 1  # the page says so before it asks
        refused = client.delete(f"/api/datasets/{dataset}")  # its process would train on for a job no longer there
        assert refused.status_code == 409 and refused.json()["error"].endswith(
            f"training job {job['id']} is queued or running on it; cancel it on the Training page first"
        )
        assert client.post(f"/api/jobs/{job['id']}/cancel").status_code == 200
        cancelled = _wait(client, job["id"], ("cancelled",))
        assert cancelled["epoch"] >= running["epoch"] and cancelled["finished_at"]
        after = client.get(f"/api/datasets/{dataset}").json()  # the page's delete says what goes with it
        assert (after["jobs"], after["running"]) == (1, 0)
        assert client.post(f"/api/jobs/{job['id']}/resume").json()["state"] == "queued"
        epochs, states = [], []
        with client.stream("GET", f"/api/jobs/{job['id']}/events") as events:  # the live charts' feed
            kind = ""
            for line in events.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    (epochs if kind == "epoch" else states).append(json.loads(line[6:]))
        assert [row["epoch"] for row in epochs] == ["1", "2", "3"] and float(epochs[-1]["loss"]) > 0
        assert states[-1]["state"] == "done" and states[-1]["epoch"] == 3
        finished = _wait(client, job["id"], ("done", "failed"))
        assert finished["state"] == "done", finished
        rows = client.get(f"/api/jobs/{job['id']}/metrics").json()
        assert [row["epoch"] for row in rows] == ["1", "2", "3"] and all(row["map50"] for row in rows)
        model = data / "jobs" / str(job["id"]) / "model"
        assert (model / "yolov3-tiny.onnx").is_file() and (model / "eval" / "eval.json").is_file()


def _left_running(tmp_path: Path) -> tuple[Path, str, int, int, int]:
    """An app that started a 2-epoch job and stopped while it runs: (data directory, database, data set, job,
    the job's process)."""
    data = tmp_path / "app"
    data.mkdir()
    db = fresh_database(None, data)
    with app_client(data, db) as client:
        dataset = _labelled_set(client, tmp_path)
        job = client.post(f"/api/datasets/{dataset}/jobs", json={**SMALL, "epochs": 2}).json()["id"]
        pid = _wait(client, job, ("running",))["pid"]
    return data, db, dataset, job, pid


def test_a_restarted_app_finds_its_running_job_or_marks_it_interrupted(tmp_path: Path) -> None:
    data, db, dataset, first, _ = _left_running(tmp_path)
    with app_client(data, db) as client:  # a new app while the job's process goes on
        assert _wait(client, first, ("done", "failed"))["state"] == "done"
        second = client.post(f"/api/datasets/{dataset}/jobs", json={**SMALL, "epochs": 40}).json()["id"]
        pid = _wait(client, second, ("running",), epoch=1)["pid"]
    os.killpg(pid, signal.SIGKILL)  # the machine loses the job while no app runs
    with contextlib.suppress(psutil.NoSuchProcess):  # gone, as from a lost machine: a loaded one takes a while to
        psutil.Process(pid).wait(timeout=60)  # tear a killed torch process down, and it is still running meanwhile
    with app_client(data, db) as client:
        seen = client.get(f"/api/jobs/{second}").json()
        assert seen["state"] == "interrupted" and "resume continues it" in seen["error"], seen
        assert client.post(f"/api/jobs/{second}/resume").json()["state"] == "queued"
        assert _wait(client, second, ("running",), epoch=2)["epoch"] >= 2  # from its checkpoint, not from scratch
        assert client.post(f"/api/jobs/{second}/cancel").status_code == 200
        _wait(client, second, ("cancelled",))


def test_a_job_that_ends_while_no_app_runs_is_done_and_registered(tmp_path: Path) -> None:
    data, db, _, job, pid = _left_running(tmp_path)
    deadline = time.monotonic() + 240  # the app is down; the training process finishes on its own
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not Path(f"/proc/{pid}").exists(), "the job did not finish in time"
    with app_client(data, db) as client:
        seen = _wait(client, job, ("done", "interrupted", "failed"))  # what the app's start found
        assert seen["state"] == "done" and seen["error"] is None, seen
        (model,) = client.get("/api/models").json()
        assert model["job_id"] == job and "map50" in model["metrics"]


def test_jobs_queue_for_a_device_and_share_the_cpu_on_their_own_cpu_sets_when_asked(tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(None, data), jobs_per_device=2) as client:
        dataset = _labelled_set(client, tmp_path)
        devices = client.get("/api/devices").json()
        assert devices[-1]["name"] == "cpu" and devices[-1]["slots"] == 2, devices
        missing = client.post(f"/api/datasets/{dataset}/jobs", json={**SMALL, "device": "cuda:7"})
        assert missing.status_code == 422 and "device cuda:7: this machine has" in missing.json()["error"]
        assert client.post(f"/api/datasets/{dataset}/jobs", json={**SMALL, "device": "gpu"}).status_code == 422
        jobs = [client.post(f"/api/datasets/{dataset}/jobs", json={**SMALL, "epochs": 200, "device": "cpu",
                                                                    "val_share": share}).json()
                for share in (0.5, None, None)]  # fmt: skip
        first, second = (_wait(client, job["id"], ("running",), epoch=1) for job in jobs[:2])  # with a process
        sets = [os.sched_getaffinity(first["pid"]), os.sched_getaffinity(second["pid"])]
        assert len(sets[0]) == len(sets[1]) == len(os.sched_getaffinity(0)) // 2 and not sets[0] & sets[1], sets
        assert client.get(f"/api/jobs/{jobs[2]['id']}").json()["state"] == "queued"  # both slots are taken
        cpu = next(d for d in client.get("/api/devices").json() if d["name"] == "cpu")
        assert (cpu["running"], cpu["queued"]) == (2, 1), cpu
        assert client.post(f"/api/jobs/{first['id']}/cancel").status_code == 200
        third = _wait(client, jobs[2]["id"], ("running",), epoch=1)  # in the slot the first left
        assert os.sched_getaffinity(third["pid"]) == sets[0]
        for job in (second, third):
            assert client.post(f"/api/jobs/{job['id']}/cancel").status_code == 200
            assert _wait(client, job["id"], ("cancelled",))["device"] == "cpu"
        snapshot = json.loads((data / "jobs" / str(first["id"]) / "data" / "dataset.json").read_text())
        assert sum(image["split"] == "val" for image in snapshot["images"]) == 12  # its val_share of 24

        with client.app.state.sessionmaker() as session:  # a job queued on a machine that had a second GPU
            session.add(Job(dataset_id=dataset, model="yolov3-tiny", settings={**SMALL, "epochs": 1}, out_dir="jobs/99",
                            created_by="local", epochs=1, device="cuda:1"))  # fmt: skip
            session.commit()
        client.app.state.jobs.notify()
        moved = next(job for job in client.get("/api/jobs").json() if job["device"] == "cuda:1")
        failed = _wait(client, moved["id"], ("failed",))
        assert failed["error"] == "device cuda:1: this machine has cpu; resume it on one of them", failed
        elsewhere = client.post(f"/api/jobs/{moved['id']}/resume", json={"device": "cuda:1"})
        assert elsewhere.status_code == 422 and "device cuda:1" in elsewhere.json()["error"]
        assert client.post(f"/api/jobs/{moved['id']}/resume", json={"device": "cpu"}).json()["device"] == "cpu"
        assert _wait(client, moved["id"], ("done", "failed"))["state"] == "done"


def test_a_finished_job_is_a_model_that_exports_and_imports(tmp_path: Path) -> None:
    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(None, data)) as client:
        dataset = _labelled_set(client, tmp_path)
        estimate = f"/api/datasets/{dataset}/jobs/estimate?model=yolov3-tiny&img=64&val_share=0.25&device=cpu"
        first = client.get(f"{estimate}&epochs=1").json()
        assert first["seconds"] is None and "no yolov3-tiny job has finished on the CPU" in first["basis"], first
        started = time.monotonic()
        job = client.post(f"/api/datasets/{dataset}/jobs", json={**SMALL, "epochs": 1}).json()["id"]
        assert _wait(client, job, ("done", "failed"))["state"] == "done"
        took = time.monotonic() - started
        # the Train form's estimate, from that job's pace: its own run is about what it took (the app's polling
        # aside); more epochs and a larger input size take longer
        again = client.get(f"{estimate}&epochs=1").json()
        assert again["basis"] == f"from the pace of job {job} at 64 px" and 0.5 * took < again["seconds"] <= took
        longer = client.get(f"{estimate}&epochs=3").json()["seconds"]
        bigger = client.get(f"{estimate.replace('img=64', 'img=128')}&epochs=1").json()["seconds"]
        assert again["seconds"] < longer and again["seconds"] < bigger
        bad = client.get(f"/api/datasets/{dataset}/jobs/estimate?model=small-classifier")
        assert bad.status_code == 422 and "a detect data set trains" in bad.json()["error"]
        (model,) = client.get("/api/models").json()
        assert model["job_id"] == job and model["name"] == "shapes #" + str(job)
        assert "map50" in model["metrics"] and model["settings"]["epochs"] == 1 and len(model["dataset_digest"]) == 64
        exported = client.get(f"/api/models/{model['id']}/export")
        assert exported.headers["content-disposition"] == (
            f"attachment; filename=\"shapes-{job}.zip\"; filename*=UTF-8''shapes-{job}.zip"
        )  # "shapes #1"
        names = zipfile.ZipFile(io.BytesIO(exported.content)).namelist()
        assert (
            "model.json" in names
            and "yolov3-tiny.onnx" in names
            and not any(n.startswith("checkpoints") for n in names)
        )
        client.patch(f"/api/models/{model['id']}", json={"name": "first"})
        imported = client.post("/api/models/import", files={"file": ("first.zip", exported.content)})
        assert imported.status_code == 201, imported.text
        twin = imported.json()["model"]
        assert twin["name"] == "shapes #" + str(job) and twin["metrics"] == model["metrics"]  # the record travelled
        taken = client.patch(f"/api/models/{twin['id']}", json={"name": "first"})  # the original's name now
        assert taken.status_code == 409 and taken.json()["error"].startswith("a model named 'first' exists already")
        assert (data / "models").is_dir() and client.delete(f"/api/models/{model['id']}").status_code == 204
        assert [m["id"] for m in client.get("/api/models").json()] == [twin["id"]]
        folder = data / "jobs" / str(job) / "model"  # the weights gone; how the job trained stays on its page
        assert sorted(p.name for p in folder.iterdir()) == ["eval", "metrics.csv"]
        assert len(client.get(f"/api/jobs/{job}/metrics").json()) == 1  # its one epoch
        assert client.get(f"/api/jobs/{job}/evaluation").status_code == 200
        junk = client.post("/api/models/import", files={"file": ("junk.zip", zip_of({"notes.txt": b"hello"}))})
        assert junk.status_code == 422 and junk.json()["error"].startswith("junk.zip:")

        # a deleted job's folder, whose model outlives it, under the number SQLite handed out again before migration
        # 0009: a new job of that number trains in a folder of its own, and the old model's files stay as they were
        left = data / "jobs" / str(job + 1) / "model"
        left.mkdir(parents=True)
        (left / "kept.txt").write_text("a deleted job's model")
        # the Train form may start from any registered model of the data set's task: its weights, classes by name
        started = client.post(f"/api/datasets/{dataset}/jobs", json={**SMALL, "epochs": 1, "from_model_id": twin["id"]})
        assert started.status_code == 201, started.text
        assert started.json()["settings"]["from_model_id"] == twin["id"] and started.json()["id"] == job + 1
        waited_on = client.delete(f"/api/models/{twin['id']}")  # the job would fail on its missing files
        assert waited_on.status_code == 409 and f"training job {job + 1} fine-tunes it" in waited_on.json()["error"]
        assert _wait(client, started.json()["id"], ("done", "failed"))["state"] == "done"
        assert [p.name for p in left.iterdir()] == ["kept.txt"]
        log = (data / "jobs" / f"{job + 1}-2" / "train.log").read_text()
        assert "fine-tuning: starting from the weights of" in log, log[-2000:]
        said = client.get(f"/api/jobs/{job + 1}/start").json()  # the page's lines: the model by name, no server path
        assert said[0] == f"starting from the weights of model {twin['name']!r}" and str(data) not in " ".join(said)
        classes = client.post("/api/datasets", json={"name": "kinds", "task": "classify"}).json()["id"]
        wrong = client.post(f"/api/datasets/{classes}/jobs", json={"epochs": 1, "from_model_id": twin["id"]})
        assert wrong.status_code == 422 and "answers detect" in wrong.json()["error"], wrong.text


def test_a_classification_set_trains_the_apps_classifier(tmp_path: Path) -> None:
    data_dir = tmp_path / "app"
    data_dir.mkdir()
    shapes = synth_shapes(tmp_path / "shapes", 20, 64, seed=0, task="classify")
    with app_client(data_dir, fresh_database(None, data_dir)) as client:
        dataset = client.post("/api/datasets", json={"name": "kinds", "task": "classify"}).json()["id"]
        files = [("files", (Path(r.file).name, (shapes.root / r.file).read_bytes())) for r in shapes.images]
        added = client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
        for image, record in zip(added, shapes.images, strict=True):
            client.put(f"/api/images/{image['id']}/annotations", json={"version": 1, "class_label": record.label})
        wrong = client.post(f"/api/datasets/{dataset}/jobs", json={"model": "yolov3-tiny", "epochs": 1})
        assert wrong.status_code == 422 and "small-classifier" in wrong.json()["error"]
        job = client.post(f"/api/datasets/{dataset}/jobs", json={"epochs": 2, "batch": 8, "img": 64}).json()
        assert job["model"] == "small-classifier"
        assert _wait(client, job["id"], ("done", "failed"))["state"] == "done"
        (model,) = client.get("/api/models").json()
        assert 0 <= model["metrics"]["top1"] <= 1
        evaluation = client.get(f"/api/jobs/{job['id']}/evaluation").json()
        made = [label["name"] for label in client.get(f"/api/datasets/{dataset}").json()["labels"]]
        assert sorted(made) == sorted(shapes.classes)
        assert evaluation["top1"] == model["metrics"]["top1"] and evaluation["classes"] == made  # in the order made
        rows = client.get(f"/api/jobs/{job['id']}/metrics").json()
        best = max(rows, key=lambda row: float(row["top1"]))  # the first of equals, as the run keeps it
        assert evaluation["epoch"] == int(best["epoch"])  # the weights the model holds: the best on val
        for url in evaluation["pictures"].values():
            assert client.get(url).headers["content-type"] == "image/png"
