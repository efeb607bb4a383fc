"""What `enable` and `swapping` accept, checked once so the hooks never see a bad value."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict

import torch

from forklift.errors import ForkliftError

TierName = Literal["auto", "cuda", "disk"]
TIERS: tuple[str, ...] = ("auto", "cuda", "disk")
MIB = 1 << 20


class Settings(TypedDict, total=False):
    """The keyword arguments of `enable` and `swapping`: the fields of `Options`."""

    limit: int
    min_bytes: int
    tier: TierName
    keep_last: int
    prefetch: int
    spill_dir: Path | str | None
    spill_limit: int | None


@dataclass(frozen=True)
class Options:
    """How large model support swaps; every field is documented in README.md, "Large model support".

    limit: bytes of large saved tensors that may stay in place (device memory, or RAM for the disk tier) before
        swapping starts; 0 swaps every large one.
    min_bytes: tensors smaller than this stay in place: copying them costs more in latency than it saves.
    tier: "cuda" (pinned host memory), "disk" (spill files) or "auto" (cuda when a GPU is present).
    keep_last: the last saved tensors of the forward pass that stay in place, because backward needs them first.
    prefetch: how many swapped tensors to bring back ahead of need during backward.
    spill_dir: where the disk tier makes its per-process directory (the system temp dir when None).
    spill_limit: the most bytes the tier holds (pinned buffers or spill files); beyond it tensors stay in place.
    """

    limit: int = 0
    min_bytes: int = MIB
    tier: TierName = "auto"
    keep_last: int = 2
    prefetch: int = 2
    spill_dir: Path | str | None = None
    spill_limit: int | None = None

    def __post_init__(self) -> None:
        for name in ("limit", "min_bytes", "keep_last", "prefetch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ForkliftError(f"lms: {name}={value!r} must be a whole number >= 0")
        if self.spill_limit is not None and (
            isinstance(self.spill_limit, bool) or not isinstance(self.spill_limit, int) or self.spill_limit < 0
        ):
            raise ForkliftError(f"lms: spill_limit={self.spill_limit!r} must be a whole number >= 0 or None")
        if self.tier not in TIERS:
            raise ForkliftError(f"lms: tier={self.tier!r} is not one of {', '.join(TIERS)}")
        if self.tier == "cuda" and not torch.cuda.is_available():
            raise ForkliftError("lms: tier='cuda' needs a CUDA device, and torch sees none; use tier='disk'")
        if self.spill_dir is not None:
            spill_dir = Path(self.spill_dir)
            if not spill_dir.is_dir():
                raise ForkliftError(f"lms: spill_dir {spill_dir} does not exist or is not a directory")
            if not os.access(spill_dir, os.W_OK | os.X_OK):
                raise ForkliftError(f"lms: spill_dir {spill_dir} is not writable")
            object.__setattr__(self, "spill_dir", spill_dir)

    @property
    def resolved_tier(self) -> Literal["cuda", "disk"]:
        """The tier in use: "auto" means pinned host memory when there is a GPU to swap from."""
        if self.tier == "auto":
            return "cuda" if torch.cuda.is_available() else "disk"
        return self.tier
