"""The auto-label loop: a registered model labels a data set's unlabelled images (or one video's frames) through
forklift's serving, so the web process never runs a network. A deployed model is called where it is served; any
other is served for the run and stopped after it.

Each auto label (a box, or a classification image's class) keeps its source, model and confidence; its image
becomes `auto` and waits in the review queue (lowest confidence first) until a person accepts it, corrects it in
the editor (both make it `reviewed`, which trains like `labelled`) or rejects it (back to `unlabelled`). An image
a person labelled while the run went on is left as the person left it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from forklift.app.background import Follower
from forklift.app.deploy import serving, serving_process
from forklift.app.records import label_named, labels_named, next_version
from forklift.app.tables import Annotation, AutoLabelRun, DataSet, Deployment, Image, JobState, Model
from forklift.errors import ForkliftError
from forklift.serve.listening import local_url
from forklift.vision.boxes import one_box_per_object
from forklift.vocabulary import Task

IDLE_S = 10.0  # a look for runs no route announced (another app process's)
CHUNK = 8  # images per request: the server batches them
TIMEOUT_S = 300.0


class AutoLabeler(Follower):
    """Runs queued auto-label runs one at a time; a thread of the app, woken by the route that queues a run."""

    name = "forklift-autolabel"

    def __init__(self, sessions: sessionmaker[Session], root: Path, *, host: str) -> None:
        super().__init__()
        self.sessions, self.root, self.host = sessions, root, host  # host: where the app's deployments listen

    def recover(self) -> None:
        """A run that was running when the app stopped is interrupted (resuming it labels the images still
        unlabelled)."""
        with self.sessions() as session:
            session.execute(update(AutoLabelRun).where(AutoLabelRun.state == JobState.RUNNING)
                            .values(state=JobState.INTERRUPTED, error="the app stopped while it ran"))  # fmt: skip
            session.commit()

    def pause(self) -> float:
        return IDLE_S

    def step(self) -> None:
        with self.sessions() as session:
            queued = session.scalar(
                select(AutoLabelRun.id).where(AutoLabelRun.state == JobState.QUEUED).order_by(AutoLabelRun.id).limit(1)
            )
        if queued is not None:
            self._run(queued)
            self.notify()  # the next one, if any, at once

    def _run(self, run_id: int) -> None:
        with self.sessions() as session:
            run = session.get(AutoLabelRun, run_id)
            assert run is not None
            model = session.get(Model, run.model_id) if run.model_id is not None else None
            todo = select(Image.id).where(Image.dataset_id == run.dataset_id, Image.status == "unlabelled")
            if run.video_id is not None:
                todo = todo.where(Image.video_id == run.video_id)
            ids = list(session.scalars(todo.order_by(Image.id)))
            run.state, run.total, run.done, run.error = JobState.RUNNING, len(ids), 0, None
            session.commit()
            deployment = session.scalar(select(Deployment).where(Deployment.model_id == run.model_id))
            served = deployment is not None and model is not None and serving(deployment, self.root / model.dir)
            endpoint = (local_url(self.host, deployment.port), deployment.name) if served and deployment else None
            model_dir = self.root / model.dir if model is not None else None
        state, error = JobState.DONE, None
        try:
            if model_dir is None:
                raise ForkliftError("its model was deleted")
            with _endpoint(model_dir, endpoint) as url:
                for start in range(0, len(ids), CHUNK):
                    if self.stopping.is_set() or not self._label(run_id, ids[start : start + CHUNK], url):
                        state = JobState.INTERRUPTED if self.stopping.is_set() else JobState.CANCELLED
                        break
        except (ForkliftError, httpx.HTTPError, OSError, KeyError, ValueError) as exc:  # the run fails, in a line
            state, error = JobState.FAILED, str(exc).splitlines()[0][:2000] if str(exc) else type(exc).__name__
        with self.sessions() as session:
            run = session.get(AutoLabelRun, run_id)
            assert run is not None
            if run.state == JobState.RUNNING:  # not cancelled meanwhile
                run.state, run.error = state, error or run.error  # a run that ends keeps the image it skipped
            run.finished_at = datetime.now(UTC)
            session.commit()

    def _label(self, run_id: int, ids: list[int], url: str) -> bool:
        """Label these images (those still unlabelled); False when the run was cancelled."""
        with self.sessions() as session:
            run = session.get(AutoLabelRun, run_id)
            assert run is not None
            if run.state != JobState.RUNNING:
                return False
            images = list(session.scalars(select(Image).where(Image.id.in_(ids), Image.status == "unlabelled")))
            files = [("files", (Path(image.file).name, (self.root / image.file).read_bytes())) for image in images]
            threshold = run.threshold
        if files:
            answer = httpx.post(url, files=files, data={"conf": str(threshold)}, timeout=TIMEOUT_S)
            if answer.status_code != 200:
                raise ForkliftError(f"the model's server answered {answer.status_code}: {answer.text[:300]}")
            results = answer.json()["results"]
        else:
            results = []
        with self.sessions() as session:
            run = session.get(AutoLabelRun, run_id)
            assert run is not None
            task = session.scalar(select(DataSet.task).where(DataSet.id == run.dataset_id))
            for image, result in zip(images, results, strict=True):
                if "error" in result:  # the image stays unlabelled; the run says which and goes on
                    run.error = run.error or f"{image.original_name}: {result['error']}"[:2000]
                elif task == Task.CLASSIFY:
                    run.boxes += _keep_class(session, image, result["classes"], threshold, run.model_id)
                else:
                    run.boxes += _keep_boxes(session, image, result["detections"], threshold, run.model_id)
            run.done += len(ids)
            session.commit()
        return True


def _claimed(session: Session, image: Image) -> bool:
    """Whether the image was still unlabelled and unchanged, and is now `auto` (else a person labelled it
    meanwhile, and it is left as they left it)."""
    return next_version(session, image.id, image.version, Image.status == "unlabelled", status="auto")


def _keep_class(session: Session, image: Image, classes: list[dict], threshold: float, model_id: int | None) -> int:
    """The best class as the image's, if it scores at least `threshold`; 1 if kept."""
    if not _claimed(session, image):
        return 0
    best = max(classes, key=lambda found: float(found["score"]), default=None)
    if best is None or float(best["score"]) < threshold:
        return 0
    label = label_named(session, image.dataset_id, str(best["label"]), create=True)
    values = {"class_id": label.id, "class_model_id": model_id, "class_confidence": float(best["score"])}
    session.execute(update(Image).where(Image.id == image.id).values(**values))
    return 1


def _keep_boxes(session: Session, image: Image, detections: list[dict], threshold: float, model_id: int | None) -> int:
    """The detections at `threshold` or above, clipped to the image, one per object, as its auto labels; how many
    were kept."""
    if not _claimed(session, image):
        return 0
    boxes = []
    for found in detections:
        box = found["bbox"]
        x1, y1 = max(0.0, float(box["x1"])), max(0.0, float(box["y1"]))
        x2, y2 = min(float(image.width), float(box["x2"])), min(float(image.height), float(box["y2"]))
        if float(found["score"]) >= threshold and x2 > x1 and y2 > y1:
            boxes.append((str(found["label"]), float(found["score"]), [x1, y1, x2, y2]))
    kept = one_box_per_object(boxes)
    labels = labels_named(session, image.dataset_id, [label for label, _, _ in kept])
    for label, score, points in kept:
        session.add(Annotation(image_id=image.id, label_id=labels[label].id, kind="box", points=points, source="auto",
                               model_id=model_id, confidence=score))  # fmt: skip
    return len(kept)


@contextlib.contextmanager
def _endpoint(model_dir: Path, deployed: tuple[str, str] | None) -> Iterator[str]:
    """The native predict URL of the model: its deployment's (its URL, its name), or a server started for the run."""
    if deployed is not None:
        yield f"{deployed[0]}/predict/{deployed[1]}"
        return
    with serving_process(model_dir, "autolabel") as server:
        yield f"{server.url}/predict/autolabel"
