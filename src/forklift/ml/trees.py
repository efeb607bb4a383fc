"""snapml's tree models on scikit-learn's API: ``DecisionTreeClassifier``/``Regressor``,
``RandomForestClassifier``/``Regressor``, ``BoostingMachineClassifier``/``Regressor``.

Class names, constructor parameters and defaults are snapml 1.17's. The trees are grown by XGBoost's histogram
learner (``hist_nbins`` bins a feature; a column with fewer distinct values splits exactly), and every model is
then a :class:`~forklift.ml.tree_ensemble.TreeEnsemble` predicted through its ONNX graph.

- Classification trees are squared-error trees on the class indicators, which are Gini trees whose leaves hold
  the class frequencies (the Gini decrease of a split is its decrease of the indicators' squared error).
- A forest is XGBoost's ``num_parallel_tree`` trees of one round, averaged. ``bootstrap=True`` samples 63.2% of
  the rows without replacement for each tree (the share of distinct rows a bootstrap sample holds): XGBoost has
  no sampling with replacement.
- SnapBoost draws each round's tree depth in ``[min_max_depth, max_max_depth]`` (``max_depth`` fixes it).
- Missing values are NaN; a sparse matrix's absent entries are missing too (as XGBoost reads them).
- A dense category one-hot is grown on as one categorical feature (:mod:`forklift.ml.column_bundles`).
"""

from __future__ import annotations

import math
import numbers
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
import xgboost
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from forklift.ml.column_bundles import ColumnBundles
from forklift.ml.estimators import (
    Estimator,
    check_two_classes,
    device_ids,
    export_path,
    keep_parameters,
    row_weights,
    validated,
    whole,
)
from forklift.ml.tree_ensemble import TreeEnsemble
from forklift.ml.tree_import import ImportedModel, Task, read_model
from forklift.ml.tree_onnx import with_classes
from forklift.ml.tree_pmml import write_pmml
from forklift.ml.tree_xgboost import read_booster
from forklift.model_files.tabular import FLOAT32_MAX

BOOTSTRAP_SHARE = 1.0 - math.exp(-1.0)  # the expected share of distinct rows in a bootstrap sample
# Rows the bins are cut on. XGBoost's quantile sketch of every row took 3.0 s of a 200k x 100 fit whose 100 boosting
# rounds took 6.3; cut on 50k sampled rows (as LightGBM cuts its bins on a sample of 200k) and binning all rows by
# those cuts takes 2.1 s, with the same test log-loss (0.2356 against 0.2352). A sample of 50k rows places a cut
# within about 0.002 of its quantile (its standard error), as close as XGBoost's own sketch promises (1/512).
SKETCH_ROWS = 50_000


class _TreeModel(Estimator):
    """What every tree model shares: checking data, growing with XGBoost, predicting through the ensemble."""

    _is_classifier: ClassVar[bool] = False
    ensemble_: TreeEnsemble
    random_state: Any
    n_jobs: int
    use_gpu: bool
    hist_nbins: int
    verbose: bool

    def _seed(self) -> int:
        """XGBoost's seed, drawn from ``random_state``."""
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))

    def _gpu_ids(self) -> list[int]:
        return device_ids(getattr(self, "gpu_ids", getattr(self, "gpu_id", 0)))

    def _check_common(self) -> None:
        self._check_shared(self._gpu_ids(), option="gpu_ids" if hasattr(self, "gpu_ids") else "gpu_id")
        if not isinstance(self.hist_nbins, numbers.Integral) or not 2 <= self.hist_nbins <= 65_536:
            raise ValueError(f"{type(self).__name__}: hist_nbins={self.hist_nbins!r}: expected an integer in 2..65536")

    def _base_parameters(self, seed: int) -> dict[str, Any]:
        return {
            "tree_method": "hist",
            "max_bin": int(self.hist_nbins),
            "nthread": self._threads(),
            "seed": seed,
            "device": f"cuda:{self._gpu_ids()[0]}" if self.use_gpu else "cpu",
            "verbosity": 1 if self.verbose else 0,
        }

    def _validated(self, X: Any, y: Any = None, *, fitting: bool) -> Any:
        checked = validated(
            self, X, y, fitting=fitting, y_numeric=not self._is_classifier, accept_sparse=("csr", "csc"),
            dtype=(np.float32, np.float64), ensure_all_finite="allow-nan",
        )  # fmt: skip
        _within_float32(self, checked[0] if fitting else checked)
        return checked

    @staticmethod
    def _bundles(X: Any, *, sampled: bool, vector_leaves: bool = False) -> ColumnBundles | None:
        """The one-hots of a dense ``X`` to grow on as categories (:mod:`forklift.ml.column_bundles`); none when
        features are sampled (a bundle would be drawn as one feature) or leaves hold vectors (XGBoost grows those
        on numbers only)."""
        return None if sp.issparse(X) or sampled or vector_leaves else ColumnBundles.of(X)

    def _matrix(
        self, X: Any, label: Any, weight: np.ndarray, *, bundles: ColumnBundles | None, reference: Any = None
    ) -> xgboost.DMatrix:
        """``X`` binned (as ``bundles``' features if any); the bins of a dense ``X`` of many rows are cut on a
        sample of them (:func:`_cut_rows`). A dense ``X`` of fewer rows (and a validation set beside it) stays a
        plain DMatrix, binned by the first round: on the adult census's 26k rows a QuantileDMatrix took 26 ms, the
        DMatrix and its bins 8 ms."""
        X = X.tocsr() if sp.issparse(X) else X
        options: dict[str, Any] = {"nthread": self._threads()}
        if bundles is not None:
            X = bundles.apply(X)
            options |= {"feature_types": bundles.feature_types, "enable_categorical": True}
        few_rows = reference is None and not sp.issparse(X) and len(X) <= SKETCH_ROWS
        if few_rows or (reference is not None and not isinstance(reference, xgboost.QuantileDMatrix)):
            return xgboost.DMatrix(X, label=label, weight=weight, **options)
        options["max_bin"] = int(self.hist_nbins)
        if reference is None and not sp.issparse(X):
            rows, row_weights = _cut_rows(X, weight)
            reference = xgboost.QuantileDMatrix(rows, weight=row_weights, **options)
        return xgboost.QuantileDMatrix(X, label=label, weight=weight, ref=reference, **options)

    def _predicted(self, X: Any, n_jobs: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        check_is_fitted(self, "ensemble_")
        X = self._validated(X, fitting=False)
        if self.ensemble_.fourier is not None and (sp.issparse(X) or np.isnan(X).any()):
            raise ValueError(
                f"{type(self).__name__}: this model has ridge rounds (tree_select_probability < 1), which read every "
                "feature: give a dense X without missing values"
            )
        return self.ensemble_.predict(X, threads=self._threads(n_jobs))

    def optimize_trees(self, tree_format: str = "auto", X: Any = None) -> Any:
        """snapml compiles its trees for prediction here; forklift's ensemble predicts from its compiled form from
        the fit on, so this only checks the model is fitted (a snapml program calling it runs unchanged)."""
        check_is_fitted(self, "ensemble_")
        return self

    @property
    def feature_importances_(self) -> np.ndarray:
        """Each feature's share of the total gain of the splits on it."""
        check_is_fitted(self, "ensemble_")
        return self.ensemble_.feature_importances()

    def import_model(self, input_file: str | Path, input_type: str, tree_format: str = "auto", X: Any = None) -> Any:
        """Take the trees of a model another tool wrote: ``"xgb_json"`` (XGBoost's JSON or UBJSON),
        ``"lightgbm"`` (LightGBM's text format), ``"onnx"`` (a tree ensemble graph) or ``"pmml"`` (tree models),
        forklift's own exports included. A classifier's classes are the file's labels where it has them, else
        ``0 .. n_classes - 1``."""
        return self.take_imported(read_model(Path(input_file), input_type), source=str(input_file))

    def take_imported(self, imported: ImportedModel, *, source: str) -> Any:
        """Become the model ``imported`` from the file ``source`` (what ``import_model`` does once it is read)."""
        wanted = Task.CLASSIFICATION if self._is_classifier else Task.REGRESSION
        if imported.task is not wanted:
            raise ValueError(f"{source}: a {imported.task.value} model; {type(self).__name__} is for {wanted.value}")
        for fitted in [name for name in vars(self) if name.endswith("_") and not name.startswith("_")]:
            delattr(self, fitted)  # a fit's before the import (its feature names, its rounds): not this model's
        self.ensemble_ = imported.ensemble
        self.n_features_in_ = imported.ensemble.n_features
        if self._is_classifier:
            self.classes_ = imported.labels if imported.labels is not None else np.arange(imported.n_classes)
        return self

    def export_model(self, output_file: str | Path, output_type: str = "pmml") -> None:
        """Write the model for other tools: ``"pmml"`` (PMML 4.4, features ``x0 ..``, a classifier's ``classes_``
        as the target's categories) or ``"onnx"`` (the graph that predicts here)."""
        check_is_fitted(self, "ensemble_")
        path = export_path(self, output_file, output_type, formats=("pmml", "onnx"))
        if output_type == "pmml" and self.ensemble_.fourier is not None:
            raise ValueError(
                f"{type(self).__name__}.export_model: ridge rounds (tree_select_probability < 1) are written as ONNX "
                "only: output_type='onnx'"
            )
        if output_type == "pmml":
            write_pmml(self.ensemble_, path, classes=list(self.classes_) if self._is_classifier else None)
        else:
            graph = self.ensemble_.to_onnx()
            if self._is_classifier:
                graph = with_classes(graph, self.classes_)
            path.write_bytes(graph.SerializeToString())

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = True
        return tags


class _TreeClassifierMixin(ClassifierMixin):
    """Labels of two or more classes; ``predict`` is the most probable class."""

    _is_classifier: ClassVar[bool] = True
    classes_: np.ndarray

    def _encoded(self, y: Any) -> np.ndarray:
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        check_two_classes(self, self.classes_)
        return np.asarray(encoded)

    def predict_proba(self, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
        """Each class's probability, one column per class in ``classes_`` order (rows sum to one: the graph's
        float32 sums are normalised in float64); on ``n_jobs`` threads (the fit's when not given), as snapml's."""
        probabilities = self._predicted(X, n_jobs)[1]
        return probabilities / probabilities.sum(axis=1, keepdims=True)

    def predict(self, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
        """The most probable class."""
        probabilities = self.predict_proba(X, n_jobs=n_jobs)
        return self.classes_[probabilities.argmax(axis=1)]


class _TreeRegressorMixin(RegressorMixin):
    def predict(self, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
        """The predicted target, on ``n_jobs`` threads (the fit's when not given)."""
        return self._predicted(X, n_jobs)[1][:, 0]


class _Forest(_TreeModel):
    """A decision tree is a forest of one tree on all rows and features (``n_estimators`` 1, no sampling)."""

    criterion: str
    splitter: str
    max_depth: int | None
    min_samples_leaf: int
    max_features: Any
    _criterion: ClassVar[str]
    _auto_features: ClassVar[str]  # what max_features="auto" means for this task, as snapml reads it

    def _trees(self) -> int:
        return 1

    def _row_share(self) -> float:
        return 1.0

    def check_parameters(self) -> None:
        self._check_common()
        name = type(self).__name__
        if self.criterion != self._criterion:
            raise ValueError(f"{name}: criterion={self.criterion!r}: expected {self._criterion!r}")
        if getattr(self, "splitter", "best") != "best":
            raise ValueError(f"{name}: splitter={self.splitter!r}: expected 'best'")
        if self.max_depth is not None and (not isinstance(self.max_depth, numbers.Integral) or self.max_depth < 1):
            raise ValueError(f"{name}: max_depth={self.max_depth!r}: expected None or an integer >= 1")
        if not isinstance(self.min_samples_leaf, numbers.Integral) or self.min_samples_leaf < 1:
            raise ValueError(f"{name}: min_samples_leaf={self.min_samples_leaf!r}: expected an integer >= 1")

    def check_width(self, n_features: int) -> None:
        self._feature_share(n_features)

    def _feature_share(self, n_features: int) -> float:
        """``max_features`` as the share of features each split draws from."""
        wanted = self._auto_features if self.max_features == "auto" else self.max_features
        if wanted is None:
            return 1.0
        if wanted == "sqrt":
            count = max(1, int(math.sqrt(n_features)))
        elif wanted == "log2":
            count = max(1, int(math.log2(n_features)))
        elif (count_given := whole(wanted)) is not None and 1 <= count_given <= n_features:
            count = count_given
        elif isinstance(wanted, float) and 0 < wanted <= 1:
            count = max(1, int(wanted * n_features))
        else:
            raise ValueError(
                f"{type(self).__name__}: max_features={self.max_features!r}: expected None, 'auto', 'sqrt', 'log2', "
                f"an integer in 1..{n_features} or a share in (0, 1]"
            )
        return count / n_features

    def _grow(self, X: Any, label: np.ndarray, weight: np.ndarray, *, two_classes: bool) -> None:
        # weights of mean 1: XGBoost's min_child_weight, which min_samples_leaf is, bounds a leaf's summed weight, so
        # weights scaled by 0.01 grew another tree (and class_weight's weights below 1 blocked splits); at mean 1 it
        # counts rows where the weights are equal, and scaling every weight by one number changes nothing
        weight = weight * (len(weight) / weight.sum()) if weight.sum() > 0 else weight
        # a leaf's least weight, at most what the tree grows on: past it XGBoost gave the root itself no value (no
        # class, a target of 0) where scikit-learn makes one leaf of every row; a forest's tree grows on a draw of
        # its share of the rows, held under half of it (no split: each child would hold at least that)
        share = self._row_share()
        least = min(float(self.min_samples_leaf), len(weight) if share == 1.0 else 0.5 * share * len(weight))
        parameters = self._base_parameters(self._seed()) | {
            "objective": "reg:squarederror",
            "base_score": 0.0,
            "learning_rate": 1.0,
            "reg_lambda": 0.0,
            "min_child_weight": least,
            "max_depth": 0 if self.max_depth is None else int(self.max_depth),
            "grow_policy": "lossguide" if self.max_depth is None else "depthwise",
            "num_parallel_tree": self._trees(),
            "subsample": self._row_share(),
            "colsample_bynode": self._feature_share(X.shape[1]),
        }
        if label.ndim == 2:
            parameters["multi_strategy"] = "multi_output_tree"
        bundles = self._bundles(X, sampled=parameters["colsample_bynode"] < 1.0, vector_leaves=label.ndim == 2)
        if bundles is not None:
            parameters |= bundles.parameters
        booster = xgboost.train(parameters, self._matrix(X, label, weight, bundles=bundles), num_boost_round=1)
        self.ensemble_ = read_booster(booster, two_classes=two_classes, bundles=bundles, min_leaf_weight=least)


def _within_float32(model: Any, X: Any) -> None:
    """Refuse a finite number beyond float32's range, naming its place: the trees compare in float32, where it is
    infinite (XGBoost's fit stopped with 12 lines of C++; a prediction took it as infinity, with a warning)."""
    values = X.data if sp.issparse(X) else X
    if values.dtype != np.float64 or not values.size:
        return
    if not (np.nanmax(values) > FLOAT32_MAX or np.nanmin(values) < -FLOAT32_MAX):
        return
    dense = X.tocsr() if sp.issparse(X) else X
    rows, columns = (np.abs(dense) > FLOAT32_MAX).nonzero()
    row, column = int(rows[0]), int(columns[0])
    value = dense[row, column]
    raise ValueError(
        f"{type(model).__name__}: X[{row}, {column}] is {value:g}, beyond float32's range (the trees compare in "
        "float32): scale the column"
    )


class _ForestClassifier(_TreeClassifierMixin, _Forest):
    _criterion = "gini"
    _auto_features = "sqrt"

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Any:
        """Grow on ``X`` (dense or CSR/CSC, NaN = missing) and labels of two or more classes."""
        self.check_parameters()
        X, y = self._validated(X, y, fitting=True)
        encoded = self._encoded(y)
        weight = row_weights(self, sample_weight, X)
        indicators = np.eye(len(self.classes_), dtype=np.float32)[encoded]
        label = indicators[:, 1] if len(self.classes_) == 2 else indicators
        self._grow(X, label, weight, two_classes=len(self.classes_) == 2)
        return self


class _ForestRegressor(_TreeRegressorMixin, _Forest):
    _criterion = "mse"
    _auto_features = None  # type: ignore[assignment]

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Any:
        """Grow on ``X`` (dense or CSR/CSC, NaN = missing) and real targets."""
        self.check_parameters()
        X, y = self._validated(X, y, fitting=True)
        weight = row_weights(self, sample_weight, X)
        self._grow(X, np.asarray(y, dtype=np.float64), weight, two_classes=False)
        return self


class _RandomForestOptions:
    n_estimators: int
    bootstrap: bool

    def _trees(self) -> int:
        if not isinstance(self.n_estimators, numbers.Integral) or self.n_estimators < 1:
            raise ValueError(f"{type(self).__name__}: n_estimators={self.n_estimators!r}: expected an integer >= 1")
        return int(self.n_estimators)

    def _row_share(self) -> float:
        return BOOTSTRAP_SHARE if self.bootstrap else 1.0


class DecisionTreeClassifier(_ForestClassifier):
    """A Gini decision tree on histograms.

    Example::

        from forklift.ml import DecisionTreeClassifier  # was: from snapml import DecisionTreeClassifier
        model = DecisionTreeClassifier(max_depth=8, n_jobs=4).fit(X_train, y_train)
    """

    def __init__(
        self,
        criterion: str = "gini",
        splitter: str = "best",
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        max_features: Any = None,
        random_state: Any = None,
        n_jobs: int = 1,
        use_histograms: bool = True,
        hist_nbins: int = 256,
        use_gpu: bool = False,
        gpu_id: int = 0,
        verbose: bool = False,
    ) -> None:
        keep_parameters(self, locals())


class DecisionTreeRegressor(_ForestRegressor):
    """A squared-error regression tree on histograms."""

    def __init__(
        self,
        criterion: str = "mse",
        splitter: str = "best",
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        max_features: Any = None,
        random_state: Any = None,
        n_jobs: int = 1,
        use_histograms: bool = True,
        hist_nbins: int = 256,
        use_gpu: bool = False,
        gpu_id: int = 0,
        verbose: bool = False,
    ) -> None:
        keep_parameters(self, locals())


class RandomForestClassifier(_RandomForestOptions, _ForestClassifier):
    """``n_estimators`` Gini trees on random rows and features, their class frequencies averaged."""

    def __init__(
        self,
        n_estimators: int = 10,
        criterion: str = "gini",
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        max_features: Any = "auto",
        bootstrap: bool = True,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
        use_histograms: bool = False,
        hist_nbins: int = 256,
        use_gpu: bool = False,
        gpu_ids: Any = (0,),
        compress_trees: bool = False,
    ) -> None:
        keep_parameters(self, locals())


class RandomForestRegressor(_RandomForestOptions, _ForestRegressor):
    """``n_estimators`` squared-error trees on random rows and features, averaged."""

    def __init__(
        self,
        n_estimators: int = 10,
        criterion: str = "mse",
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        max_features: Any = "auto",
        bootstrap: bool = True,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
        use_histograms: bool = False,
        hist_nbins: int = 256,
        use_gpu: bool = False,
        gpu_ids: Any = (0,),
        compress_trees: bool = False,
    ) -> None:
        keep_parameters(self, locals())


def _cut_rows(X: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``SKETCH_ROWS`` rows of ``X`` drawn without replacement (always the same for the same ``X``), and two rows
    of each column's least and greatest value, so that no value falls outside the bins and a column whose only
    other value is rare can still split."""
    rng = np.random.default_rng(len(X))
    chosen = np.sort(rng.choice(len(X), SKETCH_ROWS, replace=False))
    with warnings.catch_warnings():  # an all-missing column's extremes are missing: XGBoost skips them
        warnings.simplefilter("ignore", RuntimeWarning)
        extremes = np.vstack([np.nanmin(X, axis=0), np.nanmax(X, axis=0)])
    rows = np.vstack([X[chosen], extremes.astype(X.dtype)])
    row_weights = np.concatenate([weight[chosen], np.full(2, weight[chosen].mean())])
    return rows, row_weights
