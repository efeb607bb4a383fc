"""The JSON the API takes and gives (pydantic models: FastAPI validates with them and documents them in
/openapi.json)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat

from forklift.app.security import MAX_PASSWORD
from forklift.app.tables import JobState
from forklift.vocabulary import Split, Task

LabelledTask = Literal[Task.DETECT, Task.CLASSIFY]  # the tasks whose labels the app edits: boxes, an image's class
Status = Literal["unlabelled", "labelled", "auto", "reviewed"]
# A time as the API gives it: in UTC, marked so ("...Z"); SQLite gives back what was stored without its zone.
Moment = Annotated[datetime, AfterValidator(lambda moment: moment if moment.tzinfo else moment.replace(tzinfo=UTC))]
NAME_PATTERN = r"^\S(.*\S)?$"  # a name neither starts nor ends with a space (the page trims what is typed)
Name = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
ACCOUNT_NAME = r"^[^\x00]+$"  # no NUL, which PostgreSQL refuses even in a query (SQLite would look it up)
MAX_SHAPES = 10_000  # an image's shapes in one save: a crowd's thousands, not a request that holds the app for seconds
MAX_NEW_LABELS = 100  # labels one save may add to its data set (a typo makes one; a script's loop thousands)
MAX_POINTS = 10_000  # a polygon's points: a traced outline's hundreds, not a request that fills a row with megabytes
MAX_ID = 2**31 - 1  # what every database's integer column holds
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
Point = Annotated[list[StrictFloat], Field(min_length=2, max_length=2)]  # [x, y]


class Input(BaseModel):
    """A request's body: a field it does not have is refused (422 naming it), not ignored: a typo such as
    `clas_label` would otherwise save the image without its class, unsaid."""

    model_config = ConfigDict(extra="forbid")


class LabelCount(BaseModel):
    id: int
    name: str
    count: int  # boxes and polygons (detect) or images (classify) with this label, that a person labelled or reviewed
    unreviewed: int = 0  # the same in a model's labels waiting for review


class ErrorOut(BaseModel):
    """Every error's body: one line naming the input and the problem."""

    status: Literal["error"]
    error: str


class DataSetIn(Input):
    name: str = Name
    task: LabelledTask = Task.DETECT


class DataSetRename(Input):
    name: str = Name


class LabelMergeOut(BaseModel):
    label_id: int  # a label merged away
    into_id: int  # the label its uses went to (as it is now: a merge of that one is followed too)


class DataSetOut(BaseModel):
    id: int
    name: str
    task: Task
    created_at: Moment
    images: int
    labelled: int  # images labelled by a person or reviewed: what training takes
    to_review: int  # images whose auto labels wait in the review queue
    jobs: int  # training jobs of the set (their records go with it; the models they made stay in the registry)
    running: int  # its training jobs and auto-label runs queued or running: the set cannot be deleted meanwhile
    merges: list[LabelMergeOut]  # where its merged labels went: a page holding one follows it
    labels: list[LabelCount]
    thumbnail: str | None  # the first image's thumbnail URL


class Shape(BaseModel):  # not an Input: a GET's shapes (with source, model_id, confidence) go back as they are
    kind: Literal["box", "polygon"]
    label: str = Name
    # box: [x1, y1, x2, y2]; polygon: [[x, y], ...], pixels; numbers only (true or "5" is not a coordinate)
    points: list[StrictFloat] | list[Point]


class ShapeOut(Shape):
    source: Literal["human", "auto"]  # drawn by a person, or found by a model (auto-label)
    model_id: int | None  # an auto label's model
    confidence: float | None = Field(ge=0, le=1)  # an auto label's score (NaN is not one)


class AnnotationsIn(Input):
    version: int = Field(ge=0, le=MAX_ID)  # the version these edits start from: an older one is refused (409)
    shapes: list[Shape] = Field(default=[], max_length=MAX_SHAPES)
    class_label: str | None = None  # classify sets
    status: Status | None = None  # default: labelled when anything is labelled, else unlabelled
    # each label name the shapes (or class) took from the data set, with its id as the page loaded it: one renamed,
    # merged or deleted since is refused (409), not made again under its old name beside the other's change
    labels_seen: dict[str, Id] = Field(default_factory=dict, max_length=MAX_SHAPES + 1)


class AnnotationsOut(BaseModel):
    image_id: int
    version: int
    status: Status
    shapes: list[ShapeOut]
    class_label: str | None
    class_model_id: int | None = None  # a classification image's class as a model gave it, until a person changes it
    class_confidence: float | None = None


class ImageOut(BaseModel):
    id: int
    dataset_id: int
    original_name: str
    width: int
    height: int
    split: Split
    status: Status
    class_label: str | None
    version: int
    file: str  # URL of the image
    thumbnail: str  # URL of its thumbnail
    video_id: int | None
    video_time_s: float | None
    derived_from: int | None
    shapes: int = 0  # its boxes and polygons (a person's and a model's), shown on its thumbnail


class ImagePage(BaseModel):
    total: int
    offset: int
    items: list[ImageOut]


class Neighbours(BaseModel):
    previous: int | None
    next: int | None
    previous_frame: int | None  # video frames: the one captured just before


class UploadResult(BaseModel):
    added: list[ImageOut]
    refused: list[str]  # one line per file: its name and the problem
    changed: list[str] = []  # what an import changed of the labels it added (crowd regions skipped, ...)


class BulkIn(Input):
    image_ids: list[Id] = Field(min_length=1, max_length=10_000)
    action: Literal["delete", "split", "class", "unclass"]  # unclass: a classification image unlabelled again
    split: Split | None = None
    class_label: str | None = None
    labels_seen: dict[str, Id] = Field(default_factory=dict, max_length=1)  # the class as the page loaded it


class AugmentIn(Input):
    image_ids: list[Id] = Field(min_length=1, max_length=1000)
    variants: int = Field(default=3, ge=1, le=20)  # per image
    operations: list[Literal["flip", "rotate", "blur", "sharpen", "colour", "crop", "noise"]] = Field(
        default=["flip", "rotate", "blur", "sharpen", "colour", "crop", "noise"], min_length=1
    )
    seed: int = Field(default=0, ge=0, le=MAX_ID)


class BulkOut(BaseModel):
    changed: int


class LabelIn(Input):
    name: str = Name


class LabelChange(Input):
    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN)  # rename to this
    merge_into: Id | None = None  # move its annotations to this label and delete it


class VideoOut(BaseModel):
    id: int
    dataset_id: int
    original_name: str
    duration_s: float
    fps: float
    width: int
    height: int
    file: str  # URL of the video
    frames: int  # images captured from it


class CaptureIn(Input):
    every_s: float | None = Field(default=None, gt=0, le=86_400)  # a frame every this many seconds
    from_s: float = Field(default=0, ge=0, le=86_400)  # ... from this time
    to_s: float | None = Field(default=None, gt=0, le=86_400)  # ... to this one, with it (default: the end)
    at_s: list[float] | None = Field(default=None, max_length=5000)  # or the frames at these times


class CaptureOut(BaseModel):
    added: list[ImageOut]
    skipped: int  # times already captured


class LoginIn(Input):
    name: str = Field(min_length=1, max_length=80, pattern=ACCOUNT_NAME)
    password: str = Field(min_length=1, max_length=MAX_PASSWORD)


class SessionOut(BaseModel):
    name: str
    role: str
    local: bool
    csrf: str | None = None


class UserOut(BaseModel):
    name: str
    role: Literal["viewer", "editor", "admin"]
    created_at: Moment


DeviceName = Annotated[str, Field(pattern=r"^(cpu|cuda:[0-9]{1,2})$")]  # as `forklift train --device` takes it


class DeviceOut(BaseModel):
    name: str
    label: str
    slots: int  # jobs at once
    running: int
    queued: int


# what a job trains (forklift.app.jobs.MODELS): detection optimized for speed (the slim one: on CPUs) or for
# accuracy; classification: the app's classifier
TrainedModel = Literal["yolov3-tiny", "yolov3-tiny-slim", "faster-rcnn", "small-classifier"]


class JobIn(Input):
    model: TrainedModel | None = None  # default: yolov3-tiny or small-classifier, by the data set's task
    epochs: int = Field(default=30, ge=1, le=10_000)
    batch: int = Field(default=16, ge=1, le=1024)
    img: int | None = Field(default=None, ge=32, le=4096, multiple_of=32)
    lr: float | None = Field(default=None, gt=0, le=10)
    weight_decay: float | None = Field(default=None, ge=0, le=1)
    val_every: int | None = Field(default=None, ge=1, le=10_000)  # validate every N epochs (and at the last)
    val_share: float | None = Field(default=None, ge=0.05, le=0.5)  # held out for val where the set has no val split
    device: DeviceName | None = None  # default: the machine's device with the shortest queue, GPUs first
    from_model_id: int | None = None  # start from this registered model's weights (classes matched by name)
    pretrained: Literal["coco"] | None = None  # or from the model's COCO-trained weights (pulled once, then cached)


class PretrainedOut(BaseModel):
    """A kind of model a job can start from COCO's weights, and whether they are here already."""

    model: TrainedModel
    name: str  # the catalogue's model it starts from
    cached: bool  # pulled already (else the job's first step downloads it)
    mib: float | None  # what the download weighs, where the catalogue knows


class EstimateIn(BaseModel):
    """The Train form's settings that decide how long a job takes."""

    model: TrainedModel | None = None
    epochs: int = Field(default=30, ge=1, le=10_000)
    img: int | None = Field(default=None, ge=32, le=4096, multiple_of=32)
    val_share: float = Field(default=0.2, ge=0.05, le=0.5)
    device: DeviceName | None = None  # default: the machine's first GPU, else the CPU


class EstimateOut(BaseModel):
    seconds: float | None  # None: no job like it has finished here yet
    basis: str  # what the figure rests on, in words


class RetrainIn(Input):
    """Fine-tune a model on its data set as labelled now; what is not given is as the model was trained."""

    epochs: int | None = Field(default=None, ge=1, le=10_000)
    lr: float | None = Field(default=None, gt=0, le=10)
    device: DeviceName | None = None


class ResumeIn(Input):
    device: DeviceName | None = None  # default: where it ran


class JobOut(BaseModel):
    id: int
    dataset_id: int
    dataset_name: str
    model: str
    settings: dict
    state: JobState
    device: str
    epoch: int
    epochs: int
    pid: int | None  # the training process while it runs (None while a starting job takes its snapshot)
    created_by: str
    created_at: Moment
    started_at: Moment | None
    finished_at: Moment | None
    error: str | None


Scalar = str | int | float | bool | None


class ModelRecord(BaseModel):
    """model.json beside an exported model's files (forklift.app.registry.record), as an import takes it."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    dataset_digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    settings: dict[str, Scalar] = Field(default_factory=dict, max_length=100)  # the job's training options
    metrics: dict[str, Scalar] = Field(default_factory=dict, max_length=200)  # eval.json's figures


class ModelOut(BaseModel):
    id: int
    name: str
    job_id: int | None
    dataset_id: int | None
    dataset_digest: str | None  # the data set as trained on: two models with the same digest saw the same labels
    settings: dict
    metrics: dict
    created_at: Moment


class ModelRename(Input):
    name: str = Name


class ModelImport(BaseModel):
    model: ModelOut
    refused: list[str]


class DeploymentOut(BaseModel):
    id: int
    model_id: int
    name: str  # the model's name in the deployment's URLs
    port: int
    url: str
    curl: dict[str, str]  # ready-to-paste calls: native and PowerAI Vision protocols
    created_by: str


class AutoLabelIn(Input):
    model_id: Id  # a registered model (deployed or not)
    threshold: float = Field(default=0.5, ge=0, le=1)  # boxes scoring less are not kept
    video_id: Id | None = None  # only this video's frames; default: every unlabelled image of the data set


class AutoLabelRunOut(BaseModel):
    id: int
    dataset_id: int
    model_id: int | None
    video_id: int | None
    threshold: float
    state: JobState
    total: int
    done: int
    boxes: int  # labels kept: boxes, or classes of a classification set
    created_by: str
    created_at: Moment
    finished_at: Moment | None
    error: str | None


class ReviewItem(BaseModel):
    image: ImageOut
    lowest_confidence: float | None  # of its auto labels; None: the model found nothing in it
    boxes: int


ReviewFirst = Literal["found", "nothing"]  # the review queue's order: what the model found first, or what it missed


class ReviewPage(BaseModel):
    total: int
    offset: int
    items: list[ReviewItem]


class ReviewIn(Input):
    # correct = edit in the editor (a saved edit counts as reviewed); reopen = undo an accept or a reject: the
    # image waits for review again, with the model's labels it had (`shapes` and the class, as the review saw them)
    action: Literal["accept", "reject", "reopen"]
    version: int = Field(ge=0, le=MAX_ID)
    shapes: list[ShapeOut] | None = Field(default=None, max_length=MAX_SHAPES)  # reopen after a reject: put back
    class_label: str | None = None
    class_model_id: int | None = None
    class_confidence: float | None = Field(default=None, ge=0, le=1)
    labels_seen: dict[str, Id] = Field(default_factory=dict, max_length=MAX_SHAPES + 1)  # as AnnotationsIn's
