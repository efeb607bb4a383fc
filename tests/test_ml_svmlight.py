"""forklift.ml.load_svmlight_file: 0- and 1-based files, gzip, byte ranges, and the line of a malformed entry."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pytest

from forklift.ml import load_svmlight_file

EXPECTED = [[1.5, 0.0, 0.0, 2.0], [0.0, 1.0, -1.0, 0.0]]


def test_zero_and_one_based_files_load_the_same_columns(tmp_path: Path) -> None:
    (tmp_path / "zero.txt").write_text("1 0:1.5 3:2\n0 1:1 2:-1\n")
    (tmp_path / "one.txt").write_text("1 1:1.5 4:2\n0 2:1 3:-1  # a comment\n")
    with gzip.open(tmp_path / "one.txt.gz", "wt") as stream:
        stream.write("1 1:1.5 4:2\n0 2:1 3:-1\n")
    for name in ("zero.txt", "one.txt", "one.txt.gz"):
        X, y = load_svmlight_file(tmp_path / name)
        assert X.toarray().tolist() == EXPECTED, name
        assert y.tolist() == [1.0, 0.0]


def test_a_byte_range_reads_the_lines_that_start_in_it(tmp_path: Path) -> None:
    lines = [f"{i % 2} {i + 1}:{i}.5\n" for i in range(10)]
    path = tmp_path / "rows.txt"
    path.write_text("".join(lines))
    size = path.stat().st_size
    parts = [
        load_svmlight_file(path, n_features=10, zero_based=False, offset=o, length=size // 3 + 1)
        for o in range(0, size, size // 3 + 1)
    ]
    assert sum(X.shape[0] for X, _ in parts) == 10
    np.testing.assert_array_equal(np.concatenate([y for _, y in parts]), [i % 2 for i in range(10)])
    with pytest.raises(ValueError, match=r"rows\.txt: a byte range cannot tell whether the file is 0- or 1-based"):
        load_svmlight_file(path, n_features=10, offset=size // 2)  # read as 0-based, its columns would shift by one


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 1:1.5 4:2\n0 2:1 3:-1\n1 2:x\n", r"bad\.txt:3: not 'label index:value \.\.\.': '1 2:x'"),
        ("1 1:1.5 4:2\n0 3:1 2:-1\n", r"bad\.txt:2: indices not in increasing order"),
        ("1 1:0.5\n1,2 1:0.5\n", r"bad\.txt:2: several labels \(1,2\): a line has one label"),  # multi-label
        ("0 1:1\n0 3000000000:1\n", r"bad\.txt:2: index 3000000000 beyond 2147483646"),  # a hashed feature's
        ("\x00\x01\x02\n\x89PNG\n", r"bad\.txt:1: binary data, not a libsvm text file \(a model, an archive\?\)$"),
    ],
)
def test_a_malformed_line_is_named(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "bad.txt").write_text(text)
    with pytest.raises(ValueError, match=message):
        load_svmlight_file(tmp_path / "bad.txt")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.txt: no such file"):
        load_svmlight_file(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="a folder, not a libsvm file"):
        load_svmlight_file(tmp_path)
    with pytest.raises(ValueError, match=r"takes a file's path \(str or os.PathLike\), not BytesIO"):
        load_svmlight_file(io.BytesIO(b"1 1:2\n"))  # type: ignore[arg-type]
