"""`forklift post`: send images COUNT times with C requests in flight, and report latency and throughput.

The load generator of the original deployment's `post` script, on one asyncio loop with a connection pool,
so the client itself costs little CPU next to the server it measures.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np
from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from forklift.errors import ForkliftError
from forklift.vision.images import FORMAT_NAMES

NOT_CONNECTED = frozenset({"ConnectError", "ConnectTimeout"})  # httpx's words for a request that never reached a server


@dataclass
class LoadResult:
    """What one load run measured; latencies in milliseconds."""

    url: str
    requests: int
    concurrency: int
    ok: int = 0
    errors: int = 0
    error_codes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    mean_ms: float = 0.0
    throughput: float = 0.0  # answered requests per second

    def to_json(self) -> dict:
        return asdict(self)


def _summarise(result: LoadResult, latencies: list[float]) -> LoadResult:
    if latencies:
        values = np.asarray(latencies) * 1000
        result.p50_ms, result.p90_ms, result.p99_ms = (round(float(v), 2) for v in np.percentile(values, [50, 90, 99]))
        result.max_ms = round(float(values.max()), 2)
        result.mean_ms = round(float(values.mean()), 2)
    result.throughput = round(result.ok / result.seconds, 2) if result.seconds else 0.0
    return result


async def run_load(
    url: str, images: Sequence[tuple[str, bytes]], count: int, concurrency: int, show_progress: bool = False
) -> LoadResult:
    """POST the images in turn as multipart `files` to `url`, `count` times, `concurrency` at a time."""
    result = LoadResult(url, count, concurrency)
    latencies: list[float] = []
    remaining = zip(range(count), itertools.cycle(images))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    progress = tqdm(total=count, desc="post", unit="req", disable=not show_progress, leave=False)

    async def sender(client: httpx.AsyncClient) -> None:
        for _, (filename, image) in remaining:
            start = time.perf_counter()
            try:
                response = await client.post(url, files={"files": (filename, image, "image/jpeg")})
                code = str(response.status_code)
            except httpx.HTTPError as exc:
                code = type(exc).__name__
            if code == "200":
                result.ok += 1
                latencies.append(time.perf_counter() - start)
            else:
                result.errors += 1
                result.error_codes[code] = result.error_codes.get(code, 0) + 1
            progress.update()

    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=10.0), limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(sender(client) for _ in range(concurrency)))
        result.seconds = round(time.perf_counter() - start, 3)
    progress.close()
    return _summarise(result, latencies)


def server_workers(url: str) -> int:
    """How many workers the server at `url` runs (its /healthz), for a default concurrency."""
    base = httpx.URL(url).copy_with(path="/healthz", query=None)
    try:
        facts = httpx.get(base, timeout=10).json()
        return max(1, sum(m.get("workers", 1) for m in facts.get("models", {}).values()))
    except (httpx.HTTPError, ValueError):
        return 1


def checked_url(url: str) -> httpx.URL:
    """`url` if it is an http(s) URL with a host: anything else failed every request, counted as errors."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ForkliftError(f"--url {url}: not a URL ({exc})") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ForkliftError(f"--url {url}: not an http(s) URL (for example http://127.0.0.1:5000/predict/MODEL)")
    return parsed


def read_images(paths: Sequence[Path]) -> list[tuple[str, bytes]]:
    """Each image's name and bytes; a file that is not an image is refused here, where every request of a run
    (a sweep's, minutes of them) would have been an error."""
    images = []
    for path in paths:
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise ForkliftError(f"{path}: cannot read: {exc.strerror}") from exc
        try:
            with Image.open(io.BytesIO(content)):
                pass
        except (UnidentifiedImageError, OSError) as exc:
            raise ForkliftError(f"{path}: not an image ({FORMAT_NAMES})") from exc
        images.append((path.name, content))
    return images


def post(images: Sequence[Path], count: int, *, url: str, concurrency: int | None, show_progress: bool) -> LoadResult:
    if count < 1:
        raise ForkliftError(f"COUNT must be at least 1, not {count}")
    checked_url(url)
    concurrency = concurrency or server_workers(url)
    result = asyncio.run(run_load(url, read_images(images), count, concurrency, show_progress))
    if result.ok == 0 and set(result.error_codes) <= NOT_CONNECTED:  # no table of a load that never arrived
        raise ForkliftError(f"--url {url}: cannot connect ({count} tries): is a server listening there?")
    return result
