"""/api/deployments: deploy a registered model with forklift's serving, its endpoint and curl lines, a test call,
undeploy."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from sqlalchemy import select

from forklift.app import schemas
from forklift.app.deploy import curl_lines, predict, start_serving, stop_serving
from forklift.app.deps import Db, Editor, Files, RowId, Viewer
from forklift.app.names import flush_unique
from forklift.app.records import get_or_404
from forklift.app.tables import Deployment, Model
from forklift.errors import ForkliftError
from forklift.serve.listening import LOOPBACK, local_url
from forklift.serve.responses import HttpError

router = APIRouter(tags=["deployments"])


def deployment_out(request: Request, deployment: Deployment) -> schemas.DeploymentOut:
    """Its URL as people reach it: the app's address, or for an app on every address (0.0.0.0, ::) the host the
    page was asked by."""
    listens = request.app.state.config.host
    asked = request.url.hostname if listens in LOOPBACK else None  # LOOPBACK's keys: every address
    url = local_url(asked or listens, deployment.port)
    return schemas.DeploymentOut(id=deployment.id, model_id=deployment.model_id, name=deployment.name,
                                 port=deployment.port, url=url, curl=curl_lines(url, deployment),
                                 created_by=deployment.created_by)  # fmt: skip


@router.post("/api/models/{model_id}/deploy", status_code=201)
def deploy(model_id: RowId, request: Request, session: Db, storage: Files, who: Editor) -> schemas.DeploymentOut:
    model = get_or_404(session, Model, model_id)
    if session.scalar(select(Deployment).where(Deployment.model_id == model_id)) is not None:
        raise HttpError(409, f"model {model_id} is deployed already")
    name = f"model{model_id}"
    folder = storage.path(model.dir)
    try:
        port, pid = start_serving(folder, name, host=request.app.state.config.host)
    except ForkliftError as exc:
        raise HttpError(422, f"model {model.name!r} cannot be served: {str(exc).splitlines()[0]}") from exc
    deployment = Deployment(model_id=model_id, name=name, port=port, pid=pid, created_by=who.name)
    session.add(deployment)
    try:
        flush_unique(session, f"model {model_id} is deployed already")  # by another request in the meantime
    except HttpError:
        stop_serving(deployment, folder)
        raise
    session.commit()
    return deployment_out(request, deployment)


@router.get("/api/deployments")
def list_deployments(request: Request, session: Db, _: Viewer) -> list[schemas.DeploymentOut]:
    return [deployment_out(request, d) for d in session.scalars(select(Deployment).order_by(Deployment.id))]


@router.delete("/api/deployments/{deployment_id}", status_code=204)
def undeploy(deployment_id: RowId, request: Request, session: Db, storage: Files, _: Editor) -> None:
    """Stop serving: the workers end (after the requests in flight) and their port is free again. A deployment
    the app is restarting after its own start is stopped once it has started (its new process, not the old)."""
    with request.app.state.deploying:
        deployment = get_or_404(session, Deployment, deployment_id)
        session.refresh(deployment)
        model = get_or_404(session, Model, deployment.model_id)
        stop_serving(deployment, storage.path(model.dir))
        session.delete(deployment)
        session.commit()


@router.post("/api/deployments/{deployment_id}/predict")
def try_image(
    deployment_id: RowId, request: Request, file: Annotated[UploadFile, File()], session: Db, _: Viewer,
    conf: Annotated[float | None, Form(ge=0, le=1)] = None,
) -> dict:  # fmt: skip
    """The test page: one image through the deployment, its answer as the deployment gives it (at confidence
    `conf` and above when given, else the model's own threshold); what the deployment refuses (a file that is not
    an image), refused alike."""
    deployment = get_or_404(session, Deployment, deployment_id)
    answer = predict(deployment, request.app.state.config.host, file.file.read(), file.filename or "image", conf=conf)
    if answer["status_code"] >= 400:
        raise HttpError(answer["status_code"], str(answer.get("error") or answer))
    return answer
