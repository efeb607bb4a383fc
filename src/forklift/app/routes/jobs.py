"""/api/jobs: training jobs of a data set: start, list, follow (metrics per epoch), cancel, resume."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, StreamingResponse
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from forklift.app import schemas
from forklift.app.deps import Db, Editor, RowId, Viewer
from forklift.app.devices import CPU
from forklift.app.estimate import estimate_training
from forklift.app.jobs import MODELS, PRETRAINED, JobRunner, progress, start_notes
from forklift.app.records import get_or_404, model_for
from forklift.app.storage import Storage
from forklift.app.tables import ACTIVE, TRAINED_ON, DataSet, Image, Job, JobState, Model
from forklift.pretrained.catalogue import catalogue_path, load_catalogue
from forklift.pretrained.fetch import cache_root
from forklift.pretrained.pull import cache_state
from forklift.serve.responses import HttpError

router = APIRouter(tags=["training jobs"])
EVENT_POLL_S = 1.0  # a watched job's metrics.csv is read this often (an epoch takes longer)
MAX_STREAMS = 4  # job event streams an account may have open at once


def job_out(job: Job) -> schemas.JobOut:
    return schemas.JobOut.model_validate(job, from_attributes=True)


@router.post("/api/datasets/{dataset_id}/jobs", status_code=201)
def start_job(dataset_id: RowId, body: schemas.JobIn, request: Request, session: Db, who: Editor) -> schemas.JobOut:
    """Queue a training job on the data set's labelled images; it starts when the machine is free."""
    dataset = get_or_404(session, DataSet, dataset_id)
    model = _model_of(dataset, body.model)
    settings = body.model_dump(exclude={"model", "device", "from_model_id"}, exclude_none=True)
    if body.pretrained is not None and body.from_model_id is not None:
        raise HttpError(422, f"pretrained {body.pretrained}: start from it or from a registered model, not both")
    if body.pretrained is not None and model not in PRETRAINED:
        raise HttpError(
            422, f"pretrained {body.pretrained}: {model} has none ({' and '.join(PRETRAINED)} have); start it fresh"
        )
    if body.from_model_id is not None:
        start = model_for(session, request.app.state.storage, body.from_model_id, dataset)
        settings.update(from_model=start.dir, from_model_id=start.id)
    runner = request.app.state.jobs
    return job_out(queue_job(session, dataset, model, settings, who=who.name, runner=runner, device=body.device))


@router.get("/api/pretrained")
def pretrained_starts(_: Viewer) -> list[schemas.PretrainedOut]:
    """The models a job can start from COCO's weights (the Train form offers them), pulled already or not."""
    catalogue, cache = load_catalogue(catalogue_path()), cache_root()
    found = [(model, catalogue[name]) for model, name in PRETRAINED.items() if name in catalogue]
    return [
        schemas.PretrainedOut(
            model=model,  # type: ignore[arg-type]  # PRETRAINED's keys are trained models
            name=entry.name,
            cached=cache_state(entry, cache) == "yes",
            mib=None if entry.approximate_bytes is None else round(entry.approximate_bytes / 2**20, 1),
        )
        for model, entry in found
    ]


@router.get("/api/datasets/{dataset_id}/jobs/estimate")
def estimate_job(dataset_id: RowId, request: Request, session: Db, _: Viewer,
                 form: Annotated[schemas.EstimateIn, Query()]) -> schemas.EstimateOut:  # fmt: skip
    """How long a job of these settings would take on this data set as labelled now (the Train form shows it)."""
    dataset = get_or_404(session, DataSet, dataset_id)
    model = _model_of(dataset, form.model)
    labelled = session.scalar(
        select(func.count(Image.id)).where(Image.dataset_id == dataset.id, Image.status.in_(TRAINED_ON))
    )
    device = form.device or (next((d for d in request.app.state.jobs.devices if d != CPU), CPU))
    found = estimate_training(session, request.app.state.config.data_dir, model=model, device=device, img=form.img,
                              epochs=form.epochs, images=round((labelled or 0) * (1 - form.val_share)))  # fmt: skip
    return schemas.EstimateOut(seconds=found.seconds, basis=found.basis)


def _model_of(dataset: DataSet, asked: str | None) -> str:
    """The model a job of the data set trains: the one asked for (if the data set's task trains it), else the first."""
    kinds = MODELS[dataset.task]
    model = asked or next(iter(kinds))
    if model not in kinds:
        raise HttpError(422, f"model {model}: a {dataset.task} data set trains {' or '.join(kinds)}")
    return model


def queue_job(
    session: Session, dataset: DataSet, model: str, settings: dict, *, who: str, runner: JobRunner, device: str | None
) -> Job:
    """A new queued job of the data set (refused when nothing in it is labelled to train on) for `device` (None:
    the machine's GPU with the shortest queue, or the CPU where there is none), announced to the runner."""
    labelled = select(Image.id).where(Image.dataset_id == dataset.id, Image.status.in_(TRAINED_ON)).limit(1)
    if session.scalar(labelled) is None:
        raise HttpError(422, f"data set {dataset.name!r}: no labelled (or reviewed) images to train on")
    if device is None:
        waiting = _waiting(session)
        device = min([name for name in runner.devices if name != CPU] or [CPU], key=lambda name: waiting[name])
    device = _known_device(runner, device)
    job = Job(dataset_id=dataset.id, model=model, settings=settings, out_dir="", created_by=who, device=device,
              epochs=settings["epochs"])  # fmt: skip
    session.add(job)
    session.flush()
    job.out_dir = _new_out_dir(runner.root, job.id)
    session.commit()
    runner.notify()
    return job


def _new_out_dir(root: Path, job_id: int) -> str:
    """``jobs/N``, or ``jobs/N-2``, ``-3``... where a deleted job of that number left its folder: SQLite hands the
    number of a deleted last row out again, and that job's model (which outlives it) may still be in the folder."""
    name, copy = f"jobs/{job_id}", 1
    while (root / name).exists():
        copy += 1
        name = f"jobs/{job_id}-{copy}"
    return name


def _known_device(runner: JobRunner, device: str) -> str:
    if device not in runner.devices:
        raise HttpError(422, f"device {device}: this machine has {', '.join(runner.devices)}")
    return device


def _waiting(session: Session) -> Counter[str]:
    """Jobs queued or running, by device."""
    return Counter(session.scalars(select(Job.device).where(Job.state.in_(ACTIVE))))


@router.get("/api/devices")
def list_devices(request: Request, session: Db, _: Viewer) -> list[schemas.DeviceOut]:
    """What jobs can train on: the machine's GPUs and its CPU, how many jobs each runs at once, and its queue."""
    runner: JobRunner = request.app.state.jobs
    listed = session.execute(select(Job.device, Job.state).where(Job.state.in_(ACTIVE)))
    states = Counter((device, state) for device, state in listed)
    return [
        schemas.DeviceOut(name=d.name, label=d.label, slots=runner.slots, running=states[(d.name, JobState.RUNNING)],
                          queued=states[(d.name, JobState.QUEUED)])
        for d in runner.devices.values()
    ]  # fmt: skip


@router.get("/api/jobs")
def list_jobs(request: Request, session: Db, _: Viewer) -> list[schemas.JobOut]:
    storage = request.app.state.storage
    return [_counted(job, storage) for job in session.scalars(select(Job).order_by(Job.id.desc()))]


@router.get("/api/jobs/{job_id}")
def get_job(job_id: RowId, request: Request, session: Db, _: Viewer) -> schemas.JobOut:
    return _counted(get_or_404(session, Job, job_id), request.app.state.storage)


def _counted(job: Job, storage: Storage) -> schemas.JobOut:
    """The job with the epochs its run has recorded so far: the runner reads the count only every FOLLOW_S, and
    the list would trail the job's own page (its chart) by an epoch or two."""
    shown = job_out(job)
    if job.state == JobState.RUNNING:
        shown.epoch = max(shown.epoch, len(progress(storage.path(job.out_dir))))
    return shown


@router.get("/api/jobs/{job_id}/start")
def job_start(job_id: RowId, request: Request, session: Db, _: Viewer) -> list[str]:
    """What the job starts from, as its run said it: the model, and which classes keep their head weights and
    which start fresh (empty before the run begins, or when it starts from fresh weights)."""
    job, storage = get_or_404(session, Job, job_id), request.app.state.storage
    known_as = {}
    if job.settings.get("from_model"):  # the folder the run names is the server's business: the model's name instead
        start = session.get(Model, job.settings.get("from_model_id"))
        known_as[str(storage.path(job.settings["from_model"]))] = (
            f"model {start.name!r}" if start is not None else "a model since deleted from the registry"
        )
    return start_notes(storage.path(job.out_dir), known_as=known_as)


@router.get("/api/jobs/{job_id}/metrics")
def job_metrics(job_id: RowId, request: Request, session: Db, _: Viewer) -> list[dict[str, str]]:
    """metrics.csv so far: one row per epoch (loss terms, learning rate, images/s, val metrics)."""
    job = get_or_404(session, Job, job_id)
    return progress(request.app.state.storage.path(job.out_dir))


EVAL_PICTURES = ("pr-curves", "confusion")  # what forklift eval draws into the model directory's eval/


@router.get("/api/jobs/{job_id}/evaluation")
def job_evaluation(job_id: RowId, request: Request, session: Db, _: Viewer) -> dict:
    """The finished model's evaluation on val, as `forklift eval` wrote it (eval.json: mAP, per-class AP, precision
    and recall at its threshold, the confusion matrix and PR curves), with the URLs of its two pictures."""
    job = get_or_404(session, Job, job_id)
    report = request.app.state.storage.path(f"{job.out_dir}/model/eval/eval.json")
    if not report.is_file():
        if job.state == "done":  # training measures on val images: a set this small kept none apart
            raise HttpError(404, f"job {job_id}'s model was not measured: no image was held out to validate on (too "
                                 f"few labelled images for its validation share); label more, or give the data set "
                                 f"a val split")  # fmt: skip
        raise HttpError(404, f"job {job_id} has no evaluation (it is {job.state})")
    found = json.loads(report.read_text(encoding="utf-8"))
    for on_the_server in ("model", "data"):  # paths that mean nothing to the page
        found.pop(on_the_server, None)
    found["pictures"] = {name: f"/api/jobs/{job_id}/evaluation/{name}.png" for name in EVAL_PICTURES
                         if (report.parent / f"{name}.png").is_file()}  # fmt: skip
    return dict(found)


@router.get("/api/jobs/{job_id}/evaluation/{name}.png", response_class=FileResponse)
def job_evaluation_picture(job_id: RowId, name: str, request: Request, session: Db, _: Viewer) -> FileResponse:
    job = get_or_404(session, Job, job_id)
    if name not in EVAL_PICTURES:
        raise HttpError(404, f"{name}.png: the evaluation draws {', '.join(EVAL_PICTURES)}")
    picture = request.app.state.storage.path(f"{job.out_dir}/model/eval/{name}.png")
    if not picture.is_file():
        raise HttpError(404, f"job {job_id} has no {name}.png (it is {job.state})")
    return FileResponse(picture, media_type="image/png")


@router.get("/api/jobs/{job_id}/events", response_class=StreamingResponse)
async def job_events(job_id: RowId, request: Request, who: Viewer) -> StreamingResponse:
    """Server-sent events while the job lives: `epoch` with each new metrics.csv row (loss terms, lr, images/s,
    val metrics), `state` with the job whenever its state or progress changes; the stream ends with the job, or
    when the client goes. Between events it holds neither a database connection nor a thread, and an account
    has at most MAX_STREAMS open at once (a 429 past that)."""
    sessions = request.app.state.sessionmaker
    out_dir = request.app.state.storage.path(await run_in_threadpool(_out_dir, sessions, job_id))  # a 404 first
    streams: Counter[str] = request.app.state.event_streams
    if streams[who.name] >= MAX_STREAMS:
        raise HttpError(429, f"{who.name} has {MAX_STREAMS} job event streams open already; close one first")
    streams[who.name] += 1

    async def events() -> AsyncIterator[str]:
        try:
            sent_epoch, last = 0, None
            while True:
                job = await run_in_threadpool(_job_now, sessions, job_id)
                for row in await run_in_threadpool(progress, out_dir):
                    if int(row["epoch"]) > sent_epoch:  # by epoch, not by row: a resumed run rewrites the file
                        yield f"event: epoch\ndata: {json.dumps(row)}\n\n"
                        sent_epoch = int(row["epoch"])
                # the runner reads the epoch count every FOLLOW_S: the rows sent may be ahead; the badge must not lag
                shown = job.model_copy(update={"epoch": max(job.epoch, sent_epoch)}).model_dump_json()
                if shown != last:
                    yield f"event: state\ndata: {shown}\n\n"
                    last = shown
                else:
                    yield ":\n\n"  # a comment, which clients ignore: sending it finds a client that has gone
                if job.state not in ACTIVE:
                    return
                await asyncio.sleep(EVENT_POLL_S)
        finally:
            streams[who.name] -= 1

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _out_dir(sessions: sessionmaker[Session], job_id: int) -> str:
    with sessions() as session:
        return get_or_404(session, Job, job_id).out_dir


def _job_now(sessions: sessionmaker[Session], job_id: int) -> schemas.JobOut:
    """The job as it is now, read in a session of its own that ends at once."""
    with sessions() as session:
        return job_out(get_or_404(session, Job, job_id))


@router.post("/api/jobs/{job_id}/cancel")
def cancel_job(job_id: RowId, request: Request, session: Db, _: Editor) -> schemas.JobOut:
    job = get_or_404(session, Job, job_id)
    if job.state not in ACTIVE:
        raise HttpError(409, f"job {job_id} is {job.state}: nothing to cancel")
    unstarted = update(Job).where(Job.id == job_id, Job.state == JobState.QUEUED).values(state=JobState.CANCELLED)
    if session.execute(unstarted).rowcount != 1:  # type: ignore[attr-defined]  # the runner started it meanwhile
        session.refresh(job)
        request.app.state.jobs.cancel(job)
    session.commit()
    session.refresh(job)
    return job_out(job)


@router.post("/api/jobs/{job_id}/resume")
def resume_job(
    job_id: RowId, request: Request, session: Db, _: Editor, body: schemas.ResumeIn | None = None
) -> schemas.JobOut:
    """Queue an interrupted, cancelled or failed job again: it continues from its last checkpoint (on another
    device if asked)."""
    job = get_or_404(session, Job, job_id)
    if job.state not in (JobState.INTERRUPTED, JobState.CANCELLED, JobState.FAILED):
        raise HttpError(409, f"job {job_id} is {job.state}: only an interrupted, cancelled or failed job resumes")
    if body is not None and body.device is not None:
        job.device = _known_device(request.app.state.jobs, body.device)
    job.state, job.finished_at = JobState.QUEUED, None
    session.commit()
    request.app.state.jobs.notify()
    return job_out(job)
