"""The one interface every engine offers: `Predictor.predict(inputs, request) -> Prediction`.

The base class decodes the images, times each stage and turns a bad image into an error entry for that file,
so that the other images of the same call are still processed; engines only say how to prepare, run and read.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory
from forklift.vision.images import DEFAULT_MAX_PIXELS, decode_image
from forklift.vision.results import ClassScore, Detection, ImageResult, Prediction, Segment, Timing
from forklift.vision.style_adjust import StyleAdjust
from forklift.vocabulary import Precision, ResizeMode, Runtime, Task


@dataclass(frozen=True)
class PredictOptions:
    """What a caller may change per call; `None` takes the model's setting, then forklift's default."""

    conf: float | None = None
    iou: float | None = None
    resize: ResizeMode | None = None
    threads: int | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    spin: bool = True  # engine threads may busy-wait for work: fastest alone, wasteful in a busy server
    precision: Precision | None = None  # None: forklift.json's "precision", else f32
    device: str = "cpu"  # the torch engine's device (cuda:N runs it on that GPU); the others run on the CPU
    style: StyleAdjust = field(default_factory=StyleAdjust)  # image-to-image models: strength and colour preservation


@dataclass(frozen=True)
class RequestOptions:
    """What one request may change on a loaded predictor (a served model answers many callers): the score
    threshold, and an image-to-image model's strength and colours; None keeps the predictor's own."""

    conf: float | None = None
    style: StyleAdjust | None = None


@dataclass(frozen=True)
class Answering:
    """How `finish` answers one batch: the request's options over the predictor's own."""

    conf: float
    style: StyleAdjust


Answer = list[Detection] | list[ClassScore] | list[Segment] | np.ndarray
ANSWER_FIELDS = {
    Task.DETECT: "detections",
    Task.CLASSIFY: "classes",
    Task.SEGMENT: "segments",
    Task.STYLE: "image",
}  # ImageResult's, by task


@runtime_checkable
class FixedInput(Protocol):
    """A predictor whose network takes every image at one size (Darknet-style and segmentation engines; Faster
    R-CNN sizes each image its own way), so a caller may hand it ready tensors of that size."""

    input_width: int
    input_height: int


class Predictor(ABC):
    """A loaded model that answers images. Subclasses implement prepare / infer / finish."""

    runtime: Runtime | None = None  # which engine runs it; set by each engine class

    def __init__(self, model: ModelDirectory, options: PredictOptions) -> None:
        self.model = model
        self.options = options
        self.conf = options.conf if options.conf is not None else (model.config.conf or 0.25)
        self.iou = options.iou if options.iou is not None else (model.config.iou or 0.45)

    @property
    def task(self) -> Task:
        return self.model.config.task or Task.DETECT

    def predict(self, inputs: Sequence[tuple[str, bytes]], request: RequestOptions | None = None) -> Prediction:
        """Answer every (name, encoded image) pair; a bad one becomes an error entry, the rest go on."""
        start = time.perf_counter()
        decoded: list[tuple[str, np.ndarray | str]] = []
        for name, data in inputs:
            try:
                decoded.append((name, decode_image(data, name, self.options.max_pixels)))
            except ForkliftError as exc:
                decoded.append((name, str(exc)))
        prediction = self.predict_images(decoded, request)
        prediction.timing.preprocessing += time.perf_counter() - start - prediction.timing.total
        return prediction

    def predict_images(
        self, images: Sequence[tuple[str, np.ndarray | str]], request: RequestOptions | None = None
    ) -> Prediction:
        """Answer decoded RGB images; an entry that is a string is that image's error, passed through."""
        request = request or RequestOptions()
        answering = Answering(
            conf=self.conf if request.conf is None else request.conf, style=request.style or self.options.style
        )
        prediction = Prediction(results=[ImageResult(file=name) for name, _ in images])
        timing = prediction.timing
        prepared: list[tuple[int, Any, Any]] = []
        start = time.perf_counter()
        for index, (_, image) in enumerate(images):
            try:
                if isinstance(image, str):
                    raise ForkliftError(image)
                tensor, meta = self.prepare(image)
            except ForkliftError as exc:
                prediction.results[index].error = str(exc)
                continue
            prepared.append((index, tensor, meta))
        timing.preprocessing = time.perf_counter() - start
        if not prepared:
            return prediction
        start = time.perf_counter()
        outputs = self.infer([tensor for _, tensor, _ in prepared])
        timing.inference = time.perf_counter() - start
        start = time.perf_counter()
        for (index, _, meta), output in zip(prepared, outputs, strict=True):
            setattr(prediction.results[index], ANSWER_FIELDS[self.task], self.finish(output, meta, answering))
        timing.postprocessing = time.perf_counter() - start
        return prediction

    def predict_image(self, name: str, image: np.ndarray) -> tuple[Answer, Timing]:
        """Answer one decoded RGB image (tests and benchmarks): the detections, classes or segments, and the timing."""
        prediction = self.predict_images([(name, image)])
        (result,) = prediction.results
        if result.error is not None:
            raise ForkliftError(result.error)
        answer = getattr(result, ANSWER_FIELDS[self.task])
        return ([] if answer is None else answer), prediction.timing

    @abstractmethod
    def prepare(self, image: np.ndarray) -> tuple[Any, Any]:
        """RGB uint8 HxWx3 image -> (network input, what `finish` needs to map back to the image)."""

    @abstractmethod
    def infer(self, tensors: list[Any]) -> list[Any]:
        """Run the network on prepared inputs (batched where the engine can), one output per input."""

    @abstractmethod
    def finish(self, output: Any, meta: Any, answering: Answering) -> Answer:
        """Network output -> detections in pixels of the original image (or class scores, or segments), at the
        request's threshold (an image-to-image model's answer, adjusted as it asks)."""
