"""snapml's boosting machines on scikit-learn's API: ``BoostingMachineClassifier`` and ``BoostingMachineRegressor``.

Each round grows one XGBoost histogram tree (one per class for more than two classes) of a depth drawn in
``[min_max_depth, max_max_depth]`` (``max_depth`` fixes it), as SnapBoost does. Boosting starts from
``base_score``, a margin: by default the weighted mean target (mse), its logit (cross-entropy, two classes), the
log of each class's share (more classes), the log of the mean (poisson) or the ``alpha`` quantile (quantile), as
snapml documents it. With ``X_val``/``y_val``, training stops when the validation loss has not fallen for
``early_stopping_rounds`` rounds and keeps the rounds up to the best (``n_rounds_``). ``fit(..., on_rounds=...)``
shows the model so far to a caller every few rounds (`forklift tune` measures it and may stop the fit).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import scipy.sparse as sp
import xgboost
from scipy.special import logit
from sklearn.utils import check_random_state, compute_class_weight

from forklift.ml.boosting_losses import BoostingLoss, LossKind
from forklift.ml.column_bundles import ColumnBundles
from forklift.ml.estimators import checked_target, keep_parameters, real, row_weights, whole
from forklift.ml.ridge_rounds import RidgeRound, fit_ridge_round, fourier_term
from forklift.ml.tree_ensemble import Link
from forklift.ml.tree_xgboost import read_booster
from forklift.ml.trees import _TreeClassifierMixin, _TreeModel, _TreeRegressorMixin

Seen = TypeVar("Seen")
REGRESSION_OBJECTIVES = {  # snapml's name: (XGBoost's objective, its metric for early stopping)
    "mse": ("reg:squarederror", "rmse"),
    "cross_entropy": ("reg:logistic", "logloss"),
    "poisson": ("count:poisson", "poisson-nloglik"),
    "quantile": ("reg:quantileerror", "quantile"),
}


@dataclasses.dataclass(frozen=True)
class RoundHook(Generic[Seen]):
    """What a fit calls as it boosts: ``call(rounds, seen)`` after every ``every`` rounds but the last (whose model
    is what the fit returns). A fit passes the model so far; raising in ``call`` stops the fit. A fit parameter,
    not a constructor one, so that ``get_params``, ``clone`` and pickles do not carry a caller's function."""

    every: int
    call: Callable[[int, Seen], None]


@dataclasses.dataclass(frozen=True)
class _Objective:
    """What a fit boosts: XGBoost's objective and metric, forklift's loss of the same (for the rounds it grows
    itself), the starting margin and the link."""

    parameters: dict[str, Any]
    metric: str
    loss: BoostingLoss
    start: np.ndarray
    link: Link
    two_classes: bool


@dataclasses.dataclass
class _BestRound:
    """Early stopping: the round of the lowest validation loss so far, and when to give up."""

    patience: int
    owner: str
    round: int = 0
    loss: float = math.inf

    def stops_after(self, round_: int, loss: float) -> bool:
        if not math.isfinite(loss):
            raise ValueError(f"{self.owner}: the validation loss is {loss} after round {round_}")
        if loss < self.loss:
            self.round, self.loss = round_, loss
            return False
        return round_ - self.round >= self.patience


class _Boosting(_TreeModel):
    num_round: int
    max_depth: int | None
    min_max_depth: int
    max_max_depth: int
    early_stopping_rounds: int
    base_score: float | None
    learning_rate: float
    colsample_bytree: float
    subsample: float
    lambda_l2: float
    tree_select_probability: float
    n_rounds_: int

    def check_parameters(self) -> None:
        self._check_common()
        name = type(self).__name__

        def integer(option: str, low: int) -> int:
            value = whole(getattr(self, option))
            if value is None or value < low:
                raise ValueError(f"{name}: {option}={getattr(self, option)!r}: expected an integer >= {low}")
            return value

        integer("num_round", 1)
        integer("early_stopping_rounds", 1)
        if self.max_depth is not None:
            integer("max_depth", 1)
        elif integer("min_max_depth", 1) > integer("max_max_depth", 1):
            raise ValueError(f"{name}: min_max_depth={self.min_max_depth} is above max_max_depth={self.max_max_depth}")
        learning_rate = real(self.learning_rate)
        if learning_rate is None or not learning_rate > 0:
            raise ValueError(f"{name}: learning_rate={self.learning_rate!r}: expected a finite number > 0")
        for option in ("subsample", "colsample_bytree"):
            value = real(getattr(self, option))
            if value is None or not 0 < value <= 1:
                raise ValueError(f"{name}: {option}={getattr(self, option)!r}: expected a number in (0, 1]")
        if self.base_score is not None and real(self.base_score) is None:
            raise ValueError(f"{name}: base_score={self.base_score!r}: expected None or a finite number (a margin)")
        lambda_l2 = real(self.lambda_l2)
        if lambda_l2 is None or not lambda_l2 >= 0:
            raise ValueError(f"{name}: lambda_l2={self.lambda_l2!r}: expected a finite number >= 0")
        select = real(self.tree_select_probability)
        if select is None or not 0.0 < select <= 1.0:
            raise ValueError(
                f"{name}: tree_select_probability={self.tree_select_probability!r}: expected a number in (0, 1] "
                "(the first round is always a tree)"
            )
        if select < 1.0 and getattr(self, "objective", None) == "quantile":
            # XGBoost sets a quantile tree's leaves to the quantiles of their rows' residuals, where grown on the
            # pinball loss's gradients alone they move a step a round: 100 rounds fitted 5 times worse
            raise ValueError(
                f"{name}: objective='quantile' grows trees only (XGBoost's quantile leaves): give "
                f"tree_select_probability=1.0, not {self.tree_select_probability!r}"
            )
        if select < 1.0:
            for option in ("gamma", "regularizer"):
                value = real(getattr(self, option))
                if value is None or not value > 0:
                    raise ValueError(f"{name}: {option}={getattr(self, option)!r}: expected a finite number > 0")
            integer("n_components", 1)

    def _depths(self) -> np.ndarray:
        """Each round's tree depth: fixed, or drawn from ``random_state``."""
        if self.max_depth is not None:
            return np.full(self.num_round, int(self.max_depth))
        rng = check_random_state(self.random_state)
        return rng.randint(int(self.min_max_depth), int(self.max_max_depth) + 1, size=self.num_round)

    def _boost(
        self,
        X: Any,
        label: np.ndarray,
        weight: np.ndarray,
        validation: tuple[Any, np.ndarray, np.ndarray] | None,
        *,
        objective: _Objective,
        on_rounds: RoundHook[_Boosting] | None,
    ) -> None:
        if self.tree_select_probability < 1.0:
            self._boost_mixed(X, label, weight, validation, objective=objective, on_rounds=on_rounds)
            return
        bundles = self._round_bundles(X, validation)
        parameters = self._round_parameters(bundles) | objective.parameters | {"eval_metric": objective.metric}
        train = self._matrix(X, label, weight, bundles=bundles)
        train.set_base_margin(np.tile(objective.start, (X.shape[0], 1)).ravel())
        matrices = [train]
        if validation is not None:
            X_val, y_val, w_val = validation
            val = self._matrix(X_val, y_val, w_val, bundles=bundles, reference=train)
            val.set_base_margin(np.tile(objective.start, (X_val.shape[0], 1)).ravel())
            matrices.append(val)
        booster = xgboost.Booster(parameters, matrices)
        best = _BestRound(int(self.early_stopping_rounds), type(self).__name__)
        depth_set = None
        for round_, depth in enumerate(self._depths()):
            depth_set = _set_depth(booster, depth, depth_set)
            booster.update(train, round_)
            if self._wants_report(on_rounds, round_):
                self._keep(booster, objective, bundles)
                on_rounds.call(round_ + 1, self)  # type: ignore[union-attr]  # _wants_report checked it
            if validation is None:
                continue
            loss = float(booster.eval_set([(matrices[1], "val")], round_).rsplit(":", 1)[1])
            self._say(round_, f"tree of depth {depth}", objective.metric, loss)
            if best.stops_after(round_, loss):
                break
        self._keep(booster if validation is None else booster[: best.round + 1], objective, bundles)

    def _boost_mixed(
        self,
        X: Any,
        label: np.ndarray,
        weight: np.ndarray,
        validation: tuple[Any, np.ndarray, np.ndarray] | None,
        *,
        objective: _Objective,
        on_rounds: RoundHook[_Boosting] | None,
    ) -> None:
        """SnapBoost's mix: each round (the first always) a tree with probability ``tree_select_probability``,
        else a ridge round on random Fourier features; the margins are forklift's, the trees grown by XGBoost on
        the gradients of the loss at them."""
        name = type(self).__name__
        if sp.issparse(X) or np.isnan(X).any():
            raise ValueError(
                f"{name}: tree_select_probability < 1 adds ridge rounds, which read every feature: give a dense X "
                "without missing values"
            )
        outputs = len(objective.start)
        # the objective only shapes the trees' outputs here: forklift gives the gradients
        shape = (
            {"objective": "multi:softprob", "num_class": outputs} if outputs > 1 else {"objective": "reg:squarederror"}
        )
        if validation is not None and (sp.issparse(validation[0]) or np.isnan(validation[0]).any()):
            raise ValueError(f"{name}: with ridge rounds, X_val must be dense without missing values too")
        bundles = self._round_bundles(X, validation)
        train = self._matrix(X, None, weight, bundles=bundles)
        booster = xgboost.Booster(self._round_parameters(bundles) | shape | {"base_score": 0.0}, [train])
        rng = np.random.default_rng(self._seed())
        margin = np.tile(objective.start, (X.shape[0], 1))
        if validation is not None:
            X_val, y_val, w_val = validation
            val = self._matrix(X_val, None, w_val, bundles=bundles, reference=train)
            val_margin = np.tile(objective.start, (X_val.shape[0], 1))
        trees, ridges, made = 0, [], []  # made: (trees, ridge rounds) after each round
        best = _BestRound(int(self.early_stopping_rounds), name)
        depth_set = None
        for round_, depth in enumerate(self._depths()):
            gradient, hessian = objective.loss.gradients(margin, label, weight)
            if round_ == 0 or rng.random() < self.tree_select_probability:
                depth_set = _set_depth(booster, depth, depth_set)
                booster.boost(train, trees, grad=gradient.astype(np.float32), hess=hessian.astype(np.float32))
                grown = (trees, trees + 1)
                margin += self._tree_margin(booster, train, grown, margin.shape)
                if validation is not None:
                    val_margin += self._tree_margin(booster, val, grown, val_margin.shape)
                trees, learner = trees + 1, f"tree of depth {depth}"
            else:
                ridge = fit_ridge_round(
                    X, gradient, hessian, rng=rng, gamma=float(self.gamma), n_components=int(self.n_components),
                    regularizer=float(self.regularizer), fit_intercept=bool(self.fit_intercept),
                    learning_rate=float(self.learning_rate),
                )  # fmt: skip
                ridges.append(ridge)
                margin += ridge.margin(X)
                if validation is not None:
                    val_margin += ridge.margin(X_val)
                learner = "ridge round"
            made.append((trees, len(ridges)))
            if self._wants_report(on_rounds, round_):
                self._keep(booster[:trees], objective, bundles, ridges)
                on_rounds.call(round_ + 1, self)  # type: ignore[union-attr]  # _wants_report checked it
            if validation is None:
                continue
            loss = objective.loss.metric(val_margin, y_val, w_val)
            self._say(round_, learner, objective.metric, loss)
            if best.stops_after(round_, loss):
                break
        if validation is not None:
            trees, kept = made[best.round]
            ridges = ridges[:kept]
        self._keep(booster[:trees], objective, bundles, ridges)

    @staticmethod
    def _tree_margin(
        booster: xgboost.Booster, matrix: xgboost.DMatrix, trees: tuple[int, int], shape: tuple[int, ...]
    ) -> np.ndarray:
        """What the round's tree adds to each row's margin."""
        return booster.predict(matrix, output_margin=True, iteration_range=trees).reshape(shape)

    def _round_bundles(self, X: Any, validation: tuple[Any, np.ndarray, np.ndarray] | None) -> ColumnBundles | None:
        """The one-hots of ``X`` the rounds grow on as categories, those the validation rows keep to."""
        bundles = self._bundles(X, sampled=self.colsample_bytree < 1.0)
        if bundles is None or validation is None:
            return bundles
        return None if sp.issparse(validation[0]) else bundles.keeping_to(validation[0])

    def _round_parameters(self, bundles: ColumnBundles | None) -> dict[str, Any]:
        """XGBoost's parameters every round shares: the learning rate, the leaves' l2 and the sampling."""
        return (
            self._base_parameters(self._seed())
            | (bundles.parameters if bundles else {})
            | {
                "learning_rate": float(self.learning_rate),
                "reg_lambda": float(self.lambda_l2),
                "subsample": float(self.subsample),
                "colsample_bytree": float(self.colsample_bytree),
            }
        )

    def _wants_report(self, on_rounds: RoundHook[_Boosting] | None, round_: int) -> bool:
        return on_rounds is not None and (round_ + 1) % on_rounds.every == 0 and round_ + 1 < self.num_round

    def _say(self, round_: int, learner: str, metric: str, loss: float) -> None:
        if self.verbose:
            print(f"round {round_}: {learner}, validation {metric} {loss:.6g}", flush=True)

    def _keep(
        self,
        booster: xgboost.Booster,
        objective: _Objective,
        bundles: ColumnBundles | None,
        ridges: Sequence[RidgeRound] = (),
    ) -> None:
        """Predict with the booster's trees (grown on ``bundles``' features if any; and the ridge rounds) from here
        on."""
        ensemble = read_booster(booster, two_classes=objective.two_classes, link=objective.link, bundles=bundles)
        base, fourier = objective.start, None
        if ridges:
            fourier, intercept = fourier_term(ridges)
            base = base + intercept
        self.n_rounds_ = booster.num_boosted_rounds() + len(ridges)
        self.ensemble_ = dataclasses.replace(ensemble, base=base, fourier=fourier)

    def _validation(self, X_val: Any, y_val: Any, sample_weight_val: Any) -> tuple[Any, Any] | None:
        if (X_val is None) != (y_val is None):
            raise ValueError(f"{type(self).__name__}: give X_val and y_val together")
        if X_val is None:
            return None
        try:
            X_val = self._validated(X_val, None, fitting=False)
        except ValueError as exc:  # scikit-learn's check calls it X
            raise ValueError(f"X_val: {exc}") from exc
        y_val = checked_target(self, y_val, numeric=not self._is_classifier, name="y_val")
        if len(y_val) != X_val.shape[0]:
            raise ValueError(f"{type(self).__name__}: y_val has {len(y_val)} labels for {X_val.shape[0]} rows of X_val")
        return X_val, row_weights(self, sample_weight_val, X_val, name="sample_weight_val", of="X_val")


def _set_depth(booster: xgboost.Booster, depth: int, depth_set: int | None) -> int:
    """Give the next tree ``depth`` where it differs from the last set: XGBoost configures itself anew after each
    ``set_param`` (about 0.2 ms a round, a tenth of 100 rounds on the adult census)."""
    if depth != depth_set:
        booster.set_param("max_depth", str(depth))
    return depth


class BoostingMachineClassifier(_TreeClassifierMixin, _Boosting):
    """SnapBoost for classification: log-loss (softmax over more than two classes).

    Example::

        from forklift.ml import BoostingMachineClassifier  # was: from snapml import BoostingMachineClassifier
        model = BoostingMachineClassifier(num_round=100, max_depth=6, n_jobs=4).fit(X, y, X_val=Xv, y_val=yv)
    """

    class_weight: Any

    def __init__(
        self,
        n_jobs: int = 1,
        num_round: int = 100,
        max_depth: int | None = None,
        min_max_depth: int = 1,
        max_max_depth: int = 5,
        early_stopping_rounds: int = 10,
        random_state: Any = 0,
        base_score: float | None = None,
        learning_rate: float = 0.1,
        verbose: bool = False,
        compress_trees: bool = False,
        class_weight: Any = None,
        use_histograms: bool = True,
        hist_nbins: int = 256,
        use_gpu: bool = False,
        gpu_ids: Any = (0,),
        colsample_bytree: float = 1.0,
        subsample: float = 1.0,
        lambda_l2: float = 0.0,
        tree_select_probability: float = 1.0,
        regularizer: float = 1.0,
        fit_intercept: bool = False,
        gamma: float = 1.0,
        n_components: int = 10,
    ) -> None:
        keep_parameters(self, locals())

    def fit(
        self,
        X: Any,
        y: Any,
        sample_weight: Any = None,
        X_val: Any = None,
        y_val: Any = None,
        sample_weight_val: Any = None,
        aggregate_importances: bool = True,
        *,
        on_rounds: RoundHook[_Boosting] | None = None,
    ) -> BoostingMachineClassifier:
        """Boost on ``X`` (dense or CSR/CSC, NaN = missing) and labels of two or more classes; stop early on
        ``X_val``/``y_val`` when given; ``on_rounds`` sees the model every few rounds."""
        self.check_parameters()
        X, y = self._validated(X, y, fitting=True)
        encoded = self._encoded(y)
        weight = row_weights(self, sample_weight, X)
        if self.class_weight is not None:
            weight = weight * compute_class_weight(self.class_weight, classes=self.classes_, y=y)[encoded]
        validation = self._validation(X_val, y_val, sample_weight_val)
        labelled_val = None
        if validation is not None:
            unknown = np.setdiff1d(y_val, self.classes_)
            if len(unknown):
                raise ValueError(f"{type(self).__name__}: y_val holds {unknown[0].tolist()!r}, a class not in y")
            encoded_val = np.searchsorted(self.classes_, y_val).astype(np.float32)
            labelled_val = (validation[0], encoded_val, validation[1])
        k = len(self.classes_)
        shares = np.bincount(encoded, weights=weight, minlength=k) / weight.sum()
        if k == 2:
            start = np.array([logit(np.clip(shares[1], 1e-15, 1 - 1e-15))])
            objective = _Objective(
                {"objective": "binary:logistic"}, "logloss", BoostingLoss(LossKind.LOGISTIC), start, Link.LOGISTIC, True
            )
        else:
            start = np.log(np.maximum(shares, 1e-15))
            parameters = {"objective": "multi:softprob", "num_class": k}
            objective = _Objective(parameters, "mlogloss", BoostingLoss(LossKind.SOFTMAX), start, Link.SOFTMAX, False)
        if self.base_score is not None:
            objective = dataclasses.replace(objective, start=np.full_like(start, float(self.base_score)))
        self._boost(X, encoded.astype(np.float32), weight, labelled_val, objective=objective, on_rounds=on_rounds)
        return self


class BoostingMachineRegressor(_TreeRegressorMixin, _Boosting):
    """SnapBoost for regression: ``objective`` ``"mse"``, ``"cross_entropy"`` (targets in [0, 1], predicts a
    probability), ``"poisson"`` (counts, predicts the mean) or ``"quantile"`` (the ``alpha`` quantile)."""

    objective: str
    max_delta_step: float
    alpha: float

    def __init__(
        self,
        n_jobs: int = 1,
        num_round: int = 100,
        objective: str = "mse",
        max_depth: int | None = None,
        min_max_depth: int = 1,
        max_max_depth: int = 5,
        early_stopping_rounds: int = 10,
        random_state: Any = 0,
        base_score: float | None = None,
        learning_rate: float = 0.1,
        verbose: bool = False,
        compress_trees: bool = False,
        use_histograms: bool = True,
        hist_nbins: int = 256,
        use_gpu: bool = False,
        gpu_id: int = 0,
        colsample_bytree: float = 1.0,
        subsample: float = 1.0,
        lambda_l2: float = 0.0,
        max_delta_step: float = 0.0,
        alpha: float = 0.5,
        min_h_quantile: float = 0.0,
        tree_select_probability: float = 1.0,
        regularizer: float = 1.0,
        fit_intercept: bool = False,
        gamma: float = 1.0,
        n_components: int = 10,
    ) -> None:
        keep_parameters(self, locals())

    def _check_targets(self, y: np.ndarray, name: str) -> None:
        if self.objective == "cross_entropy" and (y.min() < 0 or y.max() > 1):
            raise ValueError(f"{type(self).__name__}: objective='cross_entropy' needs {name} in [0, 1]")
        if self.objective == "poisson" and y.min() < 0:
            raise ValueError(f"{type(self).__name__}: objective='poisson' needs {name} >= 0 (counts)")

    def fit(
        self,
        X: Any,
        y: Any,
        sample_weight: Any = None,
        X_val: Any = None,
        y_val: Any = None,
        sample_weight_val: Any = None,
        aggregate_importances: bool = True,
        *,
        on_rounds: RoundHook[_Boosting] | None = None,
    ) -> BoostingMachineRegressor:
        """Boost on ``X`` (dense or CSR/CSC, NaN = missing) and real targets; stop early on ``X_val``/``y_val``;
        ``on_rounds`` sees the model every few rounds."""
        self.check_parameters()
        if self.objective not in REGRESSION_OBJECTIVES:
            known = ", ".join(REGRESSION_OBJECTIVES)
            raise ValueError(f"{type(self).__name__}: objective={self.objective!r}: expected one of {known}")
        if self.objective == "quantile" and not 0 < self.alpha < 1:
            raise ValueError(f"{type(self).__name__}: alpha={self.alpha!r}: expected a quantile in (0, 1)")
        X, y = self._validated(X, y, fitting=True)
        y = np.asarray(y, dtype=np.float64)
        self._check_targets(y, "y")
        weight = row_weights(self, sample_weight, X)
        validation = self._validation(X_val, y_val, sample_weight_val)
        if validation is not None:
            self._check_targets(np.asarray(y_val, dtype=np.float64), "y_val")
        name, metric = REGRESSION_OBJECTIVES[self.objective]
        parameters: dict[str, Any] = {"objective": name, "max_delta_step": float(self.max_delta_step)}
        mean = float(np.average(y, weights=weight))
        if self.objective == "mse":
            start, link, kind = mean, Link.IDENTITY, LossKind.SQUARED
        elif self.objective == "cross_entropy":
            start, link, kind = float(logit(np.clip(mean, 1e-15, 1 - 1e-15))), Link.LOGISTIC, LossKind.LOGISTIC
        elif self.objective == "poisson":
            start, link, kind = math.log(max(mean, 1e-15)), Link.EXP, LossKind.POISSON
        else:
            parameters["quantile_alpha"] = float(self.alpha)
            start = float(np.quantile(y, self.alpha, weights=weight, method="inverted_cdf"))
            link, kind = Link.IDENTITY, LossKind.QUANTILE
        if self.base_score is not None:
            start = float(self.base_score)
        loss = BoostingLoss(kind, alpha=float(self.alpha), max_delta_step=float(self.max_delta_step))
        objective = _Objective(parameters, metric, loss, np.array([start]), link, False)
        labelled_val = (
            None if validation is None else (validation[0], np.asarray(y_val, dtype=np.float64), validation[1])
        )
        self._boost(X, y, weight, labelled_val, objective=objective, on_rounds=on_rounds)
        return self
