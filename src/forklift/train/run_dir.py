"""Where a run keeps its files in OUT, and the checks on OUT before a run starts. Light (no torch), so that the
launcher and the CLI check a run's folder before anything heavy loads."""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import TypeVar

from forklift.errors import ForkliftError

CHECKPOINTS = "checkpoints"  # OUT/checkpoints holds:
LAST = "last.pt"  # everything a resume needs, after every epoch
BEST = "best.pt"  # the best validated epoch's weights
JOB_FILE = "torchrun-job"  # the id of the torchrun job that writes OUT
METRICS = "metrics.csv"  # in OUT: a row per epoch

AnyPath = TypeVar("AnyPath", bound=PurePath)


def last_checkpoint(out: AnyPath) -> AnyPath:
    return out / CHECKPOINTS / LAST


def check_out(out: PurePath, resume: bool) -> None:
    """OUT must hold a run to resume, or be new or empty for a new one."""
    folder = Path(out)
    checkpoint = last_checkpoint(folder)
    if resume and not checkpoint.is_file():
        raise ForkliftError(f"{out}: nothing to resume (no {checkpoint.relative_to(folder)})")
    if not resume and folder.exists() and any(folder.iterdir()):
        raise ForkliftError(f"{out}: already exists and is not empty; choose a new directory or pass --resume")
