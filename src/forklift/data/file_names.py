"""File names made unique within one folder an export or a command writes."""

from __future__ import annotations

from pathlib import PurePosixPath


def unique_name(name: str, taken: set[str]) -> str:
    """name, or name_2, name_3 ... so no two files share a stem (their label or XML files would clash; a second
    image of one name would overwrite the first), compared without case as some file systems do."""
    path = PurePosixPath(name)
    stem, count = path.stem, 1
    while (stem if count == 1 else f"{stem}_{count}").lower() in taken:
        count += 1
    stem = stem if count == 1 else f"{stem}_{count}"
    taken.add(stem.lower())
    return stem + path.suffix
