"""A data set on disk in chunks of rows, for data larger than memory: written in one pass, read a chunk at a time.

A folder holds ``manifest.json`` (rows, features, the labels seen unless there are more than ``MAX_LABELS``, each
chunk's file and size) and one folder ``chunk-NNNNN`` per chunk of ``.npy`` files: the rows as CSR arrays (``data``,
``indices``, ``indptr``), their labels ``y`` and squared norms ``sqnorms``. Plain ``.npy`` files read 5x faster than
one ``.npz`` (a zip file, whose CRC check costs more than the read) and a streamed fit reads most chunks every pass;
sets written as ``.npz`` chunks (format 1) are still read.
Written from a libsvm file, a CSV file or an array (``np.memmap`` included) by :func:`write_chunks`; read by
:class:`ChunkedDataset`, whose ``part(rank, count)`` is the chunks a rank of a distributed fit reads.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import numbers
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from forklift.atomic import write_text_atomically
from forklift.ml.svmlight import COMPRESSED, load_svmlight_file, read_as_one_based

MANIFEST = "manifest.json"
MAX_LABELS = 1000  # more distinct targets than this are a regression's: the manifest keeps no list of them
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
    labels: tuple[float, ...] | None  # None: more than MAX_LABELS distinct targets
    chunks: tuple[Chunk, ...]
    memory_budget: int = 1 << 30

    @classmethod
    def open(cls, folder: str | os.PathLike[str], *, memory_budget: int = 1 << 30) -> ChunkedDataset:
        """The data set in ``folder``; a fit on it keeps at most ``memory_budget`` bytes of it in memory."""
        folder = Path(folder)
        if isinstance(memory_budget, bool) or not isinstance(memory_budget, numbers.Integral) or memory_budget < 1:
            raise ValueError(f"memory_budget={memory_budget!r}: expected bytes, a whole number >= 1 (1 << 30 is 1 GiB)")
        if folder.is_file():
            raise ValueError(f"{folder}: a file, not a chunked data set's folder (write one with write_chunks)")
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{folder}: not a chunked data set (no {MANIFEST})") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"{folder / MANIFEST}: not JSON ({error})") from None
        if not isinstance(manifest, dict) or manifest.get("format") not in READABLE:
            found = manifest.get("format") if isinstance(manifest, dict) else manifest
            raise ValueError(f"{folder / MANIFEST}: format {found!r}, expected {FORMAT!r}")
        try:
            return cls(
                folder=folder,
                n_rows=int(manifest["rows"]),
                n_features=int(manifest["features"]),
                labels=None if manifest["labels"] is None else tuple(manifest["labels"]),
                chunks=tuple(Chunk(**c) for c in manifest["chunks"]),
                memory_budget=memory_budget,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{folder / MANIFEST}: a damaged manifest ({type(error).__name__}: {error})") from None

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
    """The arrays ``names`` of a chunk that has them: a folder of ``.npy`` files or (format 1) an ``.npz`` file; a
    missing or unreadable one is one line naming it (numpy's would not say it is a chunk of a set)."""
    damaged = f"the chunked set in {path.parent} is damaged (write it again with write_chunks)"
    if not path.exists():
        raise ValueError(f"{path}: missing: {damaged}")
    files = [path / f"{name}.npy" for name in names] if path.is_dir() else [path]
    try:
        if path.is_dir():
            return {file.stem: np.load(file) for file in files if file.exists()}
        with np.load(path) as stored:
            return {name: stored[name] for name in names if name in stored}
    except (OSError, ValueError, EOFError):
        unreadable = next((file for file in files if not _loads(file)), path)
        raise ValueError(f"{unreadable}: not a numpy array file numpy can read: {damaged}") from None


def _loads(file: Path) -> bool:
    try:
        np.load(file, mmap_mode="r")
    except (OSError, ValueError, EOFError):
        return not file.exists()  # an absent optional array is no error
    return True


def _row_blocks(source: Any, rows_per_chunk: int) -> Iterator[tuple[sp.csr_matrix, np.ndarray]]:
    """Blocks of ``(X, y)`` read from the source in one pass (X with raw indices for libsvm: base fixed later)."""
    if isinstance(source, tuple):
        X, y = source
        for start in range(0, X.shape[0], rows_per_chunk):
            yield sp.csr_matrix(X[start : start + rows_per_chunk]), np.asarray(y[start : start + rows_per_chunk])
        return
    path = Path(source)
    if _is_csv(path):
        yield from _csv_blocks(path, rows_per_chunk)
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


def _is_csv(path: Path) -> bool:
    return (Path(path.stem) if path.suffix in COMPRESSED else path).suffix == ".csv"


def _csv_blocks(path: Path, rows_per_chunk: int) -> Iterator[tuple[sp.csr_matrix, np.ndarray]]:
    """Rows of numbers, the label first; a header line and blank lines are skipped, a short or long row is named."""
    opener = COMPRESSED.get(path.suffix, open)
    with opener(path, "rt", newline="") as stream:
        block: list[list[float]] = []
        width = None
        for number, record in enumerate(csv.reader(stream), start=1):
            if not record or not "".join(record).strip():
                continue
            try:
                values = [float(v) for v in record]
            except ValueError:
                if number == 1:
                    continue  # a header
                raise ValueError(f"{path}:{number}: not a row of numbers: {','.join(record)[:80]!r}") from None
            if width is not None and len(values) != width:
                raise ValueError(f"{path}:{number}: {len(values)} values where the rows before have {width}")
            width = len(values)
            block.append(values)
            if len(block) == rows_per_chunk:
                yield _csv_block(block)
                block = []
        if block:
            yield _csv_block(block)


def _csv_block(block: list[list[float]]) -> tuple[sp.csr_matrix, np.ndarray]:
    values = np.array(block)
    return sp.csr_matrix(values[:, 1:]), values[:, 0]


@contextlib.contextmanager
def _plain(path: Path, folder: Path) -> Iterator[Path]:
    """A compressed libsvm file decompressed into ``folder`` (its byte windows are read by offset), else itself."""
    if path.suffix not in COMPRESSED or _is_csv(path):
        yield path
        return
    plain = folder / f".{path.stem}.decompressed"
    try:
        with COMPRESSED[path.suffix](path, "rb") as packed, open(plain, "wb") as out:
            shutil.copyfileobj(packed, out, 1 << 20)
        yield plain
    finally:
        plain.unlink(missing_ok=True)


def write_chunks(
    source: str | os.PathLike[str] | tuple[Any, Any],
    folder: str | os.PathLike[str],
    *,
    rows_per_chunk: int = 100_000,
    zero_based: bool | Literal["auto"] = "auto",
    n_features: int | None = None,
    dtype: type = np.float32,
) -> ChunkedDataset:
    """Write ``source`` (a libsvm file, a CSV file with the label first, either of them ``.gz`` or ``.bz2``, or
    ``(X, y)`` arrays) in one pass; a compressed libsvm file is decompressed into ``folder`` while it is read.

    libsvm indices are 0- or 1-based as the whole file is (``zero_based="auto"``: an index 0 anywhere); the
    width is the largest index's unless ``n_features`` is given.
    """
    folder = Path(folder)
    if rows_per_chunk < 1:
        raise ValueError(f"rows_per_chunk={rows_per_chunk}: a chunk holds at least one row")
    if isinstance(source, tuple):
        rows, labelled = _length(source[0]), _length(source[1])
        if rows != labelled:
            raise ValueError(f"X has {rows} rows but y has {labelled} labels")
        kind = np.asarray(source[1][:1]).dtype
        if not (np.issubdtype(kind, np.number) or np.issubdtype(kind, np.bool_)):
            raise ValueError(f"y holds {kind} labels: a chunked set stores numbers (encode the classes as 0, 1, ...)")
    elif not Path(source).is_file():
        raise FileNotFoundError(f"{source}: no such file")
    _check_writable(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / f".{folder.name}.writing-{os.getpid()}"  # beside it: renamed into place when done
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        if isinstance(source, tuple):
            _write(source, staging, rows_per_chunk, zero_based, n_features, dtype)
        else:
            with _plain(Path(source), staging) as plain:
                try:
                    _write(plain, staging, rows_per_chunk, zero_based, n_features, dtype)
                except ValueError as error:  # say the file the user named, not its decompressed copy
                    raise ValueError(str(error).replace(str(plain), str(source))) from error
        _replace(folder, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ChunkedDataset.open(folder)


def _check_writable(folder: Path) -> None:
    """Refuse a folder that holds something other than a chunked set: the chunks would be mixed with it."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder}: a file, not a folder to write the chunks in")
    if folder.is_dir() and not (folder / MANIFEST).is_file():
        other = next(folder.iterdir(), None)
        if other is not None:
            raise ValueError(
                f"{folder}: holds {other.name}, and is not a chunked set: give a new or empty folder (a chunked "
                "set's folder is written over)"
            )


def _replace(folder: Path, staging: Path) -> None:
    """Put the set written in ``staging`` in ``folder``: a set there before goes (its chunks too, where the new set
    has fewer), only once the new one is whole; a failed write leaves the old set and no new folder."""
    if not folder.exists():
        staging.rename(folder)
        return
    (folder / MANIFEST).unlink(missing_ok=True)
    for old in folder.glob("chunk-*"):
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    for new in staging.iterdir():
        new.rename(folder / new.name)


def _check_finite(
    source: Path | tuple[Any, Any], X: sp.csr_matrix, data: np.ndarray, y: np.ndarray, *, first_row: int
) -> None:
    """Refuse a NaN or infinite value or label (or a value beyond the stored precision's range), naming its row: the
    dual solver would make every weight NaN from it."""
    bad = ~np.isfinite(y)
    bad[np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[~np.isfinite(data)]] = True
    if bad.any():
        row = first_row + int(np.argmax(bad))
        where = f"X[{row}] or y[{row}]" if isinstance(source, tuple) else f"{source}: data row {row + 1}"
        limit = ", or beyond float32's range" if data.dtype == np.float32 else ""
        raise ValueError(
            f"{where} holds a value or label that is not a finite number (NaN or infinite{limit}): a chunked set "
            "holds finite numbers"
        )


def _length(values: Any) -> int:
    return int(values.shape[0]) if hasattr(values, "shape") else len(values)


def _write(
    source: Path | tuple[Any, Any],
    folder: Path,
    rows_per_chunk: int,
    zero_based: bool | Literal["auto"],
    n_features: int | None,
    dtype: type,
) -> None:
    chunks: list[Chunk] = []
    labels: set[float] | None = set()
    smallest, widest = np.iinfo(np.int64).max, 0
    is_libsvm = not isinstance(source, tuple) and not _is_csv(source)
    first_row = 0
    for index, (X, y) in enumerate(_row_blocks(source, rows_per_chunk)):
        name = f"chunk-{index:05d}"
        X.sort_indices()
        data = X.data.astype(dtype)
        y = np.asarray(y, dtype=np.float64)
        _check_finite(source, X, data, y, first_row=first_row)
        first_row += X.shape[0]
        squares = sp.csr_matrix((data.astype(np.float64) ** 2, X.indices, X.indptr), shape=X.shape)
        arrays = {
            "data": data,
            "indices": X.indices.astype(np.int32),
            "indptr": X.indptr.astype(np.int64),
            "y": y,
            "sqnorms": np.asarray(squares.sum(axis=1), dtype=np.float64).ravel(),  # saves each streamed pass one read
        }
        (folder / name).mkdir(exist_ok=True)
        for key, values in arrays.items():
            np.save(folder / name / f"{key}.npy", values)
        chunks.append(Chunk(name, X.shape[0], X.nnz))
        if labels is not None:
            labels.update(np.unique(y).tolist())
            labels = labels if len(labels) <= MAX_LABELS else None
        if not is_libsvm:
            widest = max(widest, X.shape[1])
        elif X.nnz:
            smallest = min(smallest, int(X.indices.min()))
            widest = max(widest, int(X.indices.max()) + 1)
    if not chunks:
        raise ValueError(f"{'the arrays' if isinstance(source, tuple) else source}: no rows: a chunked set holds some")
    if is_libsvm and read_as_one_based(str(source), smallest, zero_based):
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
        "labels": None if labels is None else sorted(labels),
        "chunks": [dataclasses.asdict(c) for c in chunks],
    }
    write_text_atomically(folder / MANIFEST, json.dumps(manifest, indent=1))
