"""Tables for `forklift ml`: CSV, TSV and Parquet (through pandas and pyarrow) and libsvm files, read into the columns
a tabular model's settings encode (`forklift.model_files.tabular`), and the target.

A column of numbers is a number feature (an empty cell is a missing value); a column of text or booleans is a
category, one-hot. A CSV column of numbers with a few cells that are not is refused, naming the first such cell:
a typo in a number must not turn the column into categories. A libsvm file's features are ``f0, f1, ...``; its
absent entries are zeros, as libsvm reads them.
"""

from __future__ import annotations

import csv
import io
import logging
import numbers
import re
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from forklift.errors import ForkliftError
from forklift.ml.svmlight import COMPRESSED, load_svmlight_file, open_bytes, read_as_one_based
from forklift.model_files.tabular import Feature, FeatureKind, TabularSettings, encode_columns, input_columns

TABLE_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")  # a text or libsvm file may be compressed: .csv.gz, .svm.bz2
SEPARATORS = {".csv": ",", ".tsv": "\t"}  # a text table's fields, by its suffix
SVMLIGHT_SUFFIXES = (".svm", ".libsvm", ".svmlight")
LIBSVM_TARGET = "label"  # what a libsvm file's labels are called: its target
NUMERIC_SHARE = 0.9  # a text column this much of whose cells are numbers is a column of numbers with typos
CATEGORY_CODES = 20  # ... or half of whose cells are, of more values than a category's number codes: said
MANY_VALUES = 50  # a category of more values than this, more than half of them each a row's own: said (an id? a date?)
MISSING_WORDS = frozenset(  # what pandas reads as a missing value by default, besides an empty cell
    ("#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA",
     "NULL", "NaN", "None", "n/a", "nan", "null")
)  # fmt: skip
TRUTH_WORDS = ("True", "False", "true", "false", "TRUE", "FALSE")  # a column of booleans, as pandas writes them
NUMBER_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Table:
    """A table's feature columns (numbers as float64 with NaN, categories as objects with None) and its target."""

    columns: dict[str, np.ndarray]
    target: np.ndarray | None
    target_name: str
    rows: int
    source: str  # the file it was read from, named in errors
    zero_based: bool | None = None  # a libsvm file's index base, as read (None: not a libsvm file)


def read_table(
    path: Path,
    *,
    target: str | None,
    n_features: int | None = None,
    zero_based: bool | None = None,
    text: Collection[str] = (),
) -> Table:
    """The table in ``path``; ``target`` names its target column (None: the last one; a libsvm file's labels);
    ``text``: columns read as text whatever their cells look like (the categories of a model's training table).
    ``n_features``: a libsvm file's width, where its highest index may fall short of the model's; ``zero_based``:
    its index base where another file decided it (the training file's for its test file: a 0-based test file may
    happen to hold no index 0, and read by itself it would be taken as 1-based, each feature one column over)."""
    _check_is_file(path)
    suffix = table_suffix(path)
    if suffix in SVMLIGHT_SUFFIXES:
        if target not in (None, LIBSVM_TARGET):
            raise ForkliftError(
                f"{path}: a libsvm file has no column {target!r}: its target is each line's label ({LIBSVM_TARGET!r})"
            )
        try:
            X, y, zero = _read_libsvm(path, n_features=n_features, zero_based=zero_based)
        except ValueError as exc:  # names the line and the problem
            raise ForkliftError(str(exc)) from exc
        if X.shape[0] == 0 or X.shape[1] == 0:
            raise ForkliftError(f"{path}: no rows or no features (a libsvm file of 'label index:value ...' lines)")
        dense = np.asarray(X.toarray(), dtype=np.float64)
        columns = {f"f{i}": dense[:, i] for i in range(dense.shape[1])}
        labels = y.astype(np.int64) if np.array_equal(y, np.round(y)) else y  # class 1, not 1.0
        return Table(columns, labels, LIBSVM_TARGET, dense.shape[0], str(path), zero_based=zero)
    frame = _read_frame(path, suffix, text=text)
    typed = suffix not in SEPARATORS  # Parquet's text columns are text by the file's own types
    if frame.shape[1] == 0 or frame.shape[0] == 0:
        raise ForkliftError(f"{path}: no rows or no columns")
    target_name = target or str(frame.columns[-1])
    if target_name not in frame.columns:
        raise ForkliftError(f"{path}: no column {target_name!r} (columns: {', '.join(map(str, frame.columns))})")
    columns = {
        str(name): _column(path, str(name), frame[name], text=name in text, typed=typed)
        for name in frame.columns
        if name != target_name
    }
    if not columns:
        raise ForkliftError(f"{path}: the target {target_name!r} is the only column; there are no features")
    return Table(columns, frame[target_name].to_numpy(), target_name, frame.shape[0], str(path))


def read_test_table(path: Path, train: Table) -> Table:
    """A table to measure a model fitted on ``train`` with: a libsvm file read with the training file's index base
    and width (its highest index may fall short of the training file's; one beyond it is refused)."""
    libsvm = train.zero_based is not None
    categories = [name for name, values in train.columns.items() if values.dtype == object]
    return read_table(
        path,
        target=train.target_name,
        zero_based=train.zero_based,
        n_features=len(train.columns) if libsvm else None,
        text=categories,
    )


def read_features(path: Path, settings: TabularSettings, *, target: str | None = None) -> Table:
    """A table to predict on: the model's features by name (its categories read as text, as the file writes them);
    the model's target column beside them is left out, unless ``target`` names it (to measure the model: a libsvm
    file's labels are always its target)."""
    names, zero_based = settings.names, settings.libsvm_zero_based
    _check_is_file(path)
    if table_suffix(path) in SVMLIGHT_SUFFIXES:
        table = read_table(path, target=None, n_features=len(names), zero_based=zero_based)
        if list(table.columns) != list(names):
            raise ForkliftError(f"{path}: {len(table.columns)} features; the model takes {len(names)}")
        return table
    categories = {f.name for f in settings.features if f.kind is FeatureKind.CATEGORY}
    frame = _read_frame(path, table_suffix(path), text=categories)
    missing = [name for name in names if name not in frame.columns]
    if missing:
        raise ForkliftError(f"{path}: no column {missing[0]!r}, a feature of the model")
    if target is not None and target not in frame.columns:
        raise ForkliftError(f"{path}: no target column {target!r} (columns: {', '.join(map(str, frame.columns))})")
    if target is None and settings.target in frame.columns:
        log.info("%s: the model's target column %r, left out", path, settings.target)
    left_out = [str(name) for name in frame.columns if name not in names and name not in (target, settings.target)]
    if left_out:  # an id column, or the target: said, as a misspelt feature would need to be
        shown = ", ".join(repr(name) for name in left_out[:5]) + (", ..." if len(left_out) > 5 else "")
        what = (
            "a column that is not a feature" if len(left_out) == 1 else f"{len(left_out)} columns that are not features"
        )
        log.warning("%s: %s of the model, left out: %s", path, what, shown)
    columns = {name: _column(path, name, frame[name], text=name in categories) for name in names}
    truth = None if target is None else frame[target].to_numpy()
    return Table(columns, truth, target or "", frame.shape[0], str(path))


def table_suffix(path: Path) -> str:
    """What a table's file is by its name: `.csv` for train.csv and train.csv.gz (read through gzip or bz2)."""
    return (Path(path.stem) if path.suffix.lower() in COMPRESSED else path).suffix.lower()


def _text(path: Path) -> IO[str]:
    """A text table's text, as its readers read it (UTF-8, a byte-order mark dropped), decompressed where it is."""
    return io.TextIOWrapper(open_bytes(path), encoding="utf-8-sig", newline="")


def _check_is_file(path: Path) -> None:
    if path.is_dir():
        raise ForkliftError(f"{path}: a folder; give a table's file ({', '.join(TABLE_SUFFIXES + SVMLIGHT_SUFFIXES)})")
    if not path.is_file():
        raise ForkliftError(f"{path}: no such file")


def _read_libsvm(
    path: Path, *, n_features: int | None, zero_based: bool | None
) -> tuple[sp.csr_matrix, np.ndarray, bool]:
    """A libsvm file's rows, labels and index base: ``zero_based``, else 0-based when it holds an index 0."""
    X, y = load_svmlight_file(path, zero_based=True)  # column i is index i, whatever the base
    lowest = int(X.indices.min()) if X.nnz else None
    decided = zero_based is not None  # by the file the model was fitted on
    why = "as the model's training file, which holds no index 0"
    zero = not read_as_one_based(path, lowest, "auto" if zero_based is None else zero_based, why=why)
    if not zero:
        X = X[:, 1:]
    if n_features is not None:
        if X.shape[1] > n_features:
            highest = X.shape[1] - (1 if zero else 0)
            base = f"{'0' if zero else '1'}-based" + (", as the file it was fitted on" if decided else "")
            raise ValueError(f"{path}: index {highest} is beyond the {n_features} features the model takes ({base})")
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    return X, y, zero


def _read_frame(path: Path, suffix: str, *, text: Collection[str] = ()) -> pd.DataFrame:
    """``text``: columns a text table's reader keeps as written (``01`` stays ``01``)."""
    try:
        if suffix in SEPARATORS:
            sep = SEPARATORS[suffix]
            header_names = _checked_header(path, sep)  # pandas renames a second `age`: `age.1`, a feature nobody meant
            try:
                frame = pd.read_csv(path, sep=sep, skipinitialspace=True, dtype=dict.fromkeys(text, str),
                                    keep_default_na=False, na_values=[""])  # fmt: skip
            except pd.errors.ParserError:
                _refuse_ragged_row(path, sep)  # a row longer than the header: said in forklift's words
                raise
            if not frame.index.equals(pd.RangeIndex(len(frame))) or frame.iloc[:, -1].isna().any():
                _refuse_ragged_row(path, sep)
            header = str(frame.columns[0])
            separator = _other_separator([header], sep)
            if frame.shape[1] == 1 and separator:
                raise ForkliftError(
                    f"{path}: one column, named {header!r}: its values are separated by {separator!r}; "
                    f"{_separated_by(suffix, separator)}"
                )
            frame = _missing_words_read(path, _without_unnamed(path, frame, header_names), keep=text)
            _say_if_headless(path, [str(name) for name in frame.columns])
            return frame
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except pd.errors.EmptyDataError as exc:
        raise ForkliftError(f"{path}: empty (not even a header line)") from exc
    except UnicodeDecodeError as exc:  # its position is in a chunk of the file, not the file's
        raise ForkliftError(_not_utf8(path)) from exc
    except (ValueError, OSError, pd.errors.ParserError) as exc:  # the readers name the line or the part
        raise ForkliftError(f"{path}: {' '.join(str(exc).split())}") from exc
    known = ", ".join(TABLE_SUFFIXES + SVMLIGHT_SUFFIXES)
    raise ForkliftError(f"{path}: not a table forklift reads (by its suffix: {known})")


def _not_utf8(path: Path) -> str:
    """Where a CSV file stops being UTF-8 text, by line, and what to do."""
    with open_bytes(path) as file:
        data = file.read()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return f"{path}: UTF-16 text (as a spreadsheet's 'Unicode text' is saved); save it as CSV in UTF-8"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return f"{path}: line {line}: byte 0x{data[exc.start]:02x} is not UTF-8 text; save the file as UTF-8"
    return f"{path}: not UTF-8 text; save the file as UTF-8"


def _missing_words_read(path: Path, frame: pd.DataFrame, *, keep: Collection[str]) -> pd.DataFrame:
    """Words for a missing value (R's NA, null, NaN) in a column of numbers are missing values; in a column of text
    they are its values, as written (NA for North America, None for a fireplace), as the app and a served row give
    them: pandas made them all missing, a third of a region's rows unsaid. Said on the log where text holds them.
    ``keep``: columns read as text whatever they hold (a model's categories)."""
    for name in frame.columns:
        values = frame[name]
        if name in keep or not pd.api.types.is_string_dtype(values):  # numbers, booleans: no words in them
            continue
        words = values.isin(MISSING_WORDS)
        if not words.any():
            continue
        others = values[~words & values.notna()]
        numbers = pd.to_numeric(others, errors="coerce").notna()
        if numbers.all():
            frame[name] = pd.to_numeric(values.mask(words), errors="coerce")
        elif numbers.mean() >= 0.5 or others.isin(TRUTH_WORDS).all():  # numbers with typos, or booleans: missing
            frame[name] = values.mask(words)  # here too; the typos are the words' check's to name
        else:
            first = int(np.flatnonzero(words.to_numpy())[0])
            log.warning(
                "%s: column %r holds %d cells such as %r (row %d), read as a value, not as missing: leave a missing "
                "value's cell empty",
                path, str(name), int(words.sum()), values.iloc[first], first + 1,
            )  # fmt: skip
    return frame


def _checked_header(path: Path, sep: str) -> list[str]:
    """The header line's names, none of them twice."""
    with _text(path) as file:  # split as pandas splits it
        header = [name.strip() for name in next(csv.reader(file, delimiter=sep, skipinitialspace=True), [])]
    twice = next((name for name, count in Counter(header).items() if count > 1 and name), None)
    if twice is not None:
        raise ForkliftError(f"{path}: two columns are named {twice!r}; rename one")
    return header


def _without_unnamed(path: Path, frame: pd.DataFrame, header: list[str]) -> pd.DataFrame:
    """The frame without the columns the header line names none (pandas' `Unnamed: 0`): a row index a DataFrame was
    saved with, or the empty column after a comma at each line's end; said, since a model would take them."""
    unnamed = [k for k, name in enumerate(header[: frame.shape[1]]) if not name]
    if unnamed:
        which = ", ".join(str(k + 1) for k in unnamed)
        log.warning(
            "%s: column%s %s ha%s no name in the header line (a row index, or a comma at each line's end?): left out",
            path, "s" * (len(unnamed) > 1), which, "ve" if len(unnamed) > 1 else "s",
        )  # fmt: skip
    return frame.drop(columns=frame.columns[unnamed])


def _refuse_ragged_row(path: Path, sep: str) -> None:
    """Refuse a row whose fields the header does not name one for one. pandas reads a row cut short as missing
    values at its end, and rows each one field longer than the header as an index, silently; so a file read with a
    missing value in its last column or with an index is parsed again, as pandas parses it (spaces after a comma
    skipped: `, "sales, retail"` is one quoted field), by Python's csv reader, counting each row's fields."""
    with _text(path) as file:
        lines: list[str] = []  # the lines of the record the reader is at

        def kept() -> Iterator[str]:
            for line in file:
                lines.append(line)
                yield line

        header: list[str] | None = None
        number = 0
        for fields in csv.reader(kept(), delimiter=sep, skipinitialspace=True):
            written, lines[:] = "".join(lines).rstrip("\r\n"), []
            if not fields:  # a blank line: no row, as pandas reads it
                continue
            if header is None:
                header = fields
                continue
            number += 1
            if len(fields) != len(header):
                separator = _other_separator(header, sep)
                said = _separated_by(table_suffix(path), separator) if separator else ""
                hint = f"; its header line holds {separator!r}: {said}" if separator else ""
                raise ForkliftError(
                    f"{path}: row {number} has {len(fields)} fields where the header line has {len(header)}: "
                    f"{written[:80]!r}{hint}"
                )


def _other_separator(names: list[str], sep: str) -> str | None:
    """A separator other than ``sep`` that the header's names hold: the file's own, most likely."""
    return next((s for s in (",", ";", "\t", "|") if s != sep and any(s in name for name in names)), None)


def _separated_by(suffix: str, found: str) -> str:
    """What a text table's suffix says its separator is; the suffix that says ``found``, where one does."""
    said = "a .tsv file is read as separated by tabs" if suffix == ".tsv" else "forklift reads CSV separated by commas"
    other = next((other for other, sep in SEPARATORS.items() if sep == found), None)
    return f"{said} (name the file {other} if it is separated by {found!r})" if other else said


def _say_if_headless(path: Path, names: list[str]) -> None:
    """Warn when half the column names or more are numbers: a file without a header line has its first row read as
    names (not refused: a table may name its columns by years)."""
    numbers = [name for name in names if _is_number(name)]
    if len(numbers) * 2 >= len(names):
        shown = ", ".join(repr(name) for name in numbers[:4]) + (", ..." if len(numbers) > 4 else "")
        log.warning(
            "%s: %d of its %d column names are numbers (%s): if the file has no header line, its first row was read "
            "as the names; give it one",
            path, len(numbers), len(names), shown,
        )  # fmt: skip


def _is_number(text: str) -> bool:
    """Written as a number is in a data row (not 'nan' or 'inf', which may name a column)."""
    return NUMBER_TEXT.fullmatch(text.strip()) is not None


def _column(path: Path, name: str, values: pd.Series, *, text: bool = False, typed: bool = False) -> np.ndarray:
    """Numbers as float64 (NaN missing), or a category's values as strings (None missing). ``text``: the column is a
    category of the model, read as the file writes it; ``typed``: the file types its columns (Parquet), so a text
    column is text, whatever its cells look like."""
    if pd.api.types.is_datetime64_any_dtype(values) or pd.api.types.is_timedelta64_dtype(values):
        raise ForkliftError(
            f"{path}: column {name!r} holds dates or times, which are not features forklift reads: give them as "
            "numbers (a day, an hour) or as text, or leave the column out"
        )
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        if text:  # a file whose cells of a category all happen to be numbers: as they were written where it was read
            return np.array([None if pd.isna(v) else _as_written(v) for v in values], dtype=object)
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    present = values.dropna()
    if len(present) and all(isinstance(v, numbers.Number) and not isinstance(v, bool | np.bool_) for v in present):
        return np.array([np.nan if pd.isna(v) else float(v) for v in values])  # Parquet's decimals
    if not text and not typed:
        _check_words(path, name, present)
    return np.array([None if pd.isna(v) else str(v) for v in values], dtype=object)


def _check_words(path: Path, name: str, present: pd.Series) -> None:
    """A CSV column of numbers with words in it: refused when nearly all its cells are numbers (a typo); said when
    half of them or more are numbers of many values (`unknown` for a missing value, `1,801` with a thousands
    separator), where a category of codes, some of them numbers, would have few."""
    written = present[[isinstance(v, str) for v in present]]  # booleans (True, False) are a category's values
    numeric = pd.to_numeric(written, errors="coerce")
    words = written[numeric.isna()]
    if not len(words):
        return
    share = numeric.notna().sum() / len(present)
    row, word = int(words.index[0]) + 1, words.iloc[0]
    if share >= NUMERIC_SHARE:
        raise ForkliftError(f"{path}: row {row}, column {name!r}: {word!r} is not a number")
    if share >= 0.5 and numeric.nunique() > CATEGORY_CODES:
        log.warning(
            "%s: column %r is read as a category: %d%% of its cells are numbers, of %d values, and %d are words, the "
            "first %r in row %d; if they stand for missing values, leave those cells empty",
            path, name, round(100 * share), numeric.nunique(), len(words), word, row,
        )  # fmt: skip


def _as_written(value: Any) -> str:
    """A number as a text file writes it: an integral float as an integer (a category value `1`, read as 1.0 where
    a missing value made its column floats)."""
    return str(int(value)) if isinstance(value, float | np.floating) and float(value).is_integer() else str(value)


def infer_features(table: Table) -> tuple[Feature, ...]:
    """Each column's kind as :func:`_column` read it; a category's values, sorted, are its one-hot columns."""
    features = []
    for name, values in table.columns.items():
        if values.dtype == object:
            categories = tuple(sorted({v for v in values if v is not None}))
            if len(categories) > MANY_VALUES and len(categories) * 2 > table.rows:
                log.warning(
                    "%s: column %r is a category of %d values in %d rows, each a one-hot column: if it is an id "
                    "or a date, leave it out or give it as numbers",
                    table.source, name, len(categories), table.rows,
                )  # fmt: skip
            features.append(Feature(name, FeatureKind.CATEGORY, categories))
        else:
            features.append(Feature(name))
    columns = Counter(input_columns(features))
    twice = [column for column, count in columns.items() if count > 1]
    if twice:  # a column named `colour=red` beside colour's value red: v2 clients find columns by these names
        raise ForkliftError(
            f"{table.source}: two of the model's input columns would be named {twice[0]!r} (a category's value "
            f"'NAME=VALUE' and a column of that name); rename the column"
        )
    return tuple(features)


def plain(value: Any) -> Any:
    """A numpy scalar as the plain Python value JSON writes."""
    return value.item() if isinstance(value, np.generic) else value


def encode_table(settings: TabularSettings, table: Table) -> np.ndarray:
    """A table's rows as the model's graph reads them: errors name the file and its rows from 1, and a category
    value the model never saw sets none of its columns (a rare value in a file is no reason to refuse the file),
    which is said once per feature on the log (a served row with one is refused)."""
    return encode_columns(settings, table.columns, where=table.source, first_row=1, refuse_unknown=False)
