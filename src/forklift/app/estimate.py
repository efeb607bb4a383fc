"""How long a training job will take, said on the Train form before it starts: from the newest finished job of
the same model on the same kind of device. Its metrics.csv gives the wall time per image trained (validation
included), scaled by the number of images, the epochs and the pixels per image; the rest of its run (the
process's start, the final evaluation and export) is added as it was."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from forklift.app.devices import CPU
from forklift.app.jobs import progress
from forklift.app.tables import Job, JobState

RECENT = 20  # finished jobs looked at, newest first


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # None: nothing like it has run here yet
    basis: str  # what the figure rests on, in words


@dataclass(frozen=True)
class Pace:
    """A finished job's seconds per image per epoch (at its input size), and the seconds of its run besides."""

    seconds_per_image: float
    fixed_seconds: float
    img: int | None


def estimate_training(
    session: Session, root: Path, *, model: str, device: str, img: int | None, epochs: int, images: int
) -> Estimate:
    """The expected run time of `epochs` over `images` training images at input size `img`."""
    gpu = device != CPU
    jobs = session.scalars(
        select(Job).where(Job.model == model, Job.state == JobState.DONE).order_by(Job.id.desc()).limit(RECENT)
    )
    for job in jobs:
        pace = _pace(job, root / job.out_dir)
        if pace is None or (job.device != CPU) != gpu:
            continue
        scale = (img / pace.img) ** 2 if img and pace.img else 1.0
        at = f" at {pace.img} px" if pace.img else ""
        seconds = pace.fixed_seconds + epochs * images * pace.seconds_per_image * scale
        return Estimate(seconds, f"from the pace of job {job.id}{at}")
    where = "a GPU" if gpu else "the CPU"
    return Estimate(None, f"no {model} job has finished on {where} here yet: the job's page shows the time left "
                          "once its first epoch is done")  # fmt: skip


def _pace(job: Job, out: Path) -> Pace | None:
    rows = progress(out)
    if not rows or job.started_at is None or job.finished_at is None:
        return None
    try:
        trained = sum(float(row["images_per_s"]) * float(row["seconds"]) for row in rows)
        elapsed = float(rows[-1]["elapsed"])
    except (KeyError, ValueError):
        return None
    whole = (job.finished_at - job.started_at).total_seconds()
    if trained <= 0 or elapsed <= 0:
        return None
    return Pace(elapsed / trained, max(0.0, whole - elapsed), job.settings.get("img"))
