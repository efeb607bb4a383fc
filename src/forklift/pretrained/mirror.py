"""`forklift models mirror DIR`: the cached files of catalogue models laid out as a mirror (HOST/PATH of each
URL), each checked again on the way, for a site without internet to serve from any web server or a shared folder
(FORKLIFT_MIRROR)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from forklift.atomic import written_atomically
from forklift.errors import ForkliftError
from forklift.pretrained.catalogue import Pretrained
from forklift.pretrained.fetch import Source, cached_path, fetch, mismatch


@dataclass(frozen=True)
class Mirrored:
    files: int
    bytes: int


def lay_out_mirror(models: Iterable[Pretrained], *, cache: Path, source: Source, folder: Path) -> Mirrored:
    """Each model's files copied from the cache into `folder` (fetched first where not cached); a copy already
    there and still matching the catalogue is kept."""
    files = {file.url: file for model in models for file in model.files}.values()
    total = 0
    for file in files:
        cached = fetch(file, cache=cache, source=source)
        if (problem := mismatch(file, cached)) is not None:
            cached.unlink()
            raise ForkliftError(f"{cached}: {problem}; removed from the cache (the next pull fetches it anew)")
        placed = folder / file.relative_path
        if not (placed.is_file() and mismatch(file, placed) is None and placed.stat().st_size == cached.stat().st_size):
            with written_atomically(placed) as partial:
                shutil.copyfile(cached, partial)
        total += placed.stat().st_size
    return Mirrored(len(files), total)


def cached_models(catalogue: dict[str, Pretrained], cache: Path) -> list[Pretrained]:
    """The models whose every file is in the cache."""
    return [m for m in catalogue.values() if all(cached_path(f, cache).is_file() for f in m.files)]
