"""The model registry: every finished training job becomes a model (its data set and that data set's version as
trained on, hyperparameters, metrics, model directory); models are renamed, deleted, exported as a zip (the model
directory plus its record, `model.json`) and imported from such a zip or from any model directory forklift can
load (Darknet, Caffe, ONNX, zipped)."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session
from zipstream import ZIP_DEFLATED, ZipStream

from forklift.app.columns import check_text
from forklift.app.names import flush_unique, numbered, unused_name
from forklift.app.schemas import ModelRecord
from forklift.app.storage import without_folder
from forklift.app.tables import DataSet, Job, Model
from forklift.data.interchange.archives import safe_extract
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.serve.responses import HttpError

RECORD = "model.json"
LEFT_OUT = ("checkpoints", "tensorboard")  # training state, not the model


def model_task(model_dir: Path, *, shown_from: Path | None = None) -> str:
    """What the model answers (detect, classify...): as forklift's engine reads it (a Darknet cfg says it only
    in its layers), so it loads the model, without running it. Why it cannot names the files relative to
    `shown_from` (the model directory, or the zip it came in): where the app keeps them is the server's business."""
    from forklift.runtime.load import load_predictor

    try:
        return str(load_predictor(open_model_dir(model_dir)).task)
    except Exception as exc:  # forklift's one line, or an engine's own error for a file it cannot read
        engine = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        said = str(exc) if isinstance(exc, ForkliftError) else f"{model_dir}: cannot be loaded: {engine}"
        raise ForkliftError(without_folder(said, shown_from or model_dir, called="the model")) from exc


def scalar_metrics(model_dir: Path) -> dict[str, Any]:
    """eval.json's single figures (mAP, top-1...), without its curves and matrices."""
    report = model_dir / "eval" / "eval.json"
    if not report.is_file():
        return {}
    found = json.loads(report.read_text(encoding="utf-8"))
    return {k: v for k, v in found.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def register_job(session: Session, job: Job, root: Path) -> Model:
    """The model of a finished job, recorded with its data set's digest as trained on."""
    out = root / job.out_dir
    index = out / "data" / "dataset.json"
    digest = hashlib.sha256(index.read_bytes()).hexdigest() if index.is_file() else None
    dataset = session.get(DataSet, job.dataset_id)
    name = unused_name(session, Model.name, dataset.name if dataset else "data set", numbered(f" #{job.id}"))
    model = Model(name=name, dir=f"{job.out_dir}/model", job_id=job.id, dataset_id=job.dataset_id,
                  dataset_digest=digest, settings={"model": job.model, **job.settings},
                  metrics=scalar_metrics(out / "model"))  # fmt: skip
    session.add(model)
    return model


def record(model: Model) -> dict[str, Any]:
    """What model.json holds beside the files: where the model came from and how it measured."""
    return {"name": model.name, "dataset_id": model.dataset_id, "dataset_digest": model.dataset_digest,
            "settings": model.settings, "metrics": model.metrics,
            "created_at": model.created_at.isoformat()}  # fmt: skip


def model_files(folder: Path) -> Iterator[tuple[Path, str]]:
    """(file, its name inside the model directory) of each file of the model, its training state left out."""
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and relative.parts[0] not in LEFT_OUT:
            yield path, str(relative)


def export_stream(model: Model, root: Path) -> Iterable[bytes]:
    """The model directory (less its training state) and model.json, zipped as it is sent."""
    stream = ZipStream(compress_type=ZIP_DEFLATED)
    for path, name in model_files(root / model.dir):
        stream.add_path(str(path), name)
    stream.add(json.dumps(record(model), indent=1).encode(), RECORD)
    return iter(stream)


def read_record(path: Path) -> ModelRecord:
    """model.json of an imported model, checked as any input is (an empty record where there is none); one line
    naming the field and the problem when it is not what an export writes."""
    if not path.is_file():
        return ModelRecord()
    try:
        return ModelRecord.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise ForkliftError(f"{RECORD}: {where}: {first['msg']}") from None


def import_zip(session: Session, archive: Path, root: Path, fallback_name: str) -> tuple[Model, list[str]]:
    """A model from a zip of a model directory (with or without model.json); unsafe entries refused by name."""
    folder = root / "models" / uuid.uuid4().hex
    try:
        extracted = safe_extract(archive, folder)
        inside = [p for p in folder.iterdir() if not p.name.startswith(".")]
        model_dir = inside[0] if len(inside) == 1 and inside[0].is_dir() else folder
        task = model_task(model_dir, shown_from=folder)  # a model forklift can load, or one line saying why not
        saved = read_record(model_dir / RECORD)
        check_text(Model, name=saved.name, dataset_digest=saved.dataset_digest)
        name = unused_name(session, Model.name, saved.name or fallback_name, numbered())
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # nothing of a refused zip stays, nor of one the disk had no room for
        raise
    model = Model(name=name, dir=str(model_dir.relative_to(root)),
                  dataset_digest=saved.dataset_digest, settings={**saved.settings, "task": task},
                  metrics=saved.metrics or scalar_metrics(model_dir))  # fmt: skip
    session.add(model)
    try:
        flush_unique(session, f"a model named {name!r} was made at the same moment: import this one again")
    except HttpError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    session.commit()
    return model, extracted.refused
