"""The settings of one `forklift serve`, with the defaults the README documents."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_PORT = 5000
DEFAULT_MAX_UPLOAD_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_TENSOR_BYTES = 64 * 1024 * 1024  # v2 requests: a 416x416 batch of 8 is 16 MB binary, 4x that as JSON


@dataclass(frozen=True)
class UrlFetch:
    """Fetching images by URL (PowerAI's detect_url and imageUrl): off unless hosts are allowed."""

    allowed_hosts: frozenset[str] = frozenset()
    max_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.allowed_hosts)


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    max_batch: int = 8
    batch_timeout_ms: float = 0.0
    queue_size: int = 64
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES
    max_pixels: int = 100_000_000
    url_fetch: UrlFetch = field(default_factory=UrlFetch)
    drain_timeout_s: float = 30.0
