"""snapml's linear models on scikit-learn's API: ``LogisticRegression``, ``LinearRegression``,
``SupportVectorMachine``.

Class names, constructor parameters and defaults are snapml 1.17's, so a snapml program runs after changing its
import; the differences are deliberate and documented: ``dual="auto"`` is the default (snapml's ``dual=True``
is 13x slower than the primal solver on dense data with many rows), ``device_ids`` defaults to ``()`` (a list
default would be shared between instances), ``coef_`` has scikit-learn's shape ``(n_classes or 1,
n_features)``, and ``tol`` bounds the relative change of the objective (primal) or the relative duality gap
(dual) rather than the change of the coefficients.
"""

from __future__ import annotations

import numbers
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
import torch
from scipy.special import expit
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_approximation import RBFSampler
from sklearn.preprocessing import normalize as normalize_rows
from sklearn.utils import check_random_state, compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from forklift.ml import kernels
from forklift.ml.chunked import MAX_LABELS, ChunkedDataset
from forklift.ml.cocoa import TorchPeers, agreed, current_peers
from forklift.ml.estimators import (
    Estimator,
    check_two_classes,
    device_ids,
    export_path,
    keep_parameters,
    real,
    row_weights,
    validated,
)
from forklift.ml.linear_onnx import LinearOutput, linear_graph
from forklift.ml.losses import Loss
from forklift.ml.newton import HostRows, solve_on_devices, solve_on_host
from forklift.ml.solver import LinearProblem, PreparedData, Solution, SolverSettings, solve, use_threads
from forklift.ml.streaming import Encoder, solve_streaming

DualChoice = bool | Literal["auto"]


class _GeneralizedLinearModel(Estimator):
    """What the three models share: checking options, preparing data, solving, predicting a linear function."""

    _losses: ClassVar[tuple[str, ...]] = ()
    _onnx_output: ClassVar[LinearOutput]

    # set by each subclass's __init__ (listed here for the type checker)
    max_iter: int
    regularizer: float
    use_gpu: bool
    device_ids: Any
    verbose: bool
    n_jobs: int
    tol: float
    generate_training_history: str | None
    fit_intercept: bool
    intercept_scaling: float
    normalize: bool
    kernel: str
    gamma: float
    n_components: int
    random_state: Any

    def _penalty(self) -> str:
        """``penalty`` where the model has one (the SVM's is always l2)."""
        return str(getattr(self, "penalty", "l2"))

    def _dual_choice(self) -> DualChoice:
        """``dual`` where the model has one (the SVM is always solved in the dual)."""
        return getattr(self, "dual", True)

    def check_parameters(self) -> None:
        def fail(name: str, expected: str) -> None:
            raise ValueError(f"{type(self).__name__}: {name}={getattr(self, name)!r} is not valid: expected {expected}")

        if not isinstance(self.max_iter, numbers.Integral) or isinstance(self.max_iter, bool) or self.max_iter < 1:
            fail("max_iter", "an integer >= 1")
        if (value := real(self.regularizer)) is None or not value > 0:
            fail("regularizer", "a finite number > 0")
        if (value := real(self.tol)) is None or not value >= 0:
            fail("tol", "a finite number >= 0")
        self._check_shared(device_ids(self.device_ids), option="device_ids")
        if self._penalty() not in ("l1", "l2"):
            fail("penalty", "'l1' or 'l2'")
        if self._dual_choice() not in (True, False, "auto"):
            fail("dual", "True, False or 'auto'")
        if self._penalty() == "l1" and self._dual_choice() is True:
            raise ValueError(
                f"{type(self).__name__}: penalty='l1' is solved in the primal only: use dual=False or 'auto'"
            )
        if self.generate_training_history not in (None, "summary", "full"):
            fail("generate_training_history", "None, 'summary' or 'full'")
        if (value := real(self.intercept_scaling)) is None or not value > 0:
            fail("intercept_scaling", "a finite number > 0")
        if self.kernel not in ("linear", "rbf"):
            fail("kernel", "'linear' or 'rbf'")
        if self.kernel == "rbf" and (not isinstance(self.n_components, numbers.Integral) or self.n_components < 1):
            fail("n_components", "an integer >= 1")
        if getattr(self, "privacy", False):
            raise ValueError(f"{type(self).__name__}: privacy=True (differentially private training) is not supported")

    def _features(self, X: Any, *, seed: int | None = None) -> Any:
        """The matrix the linear function reads: rows normalised and the RBF feature map applied, if asked.

        Fitting passes the seed, which makes a new feature map (the same on every rank of a distributed fit).
        """
        if self.normalize:
            X = normalize_rows(X)
        if self.kernel == "rbf":
            if seed is not None:
                self.feature_map_ = RBFSampler(gamma=self.gamma, n_components=self.n_components, random_state=seed).fit(
                    X
                )
            X = self.feature_map_.transform(X)
        return X

    def _validated(self, X: Any, y: Any = None, *, fitting: bool, y_numeric: bool = False) -> Any:
        if isinstance(X, ChunkedDataset):  # fit takes one; it reaches here from predict and the like
            raise ValueError(
                f"{type(self).__name__}: X is a chunked data set: predict on rows in memory (an array or a sparse "
                "matrix), such as one chunk's: X, y = dataset.load(i)"
            )
        if isinstance(X, (str, os.PathLike)):
            raise ValueError(
                f"{type(self).__name__}: X is a path, {X}: give it as forklift.ml.chunked.ChunkedDataset.open(path) "
                "(a chunked set) or read it with forklift.ml.load_svmlight_file(path)"
            )
        return validated(
            self, X, y, fitting=fitting, y_numeric=y_numeric, accept_sparse=("csr", "csc"),
            dtype=(np.float64, np.float32),
        )  # fmt: skip

    def _seed(self, peers: TorchPeers | None) -> int:
        """This fit's seed: from ``random_state``, rank 0's for every rank of a distributed fit."""
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        if peers is not None:
            seed = int(peers.gather(seed)[0])
        return seed

    def _solve_all(
        self, X: Any, targets: list[np.ndarray], weights: np.ndarray, loss: Loss, *, seed: int, peers: TorchPeers | None
    ) -> tuple[np.ndarray, np.ndarray, list[Solution]]:
        """One model per target vector (one per class, one-vs-rest), sharing the prepared data."""
        dual_choice = self._dual_choice()
        dual = (sp.issparse(X) or X.shape[1] > X.shape[0]) if dual_choice == "auto" else bool(dual_choice)
        if self._penalty() == "l1" or (loss is Loss.HINGE):
            dual = loss is Loss.HINGE
        # second order for the smooth losses with l2, unless dual=True: truncated Newton on sparse data, L-BFGS on
        # dense data with at least as many rows as features; and across processes (each product an all-reduce)
        newton = (
            loss.smooth
            and self._penalty() != "l1"
            and dual_choice is not True
            and (peers is not None or (dual_choice == "auto" and (sp.issparse(X) or X.shape[0] >= X.shape[1])))
        )
        if peers is not None:
            if not dual and not newton:
                raise ValueError(
                    f"{type(self).__name__}: a fit across {peers.count} processes solves the dual or takes Newton "
                    f"steps (each rank holds rows): penalty='l1' is not possible there"
                )
            widths = peers.gather(X.shape[1])
            if len(set(widths)) > 1:
                raise ValueError(f"{type(self).__name__}: the ranks' data have different numbers of features: {widths}")
        settings = SolverSettings(
            dual=dual,
            max_iter=int(self.max_iter),
            tol=float(self.tol),
            n_jobs=self._threads(),
            seed=seed,
            verbose=bool(self.verbose),
            record_every_epoch=self.generate_training_history == "full",
        )
        data = PreparedData(X)
        bounds = weights / float(self.regularizer)
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        problems = [
            LinearProblem(X=X, targets=t, bounds=bounds, loss=loss, l1=self._penalty() == "l1", bias=bias)
            for t in targets
        ]
        if self.use_gpu:
            if self._penalty() == "l1" or loss is Loss.HINGE:
                raise ValueError(
                    f"{type(self).__name__}: use_gpu=True fits smooth losses with an l2 penalty (truncated Newton on "
                    "the device), not penalty='l1' or loss='hinge': fit those on the CPU"
                )
            if peers is not None:
                raise ValueError(f"{type(self).__name__}: use_gpu=True takes one process (give it device_ids instead)")
            devices = [torch.device("cuda", i) for i in device_ids(self.device_ids) or [0]]
            solutions = [solve_on_devices(problem, settings, devices=devices) for problem in problems]
        elif newton:
            rows = HostRows(X, threads=settings.n_jobs)
            quasi = not sp.issparse(X)
            solutions = [solve_on_host(problem, settings, rows=rows, peers=peers, quasi=quasi) for problem in problems]
        else:
            solutions = [solve(problem, settings, data=data, peers=peers) for problem in problems]
        if not all(s.converged for s in solutions):
            warnings.warn(
                f"{type(self).__name__} stopped after max_iter={self.max_iter} epochs before reaching tol={self.tol}",
                ConvergenceWarning,
                stacklevel=3,
            )
        coef = np.stack([s.coef for s in solutions])
        intercept = np.array([s.intercept for s in solutions])
        self.n_iter_ = np.array([s.n_iter for s in solutions])
        if self.generate_training_history is not None:
            self.training_history_ = [
                {
                    "epochs": [e.epoch for e in s.history],
                    "seconds": [e.seconds for e in s.history],
                    "objective": [e.objective * float(self.regularizer) for e in s.history],
                }
                for s in solutions
            ]
        return coef, intercept, solutions

    def _refuse_for_chunks(self, y: Any, sample_weight: Any) -> None:
        name = type(self).__name__
        if y is not None or sample_weight is not None:
            raise ValueError(f"{name}: a chunked data set holds its labels: fit(dataset) takes no y or sample_weight")
        if self.normalize or self.kernel != "linear" or self._penalty() == "l1" or self._dual_choice() is False:
            raise ValueError(
                f"{name}: a chunked data set is fitted by the dual solver on its rows as stored: "
                f"normalize=True, kernel='rbf', penalty='l1' and dual=False are not possible there"
            )
        if current_peers() is not None:
            raise ValueError(f"{name}: chunked data sets are fitted in one process in this version")

    def _stream(self, dataset: ChunkedDataset, encoders: list[Encoder], loss: Loss) -> tuple[np.ndarray, np.ndarray]:
        """One streamed model per encoder (one per class, one-vs-rest)."""
        self.n_features_in_ = dataset.n_features
        settings = SolverSettings(
            dual=True, max_iter=int(self.max_iter), tol=float(self.tol), n_jobs=self._threads(),
            seed=self._seed(None), verbose=bool(self.verbose),
        )  # fmt: skip
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        with use_threads(settings.n_jobs):
            solutions = [solve_streaming(dataset, encode, loss, settings, bias=bias) for encode in encoders]
        self.n_iter_ = np.array([s.n_iter for s in solutions])
        if not all(s.converged for s in solutions):
            warnings.warn(
                f"{type(self).__name__} stopped after max_iter={self.max_iter} epochs before reaching tol={self.tol}",
                ConvergenceWarning,
                stacklevel=3,
            )
        return np.stack([s.coef for s in solutions]), np.array([s.intercept for s in solutions])

    def _linear(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = self._features(self._validated(X, fitting=False))
        # in the data's own precision, as scikit-learn does: a float32 matrix is read as stored, not copied to float64
        return np.asarray(X @ self.coef_.T.astype(X.dtype, copy=False)) + self.intercept_

    def export_model(self, output_file: str | Path, output_type: str = "onnx") -> None:
        """Write the fitted model as an ONNX graph (``forklift.ml.linear_onnx``) that other tools run."""
        check_is_fitted(self)
        path = export_path(self, output_file, output_type, formats=("onnx",))
        path.write_bytes(linear_graph(self, output=self._onnx_output).SerializeToString())

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class _LinearClassifier(ClassifierMixin, _GeneralizedLinearModel):
    """Binary models on ±1 labels; more classes one-vs-rest, as snapml does."""

    _loss: ClassVar[Loss]
    class_weight: Any

    def _loss_of(self) -> Loss:
        return self._loss

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> Any:
        """Fit on ``X`` (dense or CSR/CSC) and labels ``y`` of two or more classes, or on a chunked data set."""
        if isinstance(X, ChunkedDataset):
            self.check_parameters()
            return self._fit_chunked(X, y, sample_weight)
        peers = current_peers()
        with agreed(self, peers):
            self.check_parameters()
            X, y = self._validated(X, y, fitting=True)
            check_classification_targets(y)
            weights = row_weights(self, sample_weight, X)
        classes = np.unique(y)
        if peers is not None:  # every rank knows every class, whichever rows it holds
            classes = np.unique(np.concatenate(peers.gather(classes)))
        encoded = np.searchsorted(classes, y)
        check_two_classes(self, classes)
        if self.class_weight is not None:
            weights = weights * self._class_weights(classes, encoded, peers)[encoded]
        seed = self._seed(peers)
        X = self._features(X, seed=seed)
        positives = [1] if len(classes) == 2 else list(range(len(classes)))
        targets = [np.where(encoded == k, 1.0, -1.0) for k in positives]
        self.classes_ = classes
        self.coef_, self.intercept_, _ = self._solve_all(X, targets, weights, self._loss_of(), seed=seed, peers=peers)
        return self

    def _fit_chunked(self, dataset: ChunkedDataset, y: Any, sample_weight: Any) -> Any:
        """Fit on a chunked data set (its labels inside), streaming what does not fit in its memory budget."""
        self._refuse_for_chunks(y, sample_weight)
        if self.class_weight == "balanced":
            raise ValueError(
                f"{type(self).__name__}: class_weight='balanced' needs class counts: give a dict for a chunked data set"
            )
        if dataset.labels is None:
            raise ValueError(
                f"{type(self).__name__}: the targets of {dataset.folder} take more than {MAX_LABELS} values: "
                "a regression's (LinearRegression), not classes"
            )
        classes = np.array(dataset.labels)
        if len(classes) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes; {dataset.folder} has one class"
            )
        per_class = (
            np.ones(len(classes))
            if self.class_weight is None
            else np.asarray(compute_class_weight(self.class_weight, classes=classes, y=classes))
        )
        positives = [1] if len(classes) == 2 else list(range(len(classes)))

        def encoder(k: int) -> Encoder:
            def encode(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                encoded = np.searchsorted(classes, labels)
                return np.where(encoded == k, 1.0, -1.0), per_class[encoded] / float(self.regularizer)

            return encode

        self.classes_ = classes
        self.coef_, self.intercept_ = self._stream(dataset, [encoder(k) for k in positives], self._loss_of())
        return self

    def _class_weights(self, classes: np.ndarray, encoded: np.ndarray, peers: TorchPeers | None) -> np.ndarray:
        """Each class's weight; 'balanced' counts the classes over all ranks."""
        if self.class_weight != "balanced" or peers is None:
            return np.asarray(compute_class_weight(self.class_weight, classes=classes, y=classes[encoded]))
        counts = peers.sum(np.bincount(encoded, minlength=len(classes)).astype(np.float64))
        return np.asarray(counts.sum() / (len(classes) * np.maximum(counts, 1.0)))

    def decision_function(self, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
        """The linear function: one column per class (one-vs-rest), a vector for two classes. ``n_jobs``, as
        snapml takes it, is checked; the product is numpy's or scipy's."""
        if n_jobs is not None:
            self._threads(n_jobs)
        scores = self._linear(X)
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
        """The class of highest score."""
        scores = self.decision_function(X, n_jobs=n_jobs)
        indices = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[indices]


class LogisticRegression(_LinearClassifier):
    """Logistic regression: ``min_w sum_i s_i log(1 + exp(-y_i w.x_i)) + regularizer/2 ||w||^2`` (or ``||w||_1``).

    Example::

        from forklift.ml import LogisticRegression  # was: from snapml import LogisticRegression
        model = LogisticRegression(regularizer=1.0, n_jobs=4).fit(X_train, y_train)
        probabilities = model.predict_proba(X_test)
    """

    _loss = Loss.LOGISTIC
    _onnx_output = LinearOutput.PROBABILITIES

    def __init__(
        self,
        *,
        max_iter: int = 1000,
        regularizer: float = 1.0,
        device_ids: Any = (),
        verbose: bool = False,
        use_gpu: bool = False,
        class_weight: Any = None,
        dual: DualChoice = "auto",
        n_jobs: int = 1,
        penalty: str = "l2",
        tol: float = 0.001,
        generate_training_history: str | None = None,
        privacy: bool = False,
        eta: float = 0.3,
        batch_size: int = 100,
        privacy_epsilon: float = 10,
        grad_clip: float = 1,
        fit_intercept: bool = False,
        intercept_scaling: float = 1.0,
        normalize: bool = False,
        kernel: str = "linear",
        gamma: float = 1.0,
        n_components: int = 100,
        random_state: Any = None,
    ) -> None:
        keep_parameters(self, locals())

    def predict_proba(self, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
        """Class probabilities: the sigmoid of the score, normalised over classes when there are more than two;
        ``n_jobs`` threads take the sigmoid's share of the rows (the fit's ``n_jobs`` when not given)."""
        threads = self._threads(n_jobs)
        scores = self._linear(X)
        if scores.shape[1] > 1:
            return normalize_rows(expit(scores), norm="l1", copy=False)
        with use_threads(threads):
            return kernels.binary_probabilities(scores[:, 0].astype(np.float64, copy=False))

    def predict_log_proba(self, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
        """The logarithm of :meth:`predict_proba`."""
        return np.log(self.predict_proba(X, n_jobs=n_jobs))


class SupportVectorMachine(_LinearClassifier):
    """Linear SVM on the dual: ``min_w sum_i s_i max(0, 1 - y_i w.x_i)^p + regularizer/2 ||w||^2``, p = 1 or 2."""

    _onnx_output = LinearOutput.SCORES

    def __init__(
        self,
        *,
        loss: str = "hinge",
        max_iter: int = 1000,
        regularizer: float = 1.0,
        device_ids: Any = (),
        verbose: bool = False,
        use_gpu: bool = False,
        class_weight: Any = None,
        n_jobs: int = 1,
        tol: float = 0.001,
        generate_training_history: str | None = None,
        fit_intercept: bool = False,
        intercept_scaling: float = 1.0,
        normalize: bool = False,
        kernel: str = "linear",
        gamma: float = 1.0,
        n_components: int = 100,
        random_state: Any = None,
    ) -> None:
        keep_parameters(self, locals())

    def _loss_of(self) -> Loss:
        if self.loss not in ("hinge", "squared_hinge"):
            raise ValueError(
                f"SupportVectorMachine: loss={self.loss!r} is not valid: expected 'hinge' or 'squared_hinge'"
            )
        return Loss.HINGE if self.loss == "hinge" else Loss.SQUARED_HINGE


class LinearRegression(RegressorMixin, _GeneralizedLinearModel):
    """Ridge (``penalty="l2"``) or lasso (``"l1"``): ``min_w sum_i s_i (w.x_i - y_i)^2 / 2 + regularizer R(w)``.

    ``R`` is ``||w||^2 / 2`` or ``||w||_1``.
    """

    _onnx_output = LinearOutput.VALUE

    def __init__(
        self,
        *,
        max_iter: int = 1000,
        regularizer: float = 1.0,
        device_ids: Any = (),
        verbose: bool = False,
        use_gpu: bool = False,
        dual: DualChoice = "auto",
        n_jobs: int = 1,
        penalty: str = "l2",
        tol: float = 0.001,
        generate_training_history: str | None = None,
        privacy: bool = False,
        eta: float = 0.3,
        batch_size: int = 100,
        privacy_epsilon: float = 10,
        grad_clip: float = 1,
        fit_intercept: bool = False,
        intercept_scaling: float = 1.0,
        normalize: bool = False,
        kernel: str = "linear",
        gamma: float = 1.0,
        n_components: int = 100,
        random_state: Any = None,
    ) -> None:
        keep_parameters(self, locals())

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> LinearRegression:
        """Fit on ``X`` (dense or CSR/CSC) and real targets ``y``, or on a chunked data set."""
        if isinstance(X, ChunkedDataset):
            self.check_parameters()
            self._refuse_for_chunks(y, sample_weight)
            bound = 1.0 / float(self.regularizer)
            coef, intercept = self._stream(
                X, [lambda labels: (labels.astype(np.float64), np.full(labels.size, bound))], Loss.SQUARED
            )
            self.coef_, self.intercept_ = coef[0], float(intercept[0])
            return self
        peers = current_peers()
        with agreed(self, peers):
            self.check_parameters()
            X, y = self._validated(X, y, fitting=True, y_numeric=True)
            weights = row_weights(self, sample_weight, X)
        seed = self._seed(peers)
        X = self._features(X, seed=seed)
        coef, intercept, _ = self._solve_all(
            X, [np.asarray(y, dtype=np.float64)], weights, Loss.SQUARED, seed=seed, peers=peers
        )
        self.coef_ = coef[0]
        self.intercept_ = float(intercept[0])
        return self

    def predict(self, X: Any, *, n_jobs: int | None = None) -> np.ndarray:
        """``X @ coef_ + intercept_``. ``n_jobs``, as snapml takes it, is checked; the product is numpy's or scipy's."""
        if n_jobs is not None:
            self._threads(n_jobs)
        return self._linear(X)
