"""Reusable page-locked host buffers, so swapping to host memory allocates no pinned memory in steady state.

Pinning memory is slow (it maps and locks pages, and on CUDA synchronizes the device), so buffers are kept and
reused. Sizes are rounded up to a size class of a quarter of the next lower power of two, which wastes at most
a quarter of a buffer while letting tensors of nearly equal size share buffers from step to step.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import torch

MIN_CLASS = 4096


def size_class(nbytes: int) -> int:
    """The buffer size that holds `nbytes`: a multiple of a quarter of the power of two at or below it."""
    step = max(1 << max(nbytes.bit_length() - 3, 0), MIN_CLASS)
    return -(-nbytes // step) * step


class PinnedPool:
    """Buffers by size class; `acquire` hands one out with the event its last copy recorded (None when new).

    The event lets a copy on another stream wait until the buffer's previous copy is done. `pin=False` makes
    ordinary host buffers, so the pool's bookkeeping can be tested on a machine without a GPU.
    """

    def __init__(self, pin: bool = True) -> None:
        self._pin = pin
        self._free: defaultdict[int, list[tuple[torch.Tensor, Any]]] = defaultdict(list)
        self.allocated = 0  # bytes of all buffers, free or in use
        self._lock = threading.RLock()  # RLock: a garbage-collected saved tensor may release a buffer mid-acquire

    def acquire(self, nbytes: int, limit: int | None) -> tuple[torch.Tensor, Any] | None:
        """A free buffer of at least `nbytes`, or None when a new one would make the pool exceed `limit`."""
        size = size_class(nbytes)
        with self._lock:
            if self._free[size]:
                return self._free[size].pop()
            if limit is not None and self.allocated + size > limit:
                self.clear()  # free buffers of other sizes make room
                if self.allocated + size > limit:
                    return None
            self.allocated += size
        return torch.empty(size, dtype=torch.uint8, pin_memory=self._pin), None

    def release(self, buffer: torch.Tensor, event: Any) -> None:
        with self._lock:
            self._free[buffer.numel()].append((buffer, event))

    def clear(self) -> None:
        """Give the free buffers back to the system; buffers in use return to the pool as usual."""
        with self._lock:
            for size, buffers in self._free.items():
                self.allocated -= size * len(buffers)
            self._free.clear()
