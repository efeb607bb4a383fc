"""Find every problem of a data set at once, so a person can fix them all and training can skip what is broken.

Each entry gets its first problem: of its image file, then (segment) of its mask (forklift.data.masks).

`forklift data check` reports; `usable_images` is what training keeps, so both agree on what a problem is.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from tqdm import tqdm

from forklift.data.dataset import Dataset, Finding, ImageRecord, load_dataset_leniently
from forklift.data.masks import MaskProblem, load_mask
from forklift.errors import ForkliftError
from forklift.vision.images import DEFAULT_MAX_PIXELS, decode_image
from forklift.vocabulary import Task

MISSING_FILE = "missing file"
UNREADABLE = "unreadable image"
SIZE_MISMATCH = "size mismatch"
DUPLICATE_IMAGE = "duplicate image"
DUPLICATE_ENTRY = "duplicate entry"


@dataclass
class CheckReport:
    """A data set as leniently loaded and what is wrong with it."""

    dataset: Dataset
    findings: list[Finding]

    @property
    def entries(self) -> int:
        """Entries of dataset.json: those loaded, and those too broken to load (one finding each, no position)."""
        return len(self.dataset.images) + sum(1 for finding in self.findings if finding.image is None)

    @property
    def skipped(self) -> int:
        """How many entries training leaves out."""
        return self.entries - len(usable_images(self))

    def counts(self) -> Counter[str]:
        return Counter(finding.problem for finding in self.findings)

    def summary(self) -> str:
        if not self.findings:
            return f"clean: {self.entries} images, no problems"
        counts = ", ".join(f"{problem} {count}" for problem, count in sorted(self.counts().items()))
        problems = f"{len(self.findings)} problem{'s' * (len(self.findings) != 1)}"
        return f"{problems} ({counts}); training would skip {self.skipped} of {self.entries} images"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "clean" if not self.findings else "problems",
            "images": self.entries,
            "usable": self.entries - self.skipped,
            "skipped": self.skipped,
            "counts": dict(sorted(self.counts().items())),
            "findings": [finding.to_json() for finding in self.findings],
        }


def check_dataset(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> CheckReport:
    """Every problem of the entries and of their files; only a dataset.json that cannot be read at all raises."""
    dataset, findings = load_dataset_leniently(path)
    listed: set[str] = set()
    digests: dict[str, str] = {}
    for position, image in enumerate(tqdm(dataset.images, desc="check", unit="image", disable=None, leave=False)):
        problem = _file_problem(dataset, image, listed, digests, max_pixels)
        if problem is not None:
            findings.append(Finding(problem[0], image.file, problem[1], position))
    return CheckReport(dataset, findings)


def usable_images(report: CheckReport) -> list[ImageRecord]:
    """The images training and evaluation can use: those no finding is about (an image with one bad box is left
    out whole, since training on it without that box would teach the model the object is background) and that a
    person labelled (an unlabelled one's missing boxes are not "nothing here" either)."""
    flagged = {finding.image for finding in report.findings}
    images = report.dataset.images
    return [image for position, image in enumerate(images) if position not in flagged and not image.unlabelled]


def _file_problem(
    dataset: Dataset, image: ImageRecord, listed: set[str], digests: dict[str, str], max_pixels: int
) -> tuple[str, str] | None:
    """The first problem of an entry's file as (problem, detail), or None; a file listed again or a copy of one
    seen before is reported as such and not decoded again."""
    key = str(PurePosixPath(image.file))
    if key in listed:
        return DUPLICATE_ENTRY, "listed more than once in dataset.json"
    listed.add(key)
    try:
        data = dataset.path(image).read_bytes()
    except FileNotFoundError:
        return MISSING_FILE, f"no such file in {dataset.root}"
    except OSError as exc:
        return UNREADABLE, f"cannot read: {exc.strerror}"
    digest = hashlib.sha256(data).hexdigest()
    if digest in digests:
        return DUPLICATE_IMAGE, f"same bytes as {digests[digest]}"
    digests[digest] = image.file
    try:
        height, width = decode_image(data, image.file, max_pixels).shape[:2]
    except ForkliftError as exc:
        return UNREADABLE, str(exc)
    if (width, height) != (image.width, image.height):
        return SIZE_MISMATCH, f"dataset.json says {image.width}x{image.height}, the file is {width}x{height}"
    if dataset.task == Task.SEGMENT:
        try:
            load_mask(dataset, image)
        except MaskProblem as exc:
            return exc.problem, str(exc)
    return None


def print_report(report: CheckReport) -> None:
    """The findings as a table (problem, file, detail), then the summary line."""
    if report.findings:
        problem_width = max(len("problem"), *(len(f.problem) for f in report.findings))
        file_width = max(len("file"), *(len(f.file) for f in report.findings))
        print(f"{'problem':<{problem_width}}  {'file':<{file_width}}  detail")
        for finding in report.findings:
            print(f"{finding.problem:<{problem_width}}  {finding.file:<{file_width}}  {finding.detail}")
    print(report.summary())
