"""The pack and unpack hooks that autograd calls for every tensor it saves for backward, whatever the tier.

`pack` decides per tensor: small ones, parameters and unsupported kinds stay in place; the rest wait in a window
of the last `keep_last` saved tensors (backward needs those first, so swapping them would be wasted work), then
stay in place while they fit in the `limit` budget, else go to the tier. `unpack` returns the tensor, from
the tier if it was swapped, and starts bringing back the next `prefetch` swapped tensors in reverse order of
saving, the order backward usually needs them.

Autograd does not check version counters of saved tensors when hooks are in use, so `unpack` does: when the
original tensor is still alive and was changed in place after it was saved, it raises autograd's usual error. A
swapped copy holds the value at the time it was swapped, which is what backward expects.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any, Protocol

import torch

from forklift.errors import ForkliftError
from forklift.lms.options import Options
from forklift.lms.stats import Stats
from forklift.lms.tensor_bytes import swappable


class Tier(Protocol):
    """Where swapped tensors go: pinned host memory (cuda.CudaTier) or spill files (disk.DiskTier)."""

    name: str

    def accepts(self, tensor: torch.Tensor) -> bool: ...
    def put(self, tensor: torch.Tensor) -> Any | None: ...
    def prefetch(self, slot: Any) -> None: ...
    def get(self, slot: Any) -> torch.Tensor: ...
    def free(self, slot: Any) -> None: ...
    def collect(self, wait: bool) -> None: ...
    def close(self, error: bool) -> None: ...


def is_parameter(tensor: torch.Tensor) -> bool:
    """A parameter, or a view of one (a transposed weight): it lives for the whole run, so swapping frees nothing."""
    base = tensor if tensor._base is None else tensor._base
    return isinstance(base, torch.nn.Parameter) or (base.requires_grad and base.grad_fn is None)


class Packed:
    """What autograd holds instead of a saved tensor: the tensor while it stays in place, else its tier slot."""

    __slots__ = ("__weakref__", "kept", "key", "nbytes", "owner", "previous", "slot", "source", "tensor", "version")

    def __init__(self, owner: Swapper, tensor: torch.Tensor, kept: str | None) -> None:
        self.owner = owner
        self.tensor: torch.Tensor | None = tensor
        self.source = weakref.ref(tensor)  # to check its version at unpack
        self.key = id(tensor)
        self.version = tensor._version
        self.nbytes = tensor.numel() * tensor.element_size()
        self.kept = kept  # why it stays in place; None while it waits in the window or once swapped
        self.slot: Any = None
        self.previous: weakref.ref[Packed] | None = None  # the tensor swapped before this one

    def __del__(self) -> None:
        self.owner.release(self)


class Swapper:
    """The hooks of one enable()/swapping() session and the order of what they swapped."""

    def __init__(self, options: Options, stats: Stats, tier: Tier) -> None:
        self.options = options
        self.stats = stats
        self.tier = tier
        self._window: deque[weakref.ref[Packed]] = deque()
        self._last_swapped: weakref.ref[Packed] | None = None
        self._by_id: dict[int, weakref.ref[Packed]] = {}  # the same tensor saved twice is swapped once
        self._in_place = 0  # bytes kept within the `limit` budget
        self._lock = threading.RLock()  # RLock: garbage collection may run `release` inside `pack`

    def _keep_reason(self, tensor: torch.Tensor) -> str | None:
        if not swappable(tensor):
            return "unsupported"
        if tensor.numel() * tensor.element_size() < max(self.options.min_bytes, 1):
            return "small"
        if is_parameter(tensor):
            return "parameter"
        if not self.tier.accepts(tensor):
            return "device"
        return None

    def pack(self, tensor: torch.Tensor) -> Packed:
        if torch.compiler.is_compiling():
            raise ForkliftError(
                "lms: saved tensors hooks were called while torch.compile traces; enable large model support "
                "outside the compiled function (around the call to the compiled model)"
            )
        reason = self._keep_reason(tensor)
        with self._lock:
            if reason is not None:
                self.stats.kept[reason] += 1
                return Packed(self, tensor, reason)
            seen = self._by_id.get(id(tensor))
            packed = seen() if seen is not None else None
            if packed is not None and packed.source() is tensor and packed.version == tensor._version:
                return packed
            packed = Packed(self, tensor, None)
            self._by_id[id(tensor)] = weakref.ref(packed)
            self._window.append(weakref.ref(packed))
            while len(self._window) > self.options.keep_last:
                oldest = self._window.popleft()()
                if oldest is not None:
                    self._settle(oldest)
            return packed

    def _settle(self, packed: Packed) -> None:
        """A tensor leaves the window: it stays within the `limit` budget, or goes to the tier if there is room."""
        tensor = packed.tensor
        if tensor is None or tensor._version != packed.version:  # changed in place: unpack will raise
            return
        if self._in_place + packed.nbytes <= self.options.limit:
            self._in_place += packed.nbytes
            self._keep(packed, "limit")
            return
        slot = self.tier.put(tensor)
        if slot is None:
            self._keep(packed, "full")
            return
        packed.slot, packed.tensor = slot, None
        packed.previous, self._last_swapped = self._last_swapped, weakref.ref(packed)
        self.stats.swapped_out_count += 1
        self.stats.swapped_out_bytes += packed.nbytes

    def _keep(self, packed: Packed, reason: str) -> None:
        packed.kept = reason
        self.stats.kept[reason] += 1

    def unpack(self, packed: Packed) -> torch.Tensor:
        with self._lock:
            while self._window:  # backward has begun: what is still in the window stays in place
                waiting = self._window.popleft()()
                if waiting is not None and waiting.kept is None and waiting.slot is None:
                    self._keep(waiting, "last")
            source = packed.source()
            if source is not None and source._version != packed.version:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: a saved tensor of shape {list(source.shape)} is at version {source._version}; "
                    f"expected version {packed.version} instead (checked by forklift.lms: autograd does not check "
                    "when saved tensors hooks are in use)"
                )
            if packed.tensor is not None:  # kept in place, never swapped
                return packed.tensor
            tensor = self.tier.get(packed.slot)
            self.stats.swapped_in_count += 1
            self.stats.swapped_in_bytes += packed.nbytes
            ahead = packed.previous
            for _ in range(self.options.prefetch):
                earlier = ahead() if ahead is not None else None
                if earlier is None or earlier.slot is None:
                    break
                self.tier.prefetch(earlier.slot)
                ahead = earlier.previous
            return tensor

    def release(self, packed: Packed) -> None:
        """Autograd dropped a saved tensor: free its slot or its share of the `limit` budget."""
        with self._lock:
            if packed.kept == "limit":
                self._in_place -= packed.nbytes
            seen = self._by_id.get(packed.key)
            if seen is not None and seen() in (None, packed):
                del self._by_id[packed.key]
            if packed.slot is not None:
                self.tier.free(packed.slot)
