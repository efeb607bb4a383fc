"""Training jobs: each a `forklift train` process of its own (the web process never trains), queued for a device
(the CPU or a GPU: `forklift.app.devices`), found again after an app restart, cancelled by signal, resumed with
`forklift train --resume`.

A job trains on a snapshot of its data set taken when it starts (OUT/data: dataset.json and hard links to the
app's image files), so labels changed during training do not move under it; its model directory is OUT/model,
whose metrics.csv the runner reads for progress and the live charts.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from forklift.app.background import Follower
from forklift.app.devices import CPU, Device
from forklift.app.processes import runs
from forklift.app.registry import register_job
from forklift.app.storage import without_folder
from forklift.app.tables import TRAINED_ON, DataSet, Job, JobState
from forklift.app.transfer import as_forklift_dataset
from forklift.data.dataset import Dataset, save_dataset
from forklift.data.split import assign_splits
from forklift.errors import ForkliftError
from forklift.shared_data import shared_data_root
from forklift.train.run_log import FINE_TUNING
from forklift.train.settings import TrainSettings, as_options
from forklift.train.small_cfg import slim_cfg

FOLLOW_S = 2.0  # while a job runs: how often its epoch count is read (its end wakes the runner at once)
IDLE_S = 10.0  # otherwise: a look for work that no route announced (another app process's)
VAL_SHARE = 0.2  # of the images, when the data set has no val split of its own
MODELS: dict[str, dict[str, dict[str, Path | str]]] = {  # what a job trains (its network's training settings), by
    "detect": {  # the data set's task: "optimized for speed" (a YOLO from the Darknet cfgs) or "for accuracy"
        "yolov3-tiny": {"cfg": Path("darknet/yolov3-tiny.cfg")},  # in the reference data (`shared_data_root`)
        "yolov3-tiny-slim": {"cfg": Path("yolov3-tiny-slim.cfg")},  # written into the job's folder (`slim_cfg`)
        "faster-rcnn": {"arch": "fasterrcnn_mobilenet_v3_large_320_fpn"},
    },
    "classify": {"small-classifier": {"cfg": Path(__file__).resolve().parent / "cfgs" / "small-classifier.cfg"}},
}
PRETRAINED = {  # what a job starts from when it starts from COCO's weights: the catalogue's ready model of the kind,
    "yolov3-tiny": "yolov3-tiny",  # by name (`forklift train --model NAME` pulls it into the cache once)
    "faster-rcnn": "fasterrcnn_mobilenet_v3_large_320_fpn",
}
JOB_RECORD = ("metrics.csv", "eval")  # of a job's model directory, how it trained: its page's chart and evaluation
START_NOTES_BYTES = 1 << 16  # of a job's log, read for what the run said as it began
SLIM_SIZE = 416  # the slim cfg's input size when the job does not set one
OPTIONS = ("epochs", "batch", "img", "lr", "weight_decay", "optimizer", "val_every")  # the TrainSettings a job sets


def snapshot(session: Session, dataset: DataSet, root: Path, folder: Path, *, val_share: float) -> Dataset:
    """The data set as a forklift data set folder of hard links (copies across file systems), `val_share` of the
    images assigned to val when the data set has no val split of its own."""
    data = as_forklift_dataset(session, dataset, root, statuses=TRAINED_ON)
    shutil.rmtree(folder, ignore_errors=True)  # an earlier start's, which ended before its first checkpoint
    (folder / "images").mkdir(parents=True)
    records = []
    for k, record in enumerate(data.images):
        target = folder / "images" / f"{k:06}{Path(record.file).suffix}"
        try:
            os.link(data.path(record), target)
        except OSError:
            target.write_bytes(data.path(record).read_bytes())
        records.append(replace(record, file=f"images/{target.name}"))
    copy = Dataset(data.task, data.classes, records, folder)
    if not any(record.split == "val" for record in records):
        assign_splits(copy, val_share, 0.0, seed=0)
    save_dataset(copy, folder)
    return copy


def train_command(job: Job, out: Path, root: Path, *, classes: int) -> list[str]:
    """The job's `forklift train` on its snapshot of `classes` classes: from the kind's fresh weights, its COCO
    weights (`pretrained`), or fine-tuning a model (`from_model`, a model directory under the data directory
    `root`)."""
    network: dict[str, Path | str]
    if job.settings.get("from_model"):
        network = {"model": root / job.settings["from_model"]}
    elif job.settings.get("pretrained"):
        network = {"model": Path(PRETRAINED[job.model])}
    elif job.model == "yolov3-tiny-slim":
        text, _ = slim_cfg(shared_data_root() / "darknet" / "yolov3-tiny.cfg", classes,
                           job.settings.get("img") or SLIM_SIZE)  # fmt: skip
        (out / "yolov3-tiny-slim.cfg").write_text(text, encoding="utf-8")
        network = {"cfg": out / "yolov3-tiny-slim.cfg"}
    else:
        network = {
            key: shared_data_root() / value if str(value).startswith("darknet/") else value
            for key, value in (MODELS["detect"] | MODELS["classify"])[job.model].items()
        }
    settings = TrainSettings.of(data=out / "data", **network, **{key: job.settings.get(key) for key in OPTIONS})
    return [sys.executable, "-m", "forklift.cli", "train", *as_options(settings), "--device", job.device,
            str(out / "model")]  # fmt: skip


def start_notes(out: Path, *, known_as: dict[str, str]) -> list[str]:
    """What the job's run said, as it began, about what it starts from: the model, and which classes keep its head
    weights and which start fresh (the lines open the run's log). A path in `known_as` is given as what a person
    knows it by (a model's folder on the server, by its name in the registry)."""
    try:
        with (out / "train.log").open(encoding="utf-8", errors="replace") as log:
            head = log.read(START_NOTES_BYTES)
    except FileNotFoundError:
        return []
    notes = [line.removeprefix(FINE_TUNING) for line in head.splitlines() if line.startswith(FINE_TUNING)]
    for path, name in known_as.items():
        notes = [note.replace(path, name) for note in notes]
    return notes


def progress(out: Path) -> list[dict[str, str]]:
    """The rows of the job's metrics.csv so far (one per epoch)."""
    metrics = out / "model" / "metrics.csv"
    if not metrics.is_file():
        return []
    with metrics.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


class JobRunner(Follower):
    """Starts queued jobs, `slots` at a time on each device, and follows them; a thread of the app. A route that
    queues a job calls `notify`; a job's process ending wakes it too; a running job's epoch count is read every
    FOLLOW_S."""

    name = "forklift-jobs"

    def __init__(self, sessions: sessionmaker[Session], root: Path, *, devices: list[Device], slots: int) -> None:
        super().__init__()
        self.sessions, self.root = sessions, root
        self.devices, self.slots = {device.name: device for device in devices}, slots
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.cpu_sets: dict[int, tuple[int, ...]] = {}  # the CPU set of each pinned job running
        self.cancelled: set[int] = set()  # jobs a person cancelled (one may be starting: stopped once it has a pid)
        self.running = False

    def recover(self) -> None:
        """After the app's start: a job whose process ended while no app ran is done when it left its finished
        model directory (registered as if the app had seen it end), else interrupted (resume continues it)."""
        with self.sessions() as session:
            for job in session.scalars(select(Job).where(Job.state == JobState.RUNNING)):
                if _alive(job.pid, job.out_dir):
                    continue
                if _finished_model(self.root / job.out_dir):
                    job.state, job.finished_at = JobState.DONE, datetime.now(UTC)
                    register_job(session, job, self.root)
                else:
                    job.state, job.error = JobState.INTERRUPTED, "the app stopped while it ran; resume continues it"
            session.commit()

    def pause(self) -> float:
        return FOLLOW_S if self.running else IDLE_S

    def cancel(self, job: Job) -> None:
        """Stop a running job's process; one still being started is stopped as soon as it is."""
        self.cancelled.add(job.id)
        if job.pid is not None and _alive(job.pid, job.out_dir):
            os.killpg(job.pid, signal.SIGTERM)

    def step(self) -> None:
        with self.sessions() as session:
            running = list(session.scalars(select(Job).where(Job.state == JobState.RUNNING)))
            for job in running:
                self._follow(session, job)
            session.commit()
            busy = Counter(job.device for job in running if job.state == JobState.RUNNING)
            for queued in list(session.scalars(select(Job).where(Job.state == JobState.QUEUED).order_by(Job.id))):
                device = self.devices.get(queued.device)
                if device is None:
                    _fail(session, queued, f"device {queued.device}: this machine has {', '.join(self.devices)}; "
                                           "resume it on one of them")  # fmt: skip
                elif busy[device.name] < self.slots and self._launch(session, queued, device):
                    busy[device.name] += 1
            self.running = sum(busy.values()) > 0

    def _launch(self, session: Session, job: Job, device: Device) -> bool:
        """Start the job's training process, if the job is still queued (a cancel may come first); a job that
        cannot start fails with the reason, and the queue goes on."""
        claimed = session.execute(update(Job).where(Job.id == job.id, Job.state == JobState.QUEUED)
                                  .values(state=JobState.RUNNING, pid=None, error=None))  # fmt: skip
        session.commit()
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            return False
        session.refresh(job)
        self.cancelled.discard(job.id)
        out = self.root / job.out_dir
        free = [cpus for cpus in device.cpu_sets if cpus not in self.cpu_sets.values()]
        try:
            command = self._command(session, job, out)
            environment = os.environ | ({"OMP_NUM_THREADS": str(len(free[0]))} if free else {})
            with (out / "train.log").open("ab") as log:
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                           env=environment)  # fmt: skip
        except Exception as exc:  # whatever keeps one job from starting (a full disk, a data set gone) fails it alone
            _fail(session, job, f"could not start: {self._shown(str(exc))}")
            return False
        if free:  # before the interpreter has started torch's threads, which inherit it
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(process.pid, free[0])
            self.cpu_sets[job.id] = free[0]
        self.processes[job.id] = process
        threading.Thread(target=self._on_exit, args=(process,), daemon=True).start()
        job.pid, job.started_at = process.pid, job.started_at or datetime.now(UTC)
        session.commit()
        if job.id in self.cancelled:  # cancelled while it was being started
            os.killpg(process.pid, signal.SIGTERM)
        return True

    def _command(self, session: Session, job: Job, out: Path) -> list[str]:
        """`forklift train --resume` from the job's last checkpoint, or a new run on a fresh snapshot."""
        if (out / "model" / "checkpoints" / "last.pt").is_file():
            return [sys.executable, "-m", "forklift.cli", "train", "--resume", "--device", job.device,
                    str(out / "model")]  # fmt: skip
        dataset = session.get(DataSet, job.dataset_id)
        if dataset is None:
            raise ForkliftError("its data set was deleted")
        data = snapshot(session, dataset, self.root, out / "data", val_share=job.settings.get("val_share") or VAL_SHARE)
        return train_command(job, out, self.root, classes=len(data.classes))

    def _shown(self, said: str) -> str:
        """What a job's process or start said, its folders named as under the data directory (the page's reader
        knows the app, not the server's disk)."""
        return without_folder(said, self.root, called="the data directory")

    def _on_exit(self, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        self.notify()

    def _follow(self, session: Session, job: Job) -> None:
        out = self.root / job.out_dir
        job.epoch = len(progress(out))
        process = self.processes.get(job.id)
        code = process.poll() if process is not None else (None if _alive(job.pid, job.out_dir) else -1)
        if code is None:
            if job.device == CPU and job.id not in self.cpu_sets and job.pid is not None:  # an earlier app's
                with contextlib.suppress(ProcessLookupError):  # pinned job: its CPU set stays taken
                    pinned = tuple(sorted(os.sched_getaffinity(job.pid)))
                    if pinned in self.devices[CPU].cpu_sets:
                        self.cpu_sets[job.id] = pinned
            return
        self.processes.pop(job.id, None)
        self.cpu_sets.pop(job.id, None)
        job.finished_at = datetime.now(UTC)
        if code == 0 or (code == -1 and _finished_model(out)):  # -1: an earlier app's child
            job.state = JobState.DONE
            register_job(session, job, self.root)
        elif code == -1:
            job.state, job.error = (
                JobState.INTERRUPTED,
                "its process ended without a model directory; resume continues it",
            )
        elif code in (-signal.SIGTERM, 128 + signal.SIGTERM, 130):
            job.state = JobState.CANCELLED
        else:
            job.state = JobState.FAILED
            tail = (
                (out / "train.log").read_text(errors="replace").strip().splitlines()[-1:]
                if (out / "train.log").is_file()
                else []
            )
            job.error = self._shown(tail[0] if tail else f"exit code {code}")[:2000]


def _fail(session: Session, job: Job, error: str) -> None:
    job.state, job.error, job.finished_at = JobState.FAILED, error[:2000], datetime.now(UTC)
    session.commit()


def _finished_model(out: Path) -> bool:
    """Whether a job's folder holds the model directory its training writes last, when it ends well."""
    return (out / "model" / "forklift.json").is_file()


def _alive(pid: int | None, out_dir: str) -> bool:
    """Whether `pid` is still this job's training process."""
    return runs(pid, f"{out_dir}/".encode())
