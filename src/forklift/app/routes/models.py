"""/api/models: the model registry: list, look, rename, delete, export as a zip, import a zip, retrain (fine-tune
on its data set as labelled now)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from forklift.app import schemas
from forklift.app.deploy import stop_serving
from forklift.app.deps import Db, Editor, Files, RowId, Viewer
from forklift.app.headers import attachment
from forklift.app.jobs import JOB_RECORD, OPTIONS
from forklift.app.names import flush_unique
from forklift.app.records import file_name, get_or_404
from forklift.app.registry import export_stream, import_zip
from forklift.app.routes.jobs import job_out, queue_job
from forklift.app.storage import copy_limited
from forklift.app.tables import ACTIVE, DataSet, Deployment, Job, Model
from forklift.errors import ForkliftError
from forklift.serve.responses import HttpError

router = APIRouter(tags=["models"])


def model_out(model: Model) -> schemas.ModelOut:
    return schemas.ModelOut.model_validate(model, from_attributes=True)


@router.get("/api/models")
def list_models(session: Db, _: Viewer, task: schemas.LabelledTask | None = None) -> list[schemas.ModelOut]:
    """The registry, newest first; with `task`, only the models that answer it (trained here on a data set of that
    task, or imported as one: what an imported model answers is kept when it is imported)."""
    rows = session.execute(
        select(Model, DataSet.task).outerjoin(DataSet, Model.dataset_id == DataSet.id).order_by(Model.id.desc())
    )
    return [model_out(m) for m, trained_on in rows if task is None or (trained_on or m.settings.get("task")) == task]


@router.get("/api/models/{model_id}")
def get_model(model_id: RowId, session: Db, _: Viewer) -> schemas.ModelOut:
    return model_out(get_or_404(session, Model, model_id))


@router.patch("/api/models/{model_id}")
def rename_model(model_id: RowId, body: schemas.ModelRename, session: Db, _: Editor) -> schemas.ModelOut:
    model = get_or_404(session, Model, model_id)
    model.name = body.name
    flush_unique(session, f"a model named {body.name!r} exists already: the lists that offer models could not "
                         "tell the two apart")  # fmt: skip
    session.commit()
    return model_out(model)


@router.delete("/api/models/{model_id}", status_code=204)
def delete_model(model_id: RowId, request: Request, session: Db, storage: Files, _: Editor) -> None:
    """Remove a model from the registry with its files; a deployment of it is stopped first (its server would
    otherwise go on answering from files that are gone, with nothing in the app left to stop it). Refused while a
    job waits to fine-tune it or does; the record of the job that trained it (its epochs' metrics and its
    evaluation) stays with the job."""
    model = get_or_404(session, Model, model_id)
    waiting = [job.id for job in session.scalars(select(Job).where(Job.state.in_(ACTIVE)))
               if job.settings.get("from_model_id") == model.id]  # fmt: skip
    if waiting:
        raise HttpError(409, f"model {model.name!r}: training job {', '.join(map(str, waiting))} fine-tunes it; "
                             "cancel it on the Training page first, or let it end")  # fmt: skip
    folder = storage.path(model.dir)
    with request.app.state.deploying:
        for deployment in session.scalars(select(Deployment).where(Deployment.model_id == model.id)):
            stop_serving(deployment, folder)
            session.delete(deployment)
    trained_by = model.job_id
    session.delete(model)
    session.commit()
    if trained_by is None:
        shutil.rmtree(folder, ignore_errors=True)
    else:  # the job's page goes on showing how it trained
        for part in folder.iterdir() if folder.is_dir() else ():
            if part.name not in JOB_RECORD:
                shutil.rmtree(part) if part.is_dir() else part.unlink()


@router.get("/api/models/{model_id}/export", response_class=StreamingResponse)
def export_model(model_id: RowId, session: Db, storage: Files, _: Viewer) -> StreamingResponse:
    model = get_or_404(session, Model, model_id)
    name = file_name(model.name, "model")
    return StreamingResponse(export_stream(model, storage.root), media_type="application/zip",
                             headers={"Content-Disposition": attachment(f"{name}.zip")})  # fmt: skip


@router.post("/api/models/import", status_code=201)
def import_model(
    request: Request, file: Annotated[UploadFile, File()], session: Db, storage: Files, _: Editor,
    dataset_id: Annotated[int | None, Form()] = None,
) -> schemas.ModelImport:  # fmt: skip
    """A zip of a model directory (an export of this app, or Darknet, Caffe or ONNX files forklift can load);
    `dataset_id` names the data set it was trained on, so that Retrain fine-tunes it there."""
    dataset = get_or_404(session, DataSet, dataset_id) if dataset_id is not None else None
    with tempfile.TemporaryDirectory(dir=storage.root) as scratch:
        archive = Path(scratch) / "model.zip"
        try:
            copy_limited(file.file, archive, file.filename or "model.zip", limit=request.app.state.config.max_zip_bytes)
        except ForkliftError as exc:
            raise HttpError(413, str(exc)) from exc
        try:
            model, refused = import_zip(session, archive, storage.root, Path(file.filename or "model").stem)
        except ForkliftError as exc:
            raise HttpError(422, f"{file.filename}: {exc}") from exc
    if dataset is not None:
        model.dataset_id = dataset.id
        session.commit()
    return schemas.ModelImport(model=model_out(model), refused=refused)


@router.post("/api/models/{model_id}/retrain", status_code=201)
def retrain(
    model_id: RowId, request: Request, session: Db, who: Editor, body: schemas.RetrainIn | None = None
) -> schemas.JobOut:
    """The next round of the loop in one action: a job fine-tuning this model on its data set's labelled and
    reviewed images, with the model's own settings unless given."""
    model = get_or_404(session, Model, model_id)
    dataset = session.get(DataSet, model.dataset_id) if model.dataset_id is not None else None
    if dataset is None:
        raise HttpError(422, f"model {model.name!r}: its data set is not in this app; train a new job instead")
    previous = {k: v for k, v in model.settings.items() if k in (*OPTIONS, "val_share")}
    given = body.model_dump(exclude={"device"}, exclude_none=True) if body is not None else {}
    settings = {"epochs": 30, **previous, **given, "from_model": model.dir, "from_model_id": model.id}
    kind = str(model.settings.get("model", "yolov3-tiny"))
    runner, device = request.app.state.jobs, body.device if body is not None else None
    return job_out(queue_job(session, dataset, kind, settings, who=who.name, runner=runner, device=device))
