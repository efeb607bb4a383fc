"""The result JSON of DESIGN.md: boxes in pixels of the original image, class masks as RLE, timing per stage."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import SupportsFloat

import numpy as np


@dataclass(frozen=True)
class Detection:
    """One box in pixels of the original image, with its class label and score."""

    x1: float
    y1: float
    x2: float
    y2: float
    label: str
    score: float

    @classmethod
    def from_corners(cls, corners: Iterable[SupportsFloat], label: str, score: float) -> Detection:
        """From x1, y1, x2, y2 as an engine gives them (a row of a numpy array), as Python floats."""
        x1, y1, x2, y2 = (float(v) for v in corners)
        return cls(x1, y1, x2, y2, label, score)

    def to_json(self) -> dict:
        box = {"x1": round(self.x1), "y1": round(self.y1), "x2": round(self.x2), "y2": round(self.y2)}
        return {"bbox": box, "label": self.label, "score": round(self.score, 4)}


@dataclass(frozen=True)
class ClassScore:
    """One class of a classifier's answer."""

    label: str
    score: float

    def to_json(self) -> dict:
        return {"label": self.label, "score": round(self.score, 4)}


@dataclass(frozen=True)
class Segment:
    """The pixels of one class in a segmentation of the original image: their count and COCO compressed RLE."""

    label: str
    pixels: int
    mask: dict  # {"size": [h, w], "counts": str}, what pycocotools.mask.decode reads back

    def to_json(self) -> dict:
        return {"label": self.label, "pixels": self.pixels, "mask": dict(self.mask)}


@dataclass
class ImageResult:
    """What a model found in one image, or why the image could not be used."""

    file: str
    detections: list[Detection] | None = None
    classes: list[ClassScore] | None = None
    segments: list[Segment] | None = None
    image: np.ndarray | None = None  # an image-to-image model's answer: RGB uint8, the input's size
    saved: str | None = None  # where `predict --out` wrote that image
    encoded: bytes | None = None  # that image as a server sends it (JPEG or PNG); `image` is then dropped
    error: str | None = None

    def to_json(self) -> dict:
        out: dict = {"file": self.file}
        if self.error is not None:
            out["error"] = self.error
        if self.detections is not None:
            out["detections"] = [d.to_json() for d in self.detections]
        if self.classes is not None:
            out["classes"] = [c.to_json() for c in self.classes]
        if self.segments is not None:
            out["segments"] = [s.to_json() for s in self.segments]
        if self.image is not None:
            height, width = self.image.shape[:2]
            out["image"] = {"width": width, "height": height, **({"file": self.saved} if self.saved else {})}
        return out


@dataclass
class Timing:
    """Seconds spent in each stage, summed over the images of one call."""

    preprocessing: float = 0.0
    inference: float = 0.0
    postprocessing: float = 0.0

    @property
    def total(self) -> float:
        return self.preprocessing + self.inference + self.postprocessing

    def add(self, other: Timing) -> None:
        self.preprocessing += other.preprocessing
        self.inference += other.inference
        self.postprocessing += other.postprocessing

    def to_json(self) -> dict:
        return {
            "preprocessing": round(self.preprocessing, 4),
            "inference": round(self.inference, 4),
            "postprocessing": round(self.postprocessing, 4),
        }


@dataclass
class Prediction:
    """The answer of one predict call: per-image results and the time each stage took."""

    results: list[ImageResult] = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)

    def to_json(self) -> dict:
        ok = all(r.error is None for r in self.results)
        return {
            "status": "OK" if ok else "error",
            "results": [r.to_json() for r in self.results],
            "timing": self.timing.to_json(),
        }
