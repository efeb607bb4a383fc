"""Catalogue files fetched into the user's cache: from their publishers or from a site's mirror (a web server's
base URL or a folder), resumed where a cut connection left them, and checked against the catalogue before a file
takes its place in the cache. A file in the cache is therefore one that passed; a `.part` beside it is one still
coming."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import httpx
from tqdm import tqdm

from forklift.errors import ForkliftError, out_of_space
from forklift.pretrained.catalogue import RemoteFile
from forklift.user_cache import user_cache

CACHE_VARIABLE = "FORKLIFT_CACHE"
MIRROR_VARIABLE = "FORKLIFT_MIRROR"
CHUNK = 1 << 20
_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
_MIB = 2**20


def cache_root() -> Path:
    """$FORKLIFT_CACHE, else forklift's folder in the user's cache directory (XDG)."""
    return Path(os.environ[CACHE_VARIABLE]) if os.environ.get(CACHE_VARIABLE) else user_cache()


@dataclass(frozen=True)
class Source:
    """Where files come from: their publishers (`mirror` None), or a mirror that keeps them under HOST/PATH of
    their URLs, as a base URL (http, https) or as a folder."""

    mirror: str | None = None

    @classmethod
    def of(cls, given: str | None) -> Source:
        """The mirror given, else $FORKLIFT_MIRROR, else the publishers."""
        return cls(given or os.environ.get(MIRROR_VARIABLE) or None)

    def location(self, file: RemoteFile) -> str:
        if self.mirror is None:
            return file.url
        if urlsplit(self.mirror).scheme in ("http", "https"):
            return f"{self.mirror.rstrip('/')}/{file.relative_path.as_posix()}"
        return str(Path(self.mirror.removeprefix("file://")) / file.relative_path)


def cached_path(file: RemoteFile, cache: Path) -> Path:
    return cache / "pretrained" / file.relative_path


def partial_path(file: RemoteFile, cache: Path) -> Path:
    path = cached_path(file, cache)
    return path.with_name(path.name + ".part")


def fetch(file: RemoteFile, *, cache: Path, source: Source) -> Path:
    """The file's verified copy in the cache, downloaded (or resumed) first when it is not there yet."""
    target = cached_path(file, cache)
    if target.is_file():
        return target
    part = partial_path(file, cache)
    part.parent.mkdir(parents=True, exist_ok=True)
    with part.open("ab") as out:
        try:
            fcntl.flock(out, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ForkliftError(f"{part}: another forklift is downloading it; wait for that one to finish") from None
        if target.is_file():  # the other one finished while this one waited for the lock
            return target
        try:
            _download(file, source.location(file), out, part)
        except OSError as exc:
            if not out_of_space(exc):
                raise
            part.unlink(missing_ok=True)
            raise ForkliftError(
                f"{part.parent}: the disk is full; the partial {file.file_name} was removed. Free some space or set "
                f"{CACHE_VARIABLE} to a folder on a larger disk"
            ) from None
        except BaseException:
            if out.tell() == 0:  # nothing came: no part to resume
                part.unlink(missing_ok=True)
            raise
        _verify(file, part)
        part.replace(target)
    return target


def _download(file: RemoteFile, location: str, out: BinaryIO, part: Path) -> None:
    have = out.seek(0, os.SEEK_END)
    _check_room(file, part, have)
    with _opened(location, have) as (start, chunks):
        if start != have:  # the server sent the whole file again: start over
            out.truncate(0)
            out.seek(0)
        total = file.approximate_bytes
        with tqdm(total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024, desc=file.file_name,
                  disable=None, leave=False) as bar:  # fmt: skip
            written = start
            try:
                for chunk in chunks:
                    out.write(chunk)
                    written += len(chunk)
                    bar.update(len(chunk))
                    if file.size is not None and written > file.size:
                        break  # _verify says what is wrong with it
            except httpx.TransportError as exc:
                out.flush()
                raise _broken(location, written, _reason(exc)) from None
    out.flush()
    if file.size is not None and written < file.size:
        raise _broken(location, written, f"the answer ended {file.size - written} bytes short")


def _broken(location: str, written: int, reason: str) -> ForkliftError:
    return ForkliftError(
        f"{location}: the connection broke after {written / _MIB:.1f} MiB ({reason}); the part is kept and the same "
        "command resumes it"
    )


@contextlib.contextmanager
def _opened(location: str, start: int) -> Iterator[tuple[int, Iterator[bytes]]]:
    """(where the answer starts, its chunks): a ranged request resumes at `start`, unless the server ignores it."""
    if urlsplit(location).scheme not in ("http", "https"):
        path = Path(location)
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise ForkliftError(f"{path}: not in the mirror folder ({exc.strerror})") from None
        with handle:
            handle.seek(start)
            yield start, iter(lambda: handle.read(CHUNK), b"")
        return
    headers = {"Accept-Encoding": "identity"} | ({"Range": f"bytes={start}-"} if start else {})  # bytes as stored
    try:
        with httpx.stream("GET", location, headers=headers, follow_redirects=True, timeout=_TIMEOUT) as answer:
            if answer.status_code == 416 and start:  # nothing after `start`: the part is whole
                yield start, iter(())
                return
            if answer.status_code >= 400:
                raise ForkliftError(f"{location}: the server answered {answer.status_code} {answer.reason_phrase}")
            yield (start if answer.status_code == 206 else 0), answer.iter_bytes()  # as they arrive
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ForkliftError(
            f"{location}: cannot connect ({_reason(exc)}); without internet, set {MIRROR_VARIABLE} (or --mirror) to "
            "a mirror that `forklift models mirror` laid out"
        ) from None


def _reason(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _check_room(file: RemoteFile, part: Path, have: int) -> None:
    needed = (file.approximate_bytes or 0) - have
    free = shutil.disk_usage(part.parent).free
    if needed > free:
        raise ForkliftError(
            f"{part.parent}: {free / _MIB:.0f} MiB free, {file.file_name} needs {needed / _MIB:.0f} MiB more; free "
            f"some space or set {CACHE_VARIABLE} to a folder on a larger disk"
        )


def digest_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _verify(file: RemoteFile, part: Path) -> None:
    """A download that is not what the catalogue says is removed, never used."""
    if (problem := mismatch(file, part)) is not None:
        part.unlink()
        raise ForkliftError(f"{file.url}: {problem}; the download was removed (a changed or damaged file)")


def mismatch(file: RemoteFile, path: Path) -> str | None:
    """What makes the file at `path` other than the catalogue's (its size, then its SHA-256), or None."""
    length = path.stat().st_size
    if file.size is not None and length != file.size:
        return f"{length} bytes where the catalogue says {file.size}"
    if file.sha256 is not None and not (digest := digest_of(path)).startswith(file.sha256):
        return f"its SHA-256 is {digest[:16]}..., not the catalogue's {file.sha256[:16]}..."
    return None
