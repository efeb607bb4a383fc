"""What many tests use, imported by name (`from helpers import ...`): the reference data and the test cfgs, the
`forklift` command run as a user runs it (or, where the command is not what a test is about, in the test's own
process), real `forklift serve` processes, and the exact-resume check of training.

Fixtures live in conftest.py; plain functions and constants live here.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from core_parts import missing

from forklift.serve.process import ServerProcess as Server
from forklift.serve.process import free_port
from forklift.shared_data import shared_data_root
from forklift.system.topology import Topology, read_lscpu
from forklift.train.settings import RunOptions, TrainSettings

__all__ = [
    "CFGS",
    "SHARED",
    "Server",
    "assert_resume_is_exact",
    "forklift",
    "forklift_here",
    "free_port",
    "sandbox",
    "shared",
]

SHARED = shared_data_root()
CFGS = Path(__file__).resolve().parent / "cfgs"


def shared(relative: str) -> Path:
    """A file of the reference data, or a skip that says it is missing."""
    path = SHARED / relative
    if not path.exists():
        missing(f"reference data {path} is missing (see ../shared/data/README.md)")
    return path


def sandbox(smt: int) -> Topology:
    """The Power10 sandbox LPAR of the reference data as `lscpu -p` printed it at SMT=2 or SMT=8."""
    return read_lscpu(shared(f"topology/power10-sandbox-smt{smt}.lscpu-p"))


def forklift(
    *args: str | Path,
    check: bool = True,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`forklift ARGS...` in a real subprocess (`input` on its stdin), its output captured; with `check`, a
    non-zero exit fails the test with what the command printed."""
    result = subprocess.run(
        [sys.executable, "-m", "forklift.cli", *map(str, args)],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    return _checked(args, result, check=check)


def forklift_here(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`forklift ARGS...` through the same entry point in this process, for tests about what a verb computes
    rather than about the process (test_cli runs those): a subprocess would spend seconds importing torch again.
    Only for verbs that leave no process-wide state behind (no --threads, no pinning, no signal handlers)."""
    from forklift.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit:  # argparse's own errors
            code = exit.code if isinstance(exit.code, int) else 2
    result = subprocess.CompletedProcess(["forklift", *map(str, args)], code, stdout.getvalue(), stderr.getvalue())
    return _checked(args, result, check=check)


def _checked(
    args: tuple[str | Path, ...], result: subprocess.CompletedProcess[str], *, check: bool
) -> subprocess.CompletedProcess[str]:
    """``result``; with ``check``, a non-zero exit fails the test with what the command printed."""
    if check and result.returncode != 0:
        raise AssertionError(f"forklift {args} failed ({result.returncode}): {result.stdout}\n{result.stderr}")
    return result


def assert_resume_is_exact(monkeypatch: pytest.MonkeyPatch, whole: Path, out: Path, settings: TrainSettings) -> None:
    """Train into `out` with `settings` (3 epochs), crash at the start of epoch 3, resume: the last checkpoint must
    hold exactly the weights of the uninterrupted run `whole`, and metrics.csv one row per epoch."""
    from forklift.train import trainer

    real_loader = trainer.epoch_loader

    def crash_in_epoch_3(images, batch, epoch, **kwargs):
        if epoch == 3:
            raise KeyboardInterrupt
        return real_loader(images, batch, epoch, **kwargs)

    monkeypatch.setattr(trainer, "epoch_loader", crash_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(settings, out)
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=False)["epoch"] == 2
    monkeypatch.setattr(trainer, "epoch_loader", real_loader)
    trainer.train(settings, out, RunOptions(resume=True))
    resumed = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    expected = torch.load(whole / "checkpoints" / "last.pt", weights_only=False)
    assert resumed["epoch"] == 3
    assert [line.split(",")[0] for line in (out / "metrics.csv").read_text().splitlines()[1:]] == ["1", "2", "3"]
    for key, value in expected["model"].items():
        assert torch.equal(resumed["model"][key], value), key
