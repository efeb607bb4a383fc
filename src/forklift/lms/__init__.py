"""Large model support: tensors saved for backward leave device memory (or RAM), so bigger models train.

One line for a whole script, `forklift.lms.enable()`, or a block, `with forklift.lms.swapping() as stats:`.
Both install `torch.autograd.graph.saved_tensors_hooks`: with a GPU, large saved tensors are copied to pinned
host memory on a side stream and prefetched back during backward; without one (or with tier="disk") they spill
to files. The options are those of `Options`; README.md, "Large model support", says what they cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Unpack

import torch

from forklift.lms.cuda import CudaTier
from forklift.lms.disk import DiskTier
from forklift.lms.hooks import Swapper, Tier
from forklift.lms.options import Options, Settings
from forklift.lms.pinned_pool import PinnedPool
from forklift.lms.stats import Stats

__all__ = ["Options", "Settings", "Stats", "disable", "enable", "stats", "swapping"]

_pool: PinnedPool | None = None  # shared by every CUDA-tier session, so pinned buffers survive from step to step


class _Session:
    """One enable() or swapping(): its hooks installed on autograd's stack, its tier and its stats."""

    def __init__(self, options: Options) -> None:
        global _pool
        self.stats = Stats(tier=options.resolved_tier)
        self.tier: Tier
        if options.resolved_tier == "cuda":
            _pool = _pool or PinnedPool()
            self.tier = CudaTier(_pool, options.spill_limit, self.stats)
        else:
            self.tier = DiskTier(options.spill_dir, options.spill_limit, options.min_bytes, self.stats)
        swapper = Swapper(options, self.stats, self.tier)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(swapper.pack, swapper.unpack)
        self._hooks.__enter__()

    def finish(self, error: bool) -> Stats:
        self._hooks.__exit__(None, None, None)
        self.tier.close(error)
        self.stats.record_peaks()
        return self.stats


_session: _Session | None = None


def enable(**settings: Unpack[Settings]) -> Stats:
    """Swap saved tensors from now until `disable()`, in this thread; returns the stats it keeps up to date.

    The settings are the fields of `Options` (limit, min_bytes, tier, keep_last, prefetch, spill_dir, spill_limit).
    """
    global _session
    options = Options(**settings)
    disable()
    _session = _Session(options)
    return _session.stats


def disable() -> Stats | None:
    """Stop swapping and free the pinned buffers it cached; returns the final stats (None if it was not on)."""
    global _session
    if _session is None:
        return None
    session, _session = _session, None
    if _pool is not None:
        _pool.clear()
    return session.finish(error=False)


def stats() -> Stats | None:
    """The stats of `enable()` so far, with the time of copies that have finished; None when it is off."""
    if _session is None:
        return None
    _session.tier.collect(wait=False)
    _session.stats.record_peaks()
    return _session.stats


@contextmanager
def swapping(**settings: Unpack[Settings]) -> Iterator[Stats]:
    """Swap saved tensors inside the block (one training step or the whole loop); yields its stats.

    Run backward inside the block: on an error the spill files go at once, and a graph left over cannot run
    backward any more.
    """
    session = _Session(Options(**settings))
    try:
        yield session.stats
    except BaseException:
        session.finish(error=True)
        raise
    session.finish(error=False)
