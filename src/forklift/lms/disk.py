"""The disk tier: saved tensors spill to files, so a CPU training step needs less resident memory than it saves.

Each spilled tensor is one file in a per-process directory; backward maps it back with `torch.from_file`, so its
pages are read on demand and belong to the page cache, not to the process, once backward drops them. A file is
removed when autograd frees its saved tensor (after backward), the directory when the tier closes (once its last
file is gone; at once after an error) or the process exits (a finalizer that also runs at exit). A process
killed outright (SIGKILL, the OOM killer) cannot clean up, so a new tier first removes the directories of
processes on this host that no longer exist.

Spilling only lowers resident memory if freed tensor memory goes back to the system. glibc's malloc keeps it
(its mmap threshold grows to the size of the largest freed block, and 64-byte-aligned requests do not fit the
holes freed tensors leave), so the tier fixes that threshold at `min_bytes`: large blocks are mapped and unmapped
one by one. Measured on a 32-layer net with 4 MiB activations: without this the first forward pass grows the
heap by 12 MiB per layer even when every saved tensor is dropped.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import socket
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch

from forklift.errors import ForkliftError
from forklift.lms.stats import Stats
from forklift.lms.tensor_bytes import TensorMeta, flat_bytes, restore

PREFIX = "forklift-lms-"
M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h
MMAP_THRESHOLD_RANGE = (128 << 10, 32 << 20)  # glibc's default, and its largest accepted value on 64-bit


def unmap_large_frees(threshold: int) -> None:
    """Make malloc map blocks of `threshold` bytes and more one by one, so freeing one returns it to the system.

    Process-wide and kept after the tier closes (malloc cannot report the old value). Nothing happens where the C
    library has no mallopt (not glibc); there, resident memory may fall less.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    low, high = MMAP_THRESHOLD_RANGE
    mallopt(M_MMAP_THRESHOLD, min(max(threshold, low), high))


@dataclass
class DiskSlot:
    """One spilled tensor: its file and how to rebuild it."""

    path: Path
    meta: TensorMeta


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a live process of another user
    return False


def _dir_prefix() -> str:
    """forklift-lms-PID@HOST@ (mkdtemp adds a random tail); '@' cannot occur in a host name, so it parses back."""
    return f"{PREFIX}{os.getpid()}@{socket.gethostname()}@"


def remove_stale_dirs(base: Path) -> None:
    """Remove spill directories left by processes of this host that were killed before they could clean up."""
    host = socket.gethostname()
    for path in base.glob(f"{PREFIX}*@{host}@*"):
        pid, _, rest = path.name[len(PREFIX) :].partition("@")
        if rest.startswith(f"{host}@") and pid.isdigit() and int(pid) != os.getpid() and _process_gone(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


class DiskTier:
    """Spill files under `spill_dir`, at most `spill_limit` bytes of them at a time."""

    name = "disk"

    def __init__(self, spill_dir: Path | str | None, spill_limit: int | None, min_bytes: int, stats: Stats) -> None:
        base = Path(spill_dir) if spill_dir is not None else Path(tempfile.gettempdir())
        remove_stale_dirs(base)
        try:
            self.root = Path(tempfile.mkdtemp(prefix=_dir_prefix(), dir=base))
        except OSError as exc:
            raise ForkliftError(f"lms: cannot make a spill directory in {base}: {exc.strerror}") from exc
        self._remove_root = weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
        unmap_large_frees(min_bytes)
        self._limit = spill_limit
        self._stats = stats
        self._held = 0  # bytes in live spill files
        self._live = 0
        self._closed = False
        self._names = itertools.count()
        self._lock = threading.RLock()

    def accepts(self, tensor: torch.Tensor) -> bool:
        return True

    def put(self, tensor: torch.Tensor) -> DiskSlot | None:
        """Write the tensor's bytes to a new file, or None when that would pass the spill limit or fails."""
        flat, meta = flat_bytes(tensor)
        with self._lock:
            if self._limit is not None and self._held + meta.nbytes > self._limit:
                return None
            self._held += meta.nbytes
            self._live += 1
            path = self.root / f"{next(self._names)}.bin"
        start = time.perf_counter()
        try:
            with open(path, "wb") as file:  # buffered: it loops until all is written, raw writes may stop short
                file.write(flat.cpu().numpy().data)
        except OSError:  # the disk is full: the tensor stays in memory, as at the spill limit
            path.unlink(missing_ok=True)
            with self._lock:
                self._held -= meta.nbytes
                self._live -= 1
            return None
        self._stats.copy_s += time.perf_counter() - start
        return DiskSlot(path, meta)

    def prefetch(self, slot: DiskSlot) -> None:
        """Ask the kernel to read the file ahead, so the mapping in `get` finds its pages in memory."""
        try:
            fd = os.open(slot.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)

    def get(self, slot: DiskSlot) -> torch.Tensor:
        """The tensor again, mapped from its file (copied to its device when it came from a GPU)."""
        start = time.perf_counter()
        try:
            data = torch.from_file(str(slot.path), shared=False, size=slot.meta.nbytes, dtype=torch.uint8)
        except RuntimeError as exc:
            raise ForkliftError(
                f"lms: spill file {slot.path} is gone: its swapping() block ended with an error or the spill "
                "directory was removed; run backward inside the block"
            ) from exc
        tensor = restore(data, slot.meta)
        if slot.meta.device.type != "cpu":
            tensor = tensor.to(slot.meta.device)
        self._stats.copy_s += time.perf_counter() - start
        return tensor

    def free(self, slot: DiskSlot) -> None:
        slot.path.unlink(missing_ok=True)
        with self._lock:
            self._held -= slot.meta.nbytes
            self._live -= 1
            if self._closed and self._live == 0:
                self._remove_root()

    def close(self, error: bool) -> None:
        """Remove the directory now after an error (the graph is unusable), else once its last file is freed."""
        with self._lock:
            self._closed = True
            if error or self._live == 0:
                self._remove_root()

    def collect(self, wait: bool) -> None:
        """Nothing to do: disk copies are synchronous and timed as they happen."""
