"""Where a run keeps its files in OUT, and the checks on OUT before a run starts. Light (no torch), so that the
launcher and the CLI check a run's folder before anything heavy loads."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import IO, TypeVar

from forklift.errors import ForkliftError

CHECKPOINTS = "checkpoints"  # OUT/checkpoints holds:
LAST = "last.pt"  # everything a resume needs, after every epoch
BEST = "best.pt"  # the best validated epoch's weights
JOB_FILE = "torchrun-job"  # the id of the torchrun job that writes OUT
LOCK = "lock"  # held by the process that writes OUT, its pid in it
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
    lock = folder / CHECKPOINTS / LOCK  # all a run that failed before its first epoch may leave
    if lock.is_file():  # before --nproc ranks start, or a pretrained model is pulled, for nothing
        with lock.open("r", encoding="utf-8") as held:
            _take(held, out)
    if not resume and folder.exists() and any(path not in (lock, lock.parent) for path in folder.rglob("*")):
        raise ForkliftError(f"{out}: already exists and is not empty; choose a new directory or pass --resume")


@contextmanager
def holding(out: Path) -> Iterator[None]:
    """OUT's lock, held while a run writes OUT: a second run into it (a --resume typed while the first still ran)
    is refused, where both wrote the same checkpoints and metrics rows. The lock goes with the process; OUT made
    for it goes too when the run wrote nothing else (refused before its first epoch) and it held the lock."""
    folder = out / CHECKPOINTS
    made = not out.exists()
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / LOCK).open("a+", encoding="utf-8") as lock:
        _take(lock, out)  # refused here: the OUT is the other run's, and stays
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            yield
        finally:
            if made and {path.relative_to(out) for path in out.rglob("*")} == {
                Path(CHECKPOINTS),
                Path(CHECKPOINTS, LOCK),
            }:
                shutil.rmtree(out)


def _take(lock: IO[str], out: PurePath) -> None:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        pid = lock.read().strip() or "?"
        raise ForkliftError(
            f"{out}: another run (pid {pid}) is training into it; wait for it to end, or stop it"
        ) from None
