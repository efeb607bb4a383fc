"""The app's records: users and their API tokens, data sets, their labels, images, annotations and videos.

Image and video files live on disk under the data directory (`forklift.app.storage`); a row names its file.
Annotations are rows of their own (label, kind, geometry), so counts, renames and merges are SQL, and each image
has a `version` that every change of its annotations bumps: a write that names an older version is refused
(409), which is how two people editing one image never overwrite each other silently.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

ROLES = ("viewer", "editor", "admin")  # each may do what the one before it may, and more
STATUSES = ("unlabelled", "labelled", "auto", "reviewed")
TRAINED_ON = ("labelled", "reviewed")  # by a person, or auto-labelled and reviewed: not auto labels unreviewed
SHAPES = ("box", "polygon")
IDS_NEVER_REUSED: dict[str, Any] = {"sqlite_autoincrement": True}  # every table's options (Base)


def _now() -> datetime:
    return datetime.now(UTC)


def new_session_key() -> str:
    """A fresh random session key for an account (`User.session_key`)."""
    return secrets.token_hex(16)


class Base(DeclarativeBase):
    """The app's tables. A removed row's id is never given to a new one (SQLite's AUTOINCREMENT; PostgreSQL's
    sequences never go back): a link or an open page naming a removed image must not reach the next image added."""

    __table_args__: Any = IDS_NEVER_REUSED


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(80), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=_now)
    # which of the account's session cookies are good: a cookie carries the key it was issued with, and logging out
    # draws a new one (a signed cookie cannot be taken back otherwise); random, so that an account added later
    # with a removed one's id does not take its cookies
    session_key: Mapped[str] = mapped_column(String(64), default=new_session_key)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(80))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # SHA-256 of the token: tokens are random
    created_at: Mapped[datetime] = mapped_column(default=_now)

    user: Mapped[User] = relationship()


class DataSet(Base):
    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True, index=True)  # a set is known by its name
    task: Mapped[str] = mapped_column(String(16))  # detect | classify
    created_at: Mapped[datetime] = mapped_column(default=_now)


class Label(Base):
    __tablename__ = "labels"
    __table_args__ = (UniqueConstraint("dataset_id", "name"), IDS_NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))


class LabelMerge(Base):
    """Where a label merged into another went: a page that still holds the old label (an editor open meanwhile)
    follows it there, as it follows a rename, rather than take it for deleted. Label ids are never reused, so the
    old id names only it; a target merged on is followed by its own record, and a target deleted takes these along."""

    __tablename__ = "label_merges"
    __table_args__ = (UniqueConstraint("label_id"), IDS_NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    label_id: Mapped[int] = mapped_column()  # the label merged away (gone from labels)
    into_id: Mapped[int] = mapped_column(ForeignKey("labels.id", ondelete="CASCADE"), index=True)


class Video(Base):
    __tablename__ = "videos"

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    file: Mapped[str] = mapped_column(String(300))  # relative to the data directory
    original_name: Mapped[str] = mapped_column(String(300))
    duration_s: Mapped[float] = mapped_column(Float)
    fps: Mapped[float] = mapped_column(Float)
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class Image(Base):
    __tablename__ = "images"
    __table_args__ = (UniqueConstraint("video_id", "video_ms"), IDS_NEVER_REUSED)  # a video's moment, captured once

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    file: Mapped[str] = mapped_column(String(300))  # relative to the data directory
    original_name: Mapped[str] = mapped_column(String(300))
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    split: Mapped[str] = mapped_column(String(8), default="train")
    status: Mapped[str] = mapped_column(String(16), default="unlabelled", index=True)
    class_id: Mapped[int | None] = mapped_column(ForeignKey("labels.id", ondelete="SET NULL"))  # classify sets
    class_model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id", ondelete="SET NULL"))  # an auto class's
    class_confidence: Mapped[float | None] = mapped_column(Float)  # an auto class's score (None: a person's class)
    version: Mapped[int] = mapped_column(Integer, default=1)
    video_id: Mapped[int | None] = mapped_column(ForeignKey("videos.id", ondelete="SET NULL"))
    video_ms: Mapped[int | None] = mapped_column(Integer)  # where in its video the frame was captured
    derived_from: Mapped[int | None] = mapped_column(ForeignKey("images.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=_now)


class Annotation(Base):
    __tablename__ = "annotations"

    id: Mapped[int] = mapped_column(primary_key=True)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"), index=True)
    label_id: Mapped[int] = mapped_column(ForeignKey("labels.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # box | polygon
    points: Mapped[list[Any]] = mapped_column(JSON)  # box: [x1, y1, x2, y2]; polygon: [[x, y], ...]; pixels
    source: Mapped[str] = mapped_column(String(8), default="human", server_default="human")  # human | auto
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id", ondelete="SET NULL"))  # an auto label's
    confidence: Mapped[float | None] = mapped_column(Float)  # an auto label's score


class JobState(StrEnum):
    """Where a training job or an auto-label run stands (one word for both, in the database and the API)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the app stopped while it ran: it may be resumed


ACTIVE = (JobState.QUEUED, JobState.RUNNING)  # not ended: what a cancel stops


class Job(Base):
    """A training run of a data set: a `forklift train` process of its own, never the web process."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    model: Mapped[str] = mapped_column(String(40))  # what is trained (forklift.app.jobs.MODELS)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)  # hyperparameters, as `forklift train` options
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED, index=True)  # a JobState
    device: Mapped[str] = mapped_column(String(16), default="cpu", server_default="cpu", index=True)  # cpu | cuda:N
    pid: Mapped[int | None] = mapped_column(Integer)
    out_dir: Mapped[str] = mapped_column(String(300))  # relative to the data directory
    created_by: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(default=_now)
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    epochs: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(2000))
    dataset: Mapped[DataSet] = relationship(lazy="joined")

    @property
    def dataset_name(self) -> str:
        """What the job's pages call its data set (a person knows it by name, not by number)."""
        return self.dataset.name


class Model(Base):
    """A model in the registry: a model directory under the data directory, with where it came from."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True, index=True)  # the lists offer models by name
    dir: Mapped[str] = mapped_column(String(300))  # relative to the data directory
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    dataset_id: Mapped[int | None] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"))
    dataset_digest: Mapped[str | None] = mapped_column(String(64))  # the data set as trained on (its snapshot's hash)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)  # eval.json's figures (no curves)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class Deployment(Base):
    """A model served by `forklift serve` on a port of its own, for as long as it is deployed."""

    __tablename__ = "deployments"

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True, unique=True)
    name: Mapped[str] = mapped_column(String(80))  # the served model's name in its URLs
    port: Mapped[int] = mapped_column(Integer)
    pid: Mapped[int | None] = mapped_column(Integer)
    created_by: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(default=_now)


class AutoLabelRun(Base):
    """A model labelling a data set's unlabelled images (or one video's frames) through forklift's serving."""

    __tablename__ = "autolabel_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id", ondelete="SET NULL"))
    video_id: Mapped[int | None] = mapped_column(ForeignKey("videos.id", ondelete="SET NULL"))  # only its frames
    threshold: Mapped[float] = mapped_column(Float)  # boxes scoring less are not kept
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED, index=True)  # a JobState
    total: Mapped[int] = mapped_column(Integer, default=0)  # images to label, counted when it starts
    done: Mapped[int] = mapped_column(Integer, default=0)
    boxes: Mapped[int] = mapped_column(Integer, default=0)
    created_by: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(default=_now)
    finished_at: Mapped[datetime | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(String(2000))
