"""One-click deploy: a registered model served by `forklift serve` (pinned, batching workers) on a port of its
own, as long as it is deployed. Deployments outlive the app's process: an app started anew finds each serving
process again (its pid, checked against its command line) or starts it anew."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from forklift.app.processes import runs
from forklift.app.tables import Deployment, Model
from forklift.errors import ForkliftError
from forklift.serve.listening import local_url
from forklift.serve.process import ServerProcess, free_port
from forklift.vision.boxes import one_box_per_object

STOP_S = 30.0


def serving_process(model_dir: Path, name: str, *, host: str = "127.0.0.1", port: int | None = None) -> ServerProcess:
    """A new `forklift serve` of the model under `name` on `host`, once it answers /healthz; one line if it cannot."""
    return ServerProcess(f"{model_dir}={name}", "--instances", "1", host=host, port=port or free_port(), timeout=120)


def start_serving(model_dir: Path, name: str, *, host: str, port: int | None = None) -> tuple[int, int]:
    """(port, pid) of a deployment's server, which outlives this call (and the app). It listens where the app does
    (`host`): on loopback for an app on loopback, where people reach the app otherwise, so that its curl lines
    work from where the app's page is read."""
    server = serving_process(model_dir, name, host=host, port=port)
    return server.port, server.process.pid


def serving(deployment: Deployment, model_dir: Path) -> bool:
    """Whether the deployment's process is alive and is `forklift serve` of this model."""
    return runs(deployment.pid, b"serve", str(model_dir).encode())


def stop_serving(deployment: Deployment, model_dir: Path) -> None:
    """SIGTERM (the server drains), then wait for it to be gone, and reap it when this process started it (no
    defunct process left behind)."""
    if not serving(deployment, model_dir):
        return
    assert deployment.pid is not None
    os.kill(deployment.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    while serving(deployment, model_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    if serving(deployment, model_dir):
        os.kill(deployment.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # started by an earlier app process: not ours to reap
        os.waitpid(deployment.pid, 0)


def curl_lines(base: str, deployment: Deployment) -> dict[str, str]:
    """Ready-to-paste calls of the deployment at `base` (its URL): forklift's native protocol and PowerAI Vision's."""
    return {
        "native": f"curl -F files=@image.jpg {base}/predict/{deployment.name}",
        "powerai": f"curl -F files=@image.jpg {base}/api/dlapis/{deployment.name}",
    }


def predict(deployment: Deployment, host: str, content: bytes, filename: str, *, conf: float | None = None) -> dict:
    """The deployment's answer for one image (the app's test page sends images through here) at confidence `conf`
    and above (None: the model's own), an object found as two classes given once, as auto-labelling gives it
    (`one_box_per_object`)."""
    answer = httpx.post(f"{local_url(host, deployment.port)}/predict/{deployment.name}",
                        files={"files": (filename, content)}, data={} if conf is None else {"conf": str(conf)},
                        timeout=120)  # fmt: skip
    body = answer.json()
    for result in body.get("results", []):
        found = result.get("detections")
        if found:
            kept = one_box_per_object([(d["label"], d["score"], [d["bbox"][k] for k in ("x1", "y1", "x2", "y2")], d)
                                   for d in found])  # fmt: skip
            result["detections"] = [entry for *_, entry in kept]
    return {"status_code": answer.status_code, **body}


def deployed(session: Session, root: Path) -> Iterator[tuple[Deployment, Path]]:
    """Each deployment with its model's directory (those whose model is gone left out)."""
    for deployment in session.scalars(select(Deployment)):
        model = session.get(Model, deployment.model_id)
        if model is not None:
            yield deployment, root / model.dir


def restore(sessions: sessionmaker[Session], root: Path, lock: threading.Lock, host: str) -> None:
    """After an app start: every deployment whose server is gone is started again on `host` (on its port when
    free). It holds `lock` meanwhile, which undeploy takes too: a deployment is not undeployed half restarted."""
    with lock, sessions() as session:
        for deployment, model_dir in list(deployed(session, root)):
            if serving(deployment, model_dir):
                continue
            try:
                deployment.port, deployment.pid = start_serving(model_dir, deployment.name, host=host,
                                                                port=deployment.port)  # fmt: skip
            except ForkliftError:
                deployment.port, deployment.pid = start_serving(model_dir, deployment.name, host=host)
            session.commit()
