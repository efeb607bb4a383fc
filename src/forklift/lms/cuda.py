"""The CUDA tier: saved tensors go to pinned host memory on a side stream while compute goes on.

Swap-out: the side stream waits for the compute stream (the tensor must be finished), copies it into a pooled
pinned buffer and is recorded on the tensor's memory, so the caching allocator does not hand that memory out
again before the copy has read it. Swap-in: the copy back is issued on the side stream ahead of need (prefetch);
when backward asks for the tensor the compute stream waits for that copy's event, never the host.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from forklift.lms.pinned_pool import PinnedPool
from forklift.lms.stats import Stats
from forklift.lms.tensor_bytes import TensorMeta, flat_bytes, restore

COLLECT_EVERY = 256  # timing events kept before the finished ones are read


@dataclass
class CudaSlot:
    """One swapped tensor: its pinned buffer, the event of the buffer's last copy, and a copy back in flight."""

    buffer: torch.Tensor
    meta: TensorMeta
    last_copy: torch.cuda.Event
    incoming: tuple[torch.Tensor, torch.cuda.Event] | None = None  # the device tensor and its copy's start event


class CudaTier:
    """Pinned host memory from a shared pool, at most `limit` bytes of it."""

    name = "cuda"

    def __init__(self, pool: PinnedPool, limit: int | None, stats: Stats) -> None:
        self._pool = pool
        self._limit = limit
        self._stats = stats
        self._streams: dict[torch.device, torch.cuda.Stream] = {}
        self._timings: list[tuple[torch.cuda.Event, torch.cuda.Event, bool]] = []  # start, end, overlapped
        self._lock = threading.RLock()

    def accepts(self, tensor: torch.Tensor) -> bool:
        """Only GPU tensors: a host tensor is already where this tier would put it."""
        return tensor.is_cuda

    def _side(self, device: torch.device) -> torch.cuda.Stream:
        with self._lock:
            if device not in self._streams:
                self._streams[device] = torch.cuda.Stream(device)
            return self._streams[device]

    @staticmethod
    def _copy(side: torch.cuda.Stream, dst: torch.Tensor, src: torch.Tensor) -> tuple[torch.cuda.Event, ...]:
        """Copy on the side stream between two timing events (start, end)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            start.record(side)
            dst.copy_(src, non_blocking=True)
            end.record(side)
        return start, end

    def _timing(self, start: torch.cuda.Event, end: torch.cuda.Event, overlapped: bool) -> None:
        with self._lock:
            self._timings.append((start, end, overlapped))
            if len(self._timings) >= COLLECT_EVERY:
                self.collect(wait=False)

    def put(self, tensor: torch.Tensor) -> CudaSlot | None:
        """Start copying the tensor out, or None when the pinned pool is at its limit."""
        flat, meta = flat_bytes(tensor)
        got = self._pool.acquire(meta.nbytes, self._limit)
        if got is None:
            return None
        buffer, previous = got
        side = self._side(tensor.device)
        side.wait_stream(torch.cuda.current_stream(tensor.device))
        if previous is not None:
            side.wait_event(previous)  # its last copy ran on another stream: an earlier block's, another device's
        start, end = self._copy(side, buffer[: meta.nbytes], flat)
        flat.record_stream(side)
        self._timing(start, end, overlapped=True)  # compute never waits for a swap-out
        return CudaSlot(buffer, meta, end)

    def prefetch(self, slot: CudaSlot) -> None:
        """Start the copy back to the device unless it is already under way."""
        self._incoming(slot)

    def _incoming(self, slot: CudaSlot) -> tuple[torch.Tensor, torch.cuda.Event]:
        """The copy back to the device (its tensor and start event), started here unless already under way."""
        if slot.incoming is None:
            side = self._side(slot.meta.device)
            with torch.cuda.stream(side):
                incoming = torch.empty(slot.meta.nbytes, dtype=torch.uint8, device=slot.meta.device)
            start, slot.last_copy = self._copy(side, incoming, slot.buffer[: slot.meta.nbytes])
            slot.incoming = (incoming, start)
        return slot.incoming

    def get(self, slot: CudaSlot) -> torch.Tensor:
        """The tensor back on its device; the compute stream, not the host, waits for its copy."""
        (incoming, start), slot.incoming = self._incoming(slot), None
        self._timing(start, slot.last_copy, overlapped=slot.last_copy.query())
        compute = torch.cuda.current_stream(slot.meta.device)
        compute.wait_event(slot.last_copy)
        incoming.record_stream(compute)
        return restore(incoming, slot.meta)

    def free(self, slot: CudaSlot) -> None:
        self._pool.release(slot.buffer, slot.last_copy)

    def collect(self, wait: bool) -> None:
        """Add the time of finished copies to the stats (of all copies when `wait`, which synchronizes)."""
        with self._lock:
            if wait:
                for stream in self._streams.values():
                    stream.synchronize()
            pending = []
            for start, end, overlapped in self._timings:
                if not end.query():
                    pending.append((start, end, overlapped))
                    continue
                seconds = start.elapsed_time(end) / 1000
                self._stats.copy_s += seconds
                if overlapped:
                    self._stats.overlapped_s += seconds
            self._timings = pending

    def close(self, error: bool) -> None:
        """Wait for copies in flight and count their time; the pool keeps its buffers for the next block."""
        self.collect(wait=True)
