"""Files that appear whole or not at all: written beside their final name and renamed into place.

A crash or a full disk mid-write then leaves the previous file (or none), never half of one, which matters for
what is read back later: checkpoints, dataset.json, exports, saved recommendations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def written_atomically(path: Path) -> Iterator[Path]:
    """Yields a side path (`NAME.partial`) to write; on leaving the block without an error it replaces `path`,
    and with an error it is removed. The parent folder is created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        yield partial
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> Path:
    """`path` holding `text` (UTF-8), written atomically; returns `path`."""
    with written_atomically(path) as partial:
        partial.write_text(text, encoding="utf-8")
    return Path(path)
