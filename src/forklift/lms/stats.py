"""Counters of what large model support did, in the spirit of IBM LMS's statistics."""

from __future__ import annotations

import resource
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


@dataclass
class Stats:
    """What was swapped out and back in, what stayed in place and why, and what it cost.

    `kept` counts saved tensors left in place by reason: "small" (under min_bytes), "parameter", "limit" (within
    the in-place budget), "last" (the keep_last window), "full" (the tier reached spill_limit, or the disk is
    full), "device" (a host tensor, for the CUDA tier), "unsupported" (sparse, quantized, subclass, other
    devices). A tensor saved by two operations is swapped out once and counted in at each unpack. `overlapped_s`
    is the part of `copy_s` spent while compute went on: every swap-out on CUDA, and a swap-in whose prefetch had
    finished when backward asked for it.
    """

    tier: str = ""
    swapped_out_count: int = 0
    swapped_out_bytes: int = 0
    swapped_in_count: int = 0
    swapped_in_bytes: int = 0
    kept: Counter[str] = field(default_factory=Counter)
    copy_s: float = 0.0
    overlapped_s: float = 0.0
    peak_device_bytes: int | None = None
    peak_rss_bytes: int | None = None

    def record_peaks(self) -> None:
        """Read the peaks now: device memory since the last reset, resident memory since the process started."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.peak_device_bytes = torch.cuda.max_memory_allocated()
        if sys.platform.startswith("linux"):  # ru_maxrss is KiB on Linux, bytes on macOS
            self.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kept"] = dict(sorted(self.kept.items()))
        return data

    def summary(self) -> str:
        """One line for a log: counts, sizes in MiB and the copy time."""
        mib = 1 << 20
        kept = ", ".join(f"{k} {v}" for k, v in sorted(self.kept.items())) or "none"
        peak = "" if self.peak_device_bytes is None else f", device peak {self.peak_device_bytes / mib:.0f} MiB"
        return (
            f"lms[{self.tier}]: out {self.swapped_out_count} ({self.swapped_out_bytes / mib:.1f} MiB), "
            f"in {self.swapped_in_count} ({self.swapped_in_bytes / mib:.1f} MiB), kept {kept}, "
            f"copy {self.copy_s:.3f} s ({self.overlapped_s:.3f} s overlapped){peak}"
        )

    def __str__(self) -> str:
        return self.summary()
