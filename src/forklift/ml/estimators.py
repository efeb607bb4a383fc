"""What forklift.ml's linear and tree estimators share: keeping constructor parameters as scikit-learn wants them,
checking them before any data is read, counting threads, and refusing a CUDA device that is not there in one line."""

from __future__ import annotations

import inspect
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight, validate_data


class Estimator(BaseEstimator):
    """A forklift.ml estimator: its parameters can be checked without data, so that a command refuses a bad one
    before it reads a table (and a search before it starts a trial)."""

    n_jobs: Any
    use_gpu: bool

    def check_parameters(self) -> None:
        """Raise ValueError naming the first parameter that is not valid (``fit`` calls it first)."""
        raise NotImplementedError

    def check_width(self, n_features: int) -> None:
        """Raise ValueError naming a parameter that does not fit a table of ``n_features`` columns (a search checks
        its space with it before a trial starts)."""

    def _check_shared(self, gpus: Sequence[int], *, option: str) -> None:
        """What every model checks: ``n_jobs``, its flags, and the CUDA devices ``option`` names if ``use_gpu``."""
        self._threads()
        check_flags(self)
        if hasattr(self, "class_weight"):
            check_class_weight(self)
        if hasattr(self, "random_state"):
            check_seed(self)
        if self.use_gpu:
            check_cuda(self, gpus, option=option)

    def _threads(self, n_jobs: int | None = None) -> int:
        """The threads of a fit, or of a prediction given its own ``n_jobs`` (snapml's ``predict(X, n_jobs=...)``)."""
        return thread_count(self, self.n_jobs if n_jobs is None else n_jobs)


def check_flags(model: BaseEstimator) -> None:
    """Refuse a flag (a parameter whose default is True or False) given anything else: a text such as 'no' would
    count as true; ``verbose`` may be a whole number too."""
    for name, parameter in inspect.signature(type(model).__init__).parameters.items():
        value = getattr(model, name, None)
        a_count = name == "verbose" and whole(value) is not None
        if isinstance(parameter.default, bool) and not isinstance(value, bool | np.bool_) and not a_count:
            raise ValueError(f"{type(model).__name__}: {name}={value!r}: expected True or False")


def check_seed(model: BaseEstimator) -> None:
    """Refuse a ``random_state`` numpy cannot seed from, naming the parameter (numpy's message does not)."""
    try:
        check_random_state(model.random_state)
    except ValueError:
        raise ValueError(
            f"{type(model).__name__}: random_state={model.random_state!r} is not valid: expected None, an integer or "
            "a numpy RandomState"
        ) from None


def check_class_weight(model: BaseEstimator) -> None:
    """Refuse a ``class_weight`` other than None, 'balanced' or a dict in the estimator's words (scikit-learn's
    would name its own helper, ``compute_class_weight``, from deep in the fit)."""
    value = model.class_weight
    if not (value is None or isinstance(value, Mapping) or (isinstance(value, str) and value == "balanced")):
        raise ValueError(
            f"{type(model).__name__}: class_weight={value!r} is not valid: expected None, 'balanced' or a dict "
            "of class: weight"
        )


def check_two_classes(model: BaseEstimator, classes: np.ndarray) -> None:
    """Refuse labels of one class, shown as the user wrote it (``1.0``, not ``np.float64(1.0)``)."""
    if len(classes) < 2:
        raise ValueError(
            f"{type(model).__name__} needs samples of at least 2 classes in y; got only one class: "
            f"{classes[0].tolist()!r}"
        )


_FORMAT_OF_SUFFIX = {".onnx": "onnx", ".pmml": "pmml", ".xml": "pmml"}


def export_path(model: BaseEstimator, output_file: str | Path, output_type: str, *, formats: Sequence[str]) -> Path:
    """Where ``export_model`` may write ``output_type``: a format the model writes, a name whose suffix does not
    say another format (``model.pmml`` written as ONNX would be read as PMML and fail), in a folder that exists."""
    name = f"{type(model).__name__}.export_model"
    if output_type not in formats:
        raise ValueError(f"{name}: output_type={output_type!r}: expected {' or '.join(map(repr, formats))}")
    path = Path(output_file)
    named = _FORMAT_OF_SUFFIX.get(path.suffix.lower())
    if named is not None and named != output_type:
        instead = (
            f" or pass output_type={named!r}"
            if named in formats
            else f" ({type(model).__name__} writes {output_type.upper()} only)"
        )
        raise ValueError(
            f"{name}: {path.name} is named as {named.upper()}, but output_type={output_type!r} writes "
            f"{output_type.upper()}: name it {path.with_suffix('.' + output_type).name}{instead}"
        )
    if not path.parent.is_dir():
        raise ValueError(f"{name}: {path}: the folder {path.parent} does not exist")
    return path


def validated(model: BaseEstimator, X: Any, y: Any, *, fitting: bool, y_numeric: bool, **options: Any) -> Any:
    """scikit-learn's ``validate_data`` (``X``, or with ``fitting`` ``(X, y)``), its refusals made one line that
    names the place: a text cell's column (scikit-learn says only that a string could not be converted to a float),
    a NaN's or an infinity's row and column, a one-dimensional X's shape."""
    if fitting and y is None:
        raise ValueError(f"{type(model).__name__} requires y to be passed, but the target y is None")
    if fitting:
        _check_target(model, y, numeric=y_numeric)
    try:
        if not fitting:
            return validate_data(model, X, reset=False, **options)
        X, y = validate_data(model, X, y, y_numeric=y_numeric, reset=True, **options)
        return X, _numbers(model, y) if y_numeric else y
    except (ValueError, TypeError) as exc:
        if str(exc).startswith("Input X contains"):  # scikit-learn's words suggest its own estimators
            raise _not_finite(model, X, allow_nan=options.get("ensure_all_finite") == "allow-nan") or exc from None
        if str(exc).startswith("Expected 2D array"):  # scikit-learn's message prints the array and runs to lines
            raise ValueError(
                f"{type(model).__name__}: X has shape {np.shape(X)}. Reshape your data to rows of features: "
                "X.reshape(-1, 1) for one feature, X.reshape(1, -1) for one row"
            ) from None
        if not sp.issparse(X) and np.ndim(X) > 2:  # scikit-learn's words name the estimator and the dimensions
            raise
        # numpy's and pandas' words for text where numbers belong ("could not convert string to float", "Cannot
        # cast str dtype", ...) name neither the array nor the place: find it (a sparse matrix holds numbers: its
        # error is scikit-learn's own, of counts or shapes, which a look for text replaced with pandas' words)
        column, value = _first_text_cell(X) if not sp.issparse(X) else ("?", None)
        if isinstance(value, str | bytes):  # another object (a dict) keeps its TypeError, as scikit-learn asks
            raise ValueError(
                f"{type(model).__name__}: X's column {column!r} holds text ({value!r}): the estimators take numbers; "
                "one-hot it first (scikit-learn's OneHotEncoder, or `forklift ml fit`, which does it for a table)"
            ) from None
        if fitting and y_numeric:
            _refuse_words(model, y)
        raise


def _not_finite(model: BaseEstimator, X: Any, *, allow_nan: bool) -> ValueError | None:
    """The first cell of ``X`` (in row order) that the estimator does not take, named by its position (None if
    none is NaN or infinite)."""
    name = type(model).__name__
    if sp.issparse(X):
        cells = sp.coo_matrix(X)
        rows, columns, values = cells.row, cells.col, cells.data
    else:
        values = _floats(X)
        rows, columns = np.indices(values.shape).reshape(2, -1)
        values = values.ravel()
    bad = np.flatnonzero(np.isinf(values) if allow_nan else ~np.isfinite(values))
    if bad.size == 0:
        return None
    first = bad[np.lexsort((columns[bad], rows[bad]))[0]]
    takes = (
        "NaN as a missing value, but no infinite numbers"
        if allow_nan
        else "finite numbers only (impute missing values, or fit a tree model, which takes NaN as missing)"
    )
    return ValueError(f"{name}: X[{rows[first]}, {columns[first]}] is {values[first]}: {name} takes {takes}")


def _floats(X: Any) -> np.ndarray:
    """A dense ``X`` as float64, pandas' missing values (``pd.NA`` of its nullable columns) as NaN."""
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        return X.to_numpy(dtype=np.float64, na_value=np.nan)
    return np.asarray(X, dtype=np.float64)


def checked_target(model: BaseEstimator, y: Any, *, numeric: bool, name: str) -> np.ndarray:
    """A target given beside ``y`` (a validation set's ``y_val``) checked as ``y`` is: each row's value there, a
    regressor's a number; one line naming ``name`` and the row (XGBoost's own error ran to 12 lines of C++)."""
    _check_target(model, y, numeric=numeric, name=name)
    values = np.asarray(y)
    return _numbers(model, values, name=name) if numeric else values


def _check_target(model: BaseEstimator, y: Any, *, numeric: bool, name: str = "y") -> None:
    """Refuse a target with a row that has none (None, NaN, pandas' NA) or an infinite number, naming the row:
    scikit-learn says only "Input y contains NaN", or for None that the label type is unknown."""
    import pandas as pd

    values = np.asarray(y.to_numpy(dtype=object, na_value=None) if isinstance(y, pd.Series) else y)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1 or values.dtype.kind not in "fO":
        return
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values)
    else:
        bad = np.asarray(pd.isna(values))  # None, NaN, NA: in C, as every fit on labels of words comes here
        if pd.api.types.infer_dtype(values, skipna=True) not in ("string", "bytes", "boolean"):  # numbers: infinity?
            bad |= np.array([isinstance(v, numbers.Real) and not math.isfinite(v) for v in values], dtype=bool)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = float(values[row]) if isinstance(values[row], numbers.Real) else values[row]
        wanted = "a finite number for every row" if numeric else "a label for every row"
        raise ValueError(
            f"{type(model).__name__}: {name}[{row}] is {value}: {name} needs {wanted} (drop the rows without one)"
        )


def _numbers(model: BaseEstimator, y: np.ndarray, *, name: str = "y") -> np.ndarray:
    """A regressor's target as numbers; words (scikit-learn lets an array of strings through) are one line."""
    if y.dtype.kind not in "OSU":
        return y
    _refuse_words(model, y, name=name)
    return y.astype(np.float64)


def _refuse_words(model: BaseEstimator, y: Any, *, name: str = "y") -> None:
    """Refuse a regressor's target that holds text, naming a word of it."""
    _, value = _first_text_cell(np.asarray(y, dtype=object).reshape(-1, 1))
    if isinstance(value, str | bytes):
        raise ValueError(
            f"{type(model).__name__}: {name} holds text ({value!r}): a regressor predicts numbers; labels want a "
            "classifier"
        )


def _first_text_cell(X: Any) -> tuple[Any, Any]:
    """The column (its name in a DataFrame, else its index) and the value of the first cell that is not a number."""
    import pandas as pd

    frame = X if isinstance(X, pd.DataFrame) else pd.DataFrame(np.asarray(X, dtype=object))
    for name in frame.columns:
        values = frame[name].astype(object)  # a categorical or string column's values as they are
        try:
            numbers = pd.to_numeric(values, errors="coerce")
        except (TypeError, ValueError):  # complex numbers and the like: not text, left to the error that came
            continue
        bad = numbers.isna() & values.notna()
        if bad.any():
            return name, values[bad].iloc[0]
    return "?", None


def row_weights(
    model: BaseEstimator, sample_weight: Any, X: Any, *, name: str = "sample_weight", of: str = "X"
) -> np.ndarray:
    """float64 weights of ``X``'s rows (ones where None); a negative one is refused naming the estimator (a
    negative weight turns a convex loss into one without a minimum)."""
    rows = X.shape[0]
    given = None if sample_weight is None or np.isscalar(sample_weight) else np.asarray(sample_weight).shape
    if given is not None and given != (rows,):
        size = f"{given[0]} values" if len(given) == 1 else f"shape {given}"
        raise ValueError(f"{type(model).__name__}: {name} has {size} for the {rows} rows of {of}")
    try:
        return _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    except ValueError as exc:
        raise ValueError(f"{type(model).__name__}: {name}: {exc}") from exc


def keep_parameters(model: BaseEstimator, parameters: dict[str, Any]) -> None:
    """Store each constructor parameter under its own name, unchanged (scikit-learn's rule for ``__init__``)."""
    for name, value in parameters.items():
        if name not in ("self", "__class__"):
            setattr(model, name, value)


def whole(value: Any) -> int | None:
    """``value`` as an int when it is a whole number (numpy's too, not a bool); None otherwise."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None


def real(value: Any) -> float | None:
    """``value`` as a float when it is a finite real number (not a bool); None otherwise: no parameter takes an
    infinity or NaN (``--param learning_rate=.inf`` would fit NaNs)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)


def thread_count(model: BaseEstimator, n_jobs: Any) -> int:
    """``n_jobs`` as a number of threads: -1 is every CPU this process may run on (not the host's count)."""
    count = whole(n_jobs)
    if count is None or not (count >= 1 or count == -1):
        raise ValueError(f"{type(model).__name__}: n_jobs={n_jobs!r} is not valid: expected an integer >= 1, or -1")
    return len(os.sched_getaffinity(0)) if count == -1 else count


def device_ids(ids: Any) -> list[int]:
    """A device id or a sequence of them, as a list."""
    return [int(ids)] if isinstance(ids, numbers.Integral) else [int(i) for i in ids]


def check_cuda(model: BaseEstimator, ids: Sequence[int], *, option: str = "device_ids") -> None:
    """Refuse ``use_gpu=True`` in one line when a wanted CUDA device is not here."""
    import torch  # here: the tree models need torch for nothing else, and importing it takes 1.5 s

    count = torch.cuda.device_count()
    missing = [i for i in (list(ids) or [0]) if not 0 <= i < count]
    if missing:
        raise ValueError(
            f"{type(model).__name__}: use_gpu=True: no CUDA device {missing[0]} here "
            f"(torch sees {count}); set use_gpu=False or {option}"
        )
