"""Darknet `.weights` files: a small header, then every layer's parameters as float32, in layer order.

Header: int32 major, minor, revision, then `seen` (images trained on) as int64 when major*10+minor >= 2
(and both below 1000), else int32. Reading then writing gives the same bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from forklift.errors import ForkliftError


@dataclass(frozen=True)
class WeightsHeader:
    major: int = 0
    minor: int = 2
    revision: int = 0
    seen: int = 0

    @property
    def seen_is_int64(self) -> bool:
        return (self.major * 10 + self.minor) >= 2 and self.major < 1000 and self.minor < 1000

    @property
    def size(self) -> int:
        return 12 + (8 if self.seen_is_int64 else 4)

    def to_bytes(self) -> bytes:
        seen = struct.pack("<q" if self.seen_is_int64 else "<i", self.seen)
        return struct.pack("<3i", self.major, self.minor, self.revision) + seen


@dataclass
class DarknetWeights:
    """The header and all parameter values of one file, flat."""

    header: WeightsHeader
    values: np.ndarray  # float32, 1-D


def read_weights(path: Path) -> DarknetWeights:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ForkliftError(f"{path}: cannot read: {exc.strerror}") from exc
    if len(data) < 16:
        raise ForkliftError(f"{path}: {len(data)} bytes is too short for a Darknet weights header (16 or 20 bytes)")
    major, minor, revision = struct.unpack_from("<3i", data)
    header = WeightsHeader(major, minor, revision, 0)
    if len(data) < header.size:
        raise ForkliftError(f"{path}: truncated header ({len(data)} of {header.size} bytes)")
    (seen,) = struct.unpack_from("<q" if header.seen_is_int64 else "<i", data, 12)
    header = WeightsHeader(major, minor, revision, seen)
    body = len(data) - header.size
    if body % 4:
        raise ForkliftError(f"{path}: {body} bytes after the header is not a whole number of float32 values")
    return DarknetWeights(header, np.frombuffer(data, dtype="<f4", offset=header.size).copy())


def write_weights(path: Path, weights: DarknetWeights) -> None:
    with path.open("wb") as out:
        out.write(weights.header.to_bytes())
        out.write(np.ascontiguousarray(weights.values, dtype="<f4").tobytes())
