"""A data set on disk in chunks of rows, for data larger than memory: written in one pass, read a chunk at a time.

A folder holds ``manifest.json`` (rows, features, the labels seen, each chunk's file and size) and one folder
``chunk-NNNNN`` per chunk of ``.npy`` files: the rows as CSR arrays (``data``, ``indices``, ``indptr``), their labels
``y`` and squared norms ``sqnorms``. Plain ``.npy`` files read 5x faster than one ``.npz`` (a zip file, whose CRC
check costs more than the read) and a streamed fit reads most chunks every pass; sets written as ``.npz`` chunks
(format 1) are still read.
Written from a libsvm file, a CSV file or an array (``np.memmap`` included) by :func:`write_chunks`; read by
:class:`ChunkedDataset`, whose ``part(rank, count)`` is the chunks a rank of a distributed fit reads.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from forklift.atomic import write_text_atomically
from forklift.ml.svmlight import load_svmlight_file

MANIFEST = "manifest.json"
FORMAT = "forklift.ml.chunked/2"
READABLE = (FORMAT, "forklift.ml.chunked/1")


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One chunk's file and sizes."""

    file: str
    rows: int
    nnz: int


@dataclasses.dataclass(frozen=True)
class ChunkedDataset:
    """A chunked data set on disk (see the module's docstring); ``X`` and ``y`` of a chunk come by :meth:`load`."""

    folder: Path
    n_rows: int
    n_features: int
    labels: tuple[float, ...]
    chunks: tuple[Chunk, ...]
    memory_budget: int = 1 << 30

    @classmethod
    def open(cls, folder: str | os.PathLike[str], *, memory_budget: int = 1 << 30) -> ChunkedDataset:
        """The data set in ``folder``; a fit on it keeps at most ``memory_budget`` bytes of it in memory."""
        folder = Path(folder)
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{folder}: not a chunked data set (no {MANIFEST})") from None
        if manifest.get("format") not in READABLE:
            raise ValueError(f"{folder / MANIFEST}: format {manifest.get('format')!r}, expected {FORMAT!r}")
        return cls(
            folder=folder,
            n_rows=int(manifest["rows"]),
            n_features=int(manifest["features"]),
            labels=tuple(manifest["labels"]),
            chunks=tuple(Chunk(**c) for c in manifest["chunks"]),
            memory_budget=memory_budget,
        )

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_rows, self.n_features

    @property
    def nbytes(self) -> int:
        """Bytes of the whole set in memory (float64 values, int32 indices)."""
        return sum(c.nnz * 12 + (c.rows + 1) * 8 + c.rows * 8 for c in self.chunks)

    def load(self, index: int) -> tuple[sp.csr_matrix, np.ndarray]:
        """Chunk ``index``'s rows and labels."""
        stored = _read(self.folder / self.chunks[index].file, ("data", "indices", "indptr", "y"))
        indptr = stored["indptr"]
        X = sp.csr_matrix((stored["data"], stored["indices"], indptr), shape=(indptr.size - 1, self.n_features))
        return X, stored["y"]

    def sqnorms(self, index: int) -> np.ndarray | None:
        """Chunk ``index``'s squared row norms as written (None in a set written before they were)."""
        return _read(self.folder / self.chunks[index].file, ("sqnorms",)).get("sqnorms")

    def part(self, rank: int, count: int) -> ChunkedDataset:
        """The chunks rank ``rank`` of ``count`` reads (every ``count``-th one, so sizes stay even)."""
        mine = self.chunks[rank::count]
        return dataclasses.replace(self, chunks=mine, n_rows=sum(c.rows for c in mine))


def _read(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The arrays ``names`` of a chunk that has them: a folder of ``.npy`` files or (format 1) an ``.npz`` file."""
    if path.is_dir():
        return {name: np.load(path / f"{name}.npy") for name in names if (path / f"{name}.npy").exists()}
    with np.load(path) as stored:
        return {name: stored[name] for name in names if name in stored}


def _row_blocks(source: Any, rows_per_chunk: int) -> Iterator[tuple[sp.csr_matrix, np.ndarray]]:
    """Blocks of ``(X, y)`` read from the source in one pass (X with raw indices for libsvm: base fixed later)."""
    if isinstance(source, tuple):
        X, y = source
        for start in range(0, X.shape[0], rows_per_chunk):
            yield sp.csr_matrix(X[start : start + rows_per_chunk]), np.asarray(y[start : start + rows_per_chunk])
        return
    path = Path(source)
    if path.suffix == ".csv":
        with open(path, newline="") as stream:
            reader = csv.reader(stream)
            block: list[list[float]] = []
            for number, record in enumerate(reader, start=1):
                try:
                    block.append([float(v) for v in record])
                except ValueError:
                    if number == 1:
                        continue  # a header
                    raise ValueError(f"{path}:{number}: not a row of numbers: {','.join(record)[:80]!r}") from None
                if len(block) == rows_per_chunk:
                    values = np.array(block)
                    yield sp.csr_matrix(values[:, 1:]), values[:, 0]
                    block = []
            if block:
                values = np.array(block)
                yield sp.csr_matrix(values[:, 1:]), values[:, 0]
        return
    size = path.stat().st_size
    window = max(1 << 20, rows_per_chunk * 64)
    unbounded = np.iinfo(np.int32).max
    pending: list[tuple[sp.csr_matrix, np.ndarray]] = []
    held = 0
    for offset in range(0, size, window):
        X, y = load_svmlight_file(path, n_features=unbounded, zero_based=True, offset=offset, length=window)
        pending.append((X, y))
        held += X.shape[0]
        while held >= rows_per_chunk:
            X = sp.vstack([p[0] for p in pending]).tocsr()
            y = np.concatenate([p[1] for p in pending])
            yield X[:rows_per_chunk], y[:rows_per_chunk]
            pending = [(X[rows_per_chunk:], y[rows_per_chunk:])]
            held -= rows_per_chunk
    if held:
        yield sp.vstack([p[0] for p in pending]).tocsr(), np.concatenate([p[1] for p in pending])


def write_chunks(
    source: str | os.PathLike[str] | tuple[Any, Any],
    folder: str | os.PathLike[str],
    *,
    rows_per_chunk: int = 100_000,
    zero_based: bool | str = "auto",
    n_features: int | None = None,
    dtype: type = np.float32,
) -> ChunkedDataset:
    """Write ``source`` (a libsvm file, a CSV file with the label first, or ``(X, y)`` arrays) in one pass.

    libsvm indices are 0- or 1-based as the whole file is (``zero_based="auto"``: an index 0 anywhere); the
    width is the largest index's unless ``n_features`` is given.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chunks: list[Chunk] = []
    labels: set[float] = set()
    smallest, widest = np.iinfo(np.int64).max, 0
    is_libsvm = not isinstance(source, tuple) and Path(source).suffix != ".csv"
    for index, (X, y) in enumerate(_row_blocks(source, rows_per_chunk)):
        name = f"chunk-{index:05d}"
        X.sort_indices()
        data = X.data.astype(dtype)
        squares = sp.csr_matrix((data.astype(np.float64) ** 2, X.indices, X.indptr), shape=X.shape)
        arrays = {
            "data": data,
            "indices": X.indices.astype(np.int32),
            "indptr": X.indptr.astype(np.int64),
            "y": np.asarray(y, dtype=np.float64),
            "sqnorms": np.asarray(squares.sum(axis=1), dtype=np.float64).ravel(),  # saves each streamed pass one read
        }
        (folder / name).mkdir(exist_ok=True)
        for key, values in arrays.items():
            np.save(folder / name / f"{key}.npy", values)
        chunks.append(Chunk(name, X.shape[0], X.nnz))
        labels.update(np.unique(y).tolist())
        if not is_libsvm:
            widest = max(widest, X.shape[1])
        elif X.nnz:
            smallest = min(smallest, int(X.indices.min()))
            widest = max(widest, int(X.indices.max()) + 1)
    if is_libsvm and (zero_based is False or (zero_based == "auto" and smallest >= 1)):
        if smallest == 0:
            raise ValueError(f"{source}: index 0 in a file read as 1-based (zero_based=False)")
        for chunk in chunks:  # one more pass over what was written, not over the source
            path = folder / chunk.file / "indices.npy"
            np.save(path, np.load(path) - 1)
        widest -= 1
    if n_features is not None:
        if widest > n_features:
            raise ValueError(f"{source}: an index beyond n_features={n_features}")
        widest = n_features
    manifest = {
        "format": FORMAT,
        "rows": sum(c.rows for c in chunks),
        "features": widest,
        "labels": sorted(labels),
        "chunks": [dataclasses.asdict(c) for c in chunks],
    }
    write_text_atomically(folder / MANIFEST, json.dumps(manifest, indent=1))
    return ChunkedDataset.open(folder)
