"""A run's checkpoints (`forklift.train.run_dir` says where): last.pt after every epoch, everything a resume needs
to continue exactly as if it had not stopped, and best.pt with the best validated epoch's weights."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.optim import Optimizer as TorchOptimizer
from torch.optim.lr_scheduler import LambdaLR

from forklift.atomic import written_atomically
from forklift.distributed.ranks import Ranks
from forklift.errors import ForkliftError
from forklift.train.precision import MixedPrecision
from forklift.train.settings import TrainSettings
from forklift.train.tasks import TrainingTask


class Best:
    """The best validated epoch so far: its metric, and its weights kept in a checkpoint of their own."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.score: float | None = None

    def consider(self, epoch: int, score: float | None, task: TrainingTask, path: Path) -> None:
        if score is None or (self.score is not None and score <= self.score):
            return
        self.epoch, self.score = epoch, score
        save_atomically({"epoch": epoch, "model": task.net.state_dict()}, path)

    def restore(self, task: TrainingTask, path: Path) -> int | None:
        """Load the best epoch's weights into the task's net (when one was validated); returns that epoch."""
        if self.epoch is None:
            return None
        state = torch.load(path, map_location="cpu", weights_only=True)
        task.net.load_state_dict(state["model"])
        print(f"best epoch: {self.epoch} ({task.metric_names[0]} {self.score:.4f})", flush=True)
        return self.epoch


@dataclass
class RunState:
    """What a checkpoint holds besides the RNG states: everything a resumed run needs to continue exactly as if
    it had not stopped."""

    settings: TrainSettings
    task: TrainingTask
    optimiser: TorchOptimizer
    schedule: LambdaLR
    precision: MixedPrecision
    best: Best
    ranks: Ranks

    def save(
        self, path: Path, epoch: int, rng_states: list[tuple[Any, Any]] | None, *, metrics_row: dict[str, Any]
    ) -> None:
        """Rank 0 writes the checkpoint, with every rank's RNG states (`ranks_agree.rank_rng_states`) and the
        epoch's metrics.csv row."""
        assert rng_states is not None
        state = {
            "epoch": epoch,
            "metrics_row": metrics_row,
            "settings": self.settings.to_json(),
            "model": self.task.net.state_dict(),
            "optimiser": self.optimiser.state_dict(),
            "schedule": self.schedule.state_dict(),
            "scaler": self.precision.scaler.state_dict(),
            "best": (self.best.epoch, self.best.score),
            "torch_rng": rng_states[0][0],
            "numpy_rng": rng_states[0][1],
            "ranks": self.ranks.world,
            "rank_rngs": rng_states,
        }
        save_atomically(state, path)

    def restore(self, state: dict[str, Any], path: Path) -> int:
        """Continue from the checkpoint `state` read from `path`; returns the epoch it ended."""
        recorded = state.get("ranks", 1)
        if recorded != self.ranks.world:
            raise ForkliftError(
                f"{path}: trained with {recorded} rank(s), resumed with {self.ranks.world}; resume with the same "
                f"number (--nproc {recorded}, or the same hosts and --nproc-per-node of forklift run)"
            )
        try:
            self.task.net.load_state_dict(state["model"])
            self.optimiser.load_state_dict(state["optimiser"])
            self.schedule.load_state_dict(state["schedule"])
            self.precision.scaler.load_state_dict(state["scaler"])
            self.best.epoch, self.best.score = state["best"]
        except (RuntimeError, KeyError, ValueError) as exc:
            raise ForkliftError(f"{path}: not a checkpoint of this network: {str(exc).splitlines()[0]}") from exc
        torch_rng, numpy_rng = state.get("rank_rngs", [(state["torch_rng"], state["numpy_rng"])])[self.ranks.rank]
        torch.set_rng_state(torch_rng)
        np.random.set_state(numpy_rng)
        return int(state["epoch"])


def read_checkpoint(path: Path, device: str) -> dict[str, Any]:
    """A checkpoint's contents, or one line saying why it cannot be read."""
    try:
        state: dict[str, Any] = torch.load(path, map_location=device, weights_only=False)
    except (RuntimeError, OSError, EOFError, pickle.UnpicklingError) as exc:
        raise ForkliftError(f"{path}: not a readable checkpoint: {str(exc).splitlines()[0]}") from exc
    return state


def save_atomically(state: dict, path: Path) -> None:
    """Written to a side file and renamed, so that a crash never leaves half of one."""
    with written_atomically(path) as partial:
        torch.save(state, partial)
