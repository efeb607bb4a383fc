"""The settings of one `forklift serve`, with the defaults the README documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

DEFAULT_PORT = 5000
DEFAULT_MAX_UPLOAD_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_TENSOR_BYTES = 64 * 1024 * 1024  # v2 requests: a 416x416 batch of 8 is 16 MB binary, 4x that as JSON


DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class UrlOrigin:
    """A host and port images may be fetched from (`--url-allow-host HOST[:PORT]`)."""

    host: str
    port: int | None = None  # None: the scheme's own port (80 for http, 443 for https), no other

    @classmethod
    def parse(cls, text: str) -> UrlOrigin:
        """`host`, `host:port` or `[v6 address]:port`; a ValueError says what is wrong."""
        parts = urlsplit(f"http://{text}")
        if not parts.hostname or parts.path or parts.query or parts.username or "@" in text:
            raise ValueError(f"{text!r} is not a HOST or HOST:PORT")
        try:
            port = parts.port
        except ValueError:
            port = 0
        if port == 0:
            raise ValueError(f"{text!r}: the port is not a number from 1 to 65535")
        return cls(parts.hostname, port)

    def admits(self, scheme: str, host: str, port: int | None) -> bool:
        return host == self.host and (port or DEFAULT_PORTS[scheme]) == (self.port or DEFAULT_PORTS[scheme])


@dataclass(frozen=True)
class UrlFetch:
    """Fetching images by URL (PowerAI's detect_url and imageUrl): off unless hosts are allowed."""

    allowed: frozenset[UrlOrigin] = frozenset()
    max_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.allowed)


@dataclass(frozen=True)
class BodyLimit:
    """A request body's largest size and the `forklift serve` option that sets it, which a 413 names."""

    size: int
    option: str


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

    @property
    def upload_limit(self) -> BodyLimit:
        return BodyLimit(self.max_upload_bytes, "--max-upload-mb")

    @property
    def tensor_limit(self) -> BodyLimit:
        return BodyLimit(self.max_tensor_bytes, "--max-tensor-mb")
