"""libsvm/svmlight files: scikit-learn's compiled reader, with the line of a malformed entry named.

One label a line (not multi-label). Indices are 0- or 1-based: by default the file decides (an index 0 anywhere
means 0-based), so a 0-based file never loses its first column or loads as no columns. ``offset``/``length`` read
a byte range (lines that start in it), which is how each rank of a distributed fit reads its own part of one file.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file as _sklearn_load

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"
LARGEST_INDEX = int(np.iinfo(np.int32).max) - 1  # the reader's indices are C ints (a 1-based index less 1)
_LINE = re.compile(rf"^\s*(?:{_NUMBER})(?:\s+qid:\d+)?(?:\s+\d+:(?:{_NUMBER}))*\s*(?:#.*)?$", re.IGNORECASE)


COMPRESSED: dict[str, Callable[..., IO[Any]]] = {".gz": gzip.open, ".bz2": bz2.open}  # files read through these


def open_bytes(path: Path) -> IO[bytes]:
    """A file's bytes, decompressed where its suffix says it is compressed."""
    opener = COMPRESSED.get(path.suffix.lower())
    return opener(path, "rb") if opener is not None else open(path, "rb")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with open_bytes(path) as stream:
        for number, raw in enumerate(stream, start=1):
            yield number, raw.decode("utf-8", errors="replace").rstrip("\r\n")


def malformed_line(
    path: str | os.PathLike[str], *, zero_based: bool | Literal["auto"] = "auto", why: str = "zero_based=False"
) -> str | None:
    """``"path:line: problem: 'text'"`` for the first line that is not ``label [qid:N] index:value ...``; ``why``
    says why a file is read as 1-based."""
    path = Path(path)
    for number, text in _lines(path):
        body = text.split("#", 1)[0].strip()
        if not body:
            continue
        if "\x00" in text or "\ufffd" in text:  # NUL bytes, or bytes that are no UTF-8 text
            return f"{path}:{number}: binary data, not a libsvm text file (a model, an archive?)"
        label, *items = body.split()
        if "," in label:
            return f"{path}:{number}: several labels ({label}): a line has one label: {text[:80]!r}"
        if not _LINE.match(body):
            return f"{path}:{number}: not 'label index:value ...': {text[:80]!r}"
        indices = [int(item.split(":", 1)[0]) for item in items if not item.startswith("qid:")]
        if indices and max(indices) > LARGEST_INDEX:
            return f"{path}:{number}: index {max(indices)} beyond {LARGEST_INDEX}, the largest read: {text[:80]!r}"
        if zero_based is False and 0 in indices:
            return f"{path}:{number}: index 0 in a file read as 1-based ({why}): {text[:80]!r}"
        if any(b <= a for a, b in itertools.pairwise(indices)):
            return f"{path}:{number}: indices not in increasing order: {text[:80]!r}"
    return None


def one_based_refusal(path: str | os.PathLike[str], *, why: str = "zero_based=False") -> ValueError:
    """The error for an index 0 found in a file read as 1-based, naming its line (found again: an error path)."""
    located = malformed_line(path, zero_based=False, why=why)
    return ValueError(located or f"{path}: index 0 in a file read as 1-based ({why})")


def read_as_one_based(
    path: str | os.PathLike[str],
    lowest: int | None,
    zero_based: bool | Literal["auto"],
    *,
    why: str = "zero_based=False",
) -> bool:
    """Whether a file whose smallest index is ``lowest`` (None: it holds none) is read as 1-based: when
    ``zero_based`` is False, or ``"auto"`` and it holds no index 0; an index 0 in a file read so is refused."""
    one_based = zero_based is False or (zero_based == "auto" and lowest != 0)
    if one_based and lowest == 0:
        raise one_based_refusal(path, why=why)
    return one_based


def load_svmlight_file(
    path: str | os.PathLike[str],
    *,
    n_features: int | None = None,
    dtype: type = np.float64,
    zero_based: bool | Literal["auto"] = "auto",
    offset: int = 0,
    length: int = -1,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """``(X, y)`` from a libsvm/svmlight file (``.gz`` and ``.bz2`` read as such); a malformed line is named.

    Raises ``ValueError("path:line: problem: 'text'")`` for a malformed file and ``FileNotFoundError`` for a
    missing one.
    """
    if not isinstance(path, str | os.PathLike):  # its lines are named, and read again by name to find a bad one
        raise ValueError(f"load_svmlight_file takes a file's path (str or os.PathLike), not {type(path).__name__}")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: a folder, not a libsvm file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if zero_based == "auto" and (offset > 0 or length >= 0):
        raise ValueError(
            f"{path}: a byte range cannot tell whether the file is 0- or 1-based: give zero_based=True or False"
        )
    try:
        X, y = _sklearn_load(
            str(path), n_features=n_features, dtype=dtype, zero_based=zero_based, offset=offset, length=length
        )
    except (ValueError, OverflowError) as error:  # an index beyond a C int overflows
        problem = malformed_line(path, zero_based=zero_based)
        raise ValueError(problem or f"{path}: {error}") from error
    return X, y
