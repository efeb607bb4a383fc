"""LightGBM's model files (its text format) as a :class:`TreeEnsemble`.

LightGBM itself reads the file (``lightgbm.Booster``) and hands over its trees as JSON (``dump_model``). The
facts used are LightGBM's (4.x) prediction rules. It reads every value in ``[-kZeroThreshold, kZeroThreshold]``
(the "zero band"; ``kZeroThreshold`` is the float ``1e-35f``) as 0.0, then a row goes left when
``value <= threshold`` (float64). A split's ``missing_type`` says where NaN goes: ``"NaN"`` to the
``default_left`` side, ``"None"`` where 0.0 goes (it reads as 0.0), ``"Zero"`` (``zero_as_missing``) to the
default side with the zero band. The margin is the sum of the trees (``boost_from_average`` is in the first tree);
a random forest (``boosting="rf"``) averages it over the iterations; ``binary`` predicts ``sigmoid(s * margin)``
for the objective's ``sigmoid:s``, so ``s`` is folded into the leaves; multiclass grows one tree per class per
iteration.

The graph compares float32 values with float32 thresholds, so a threshold becomes the largest float32 at or below
LightGBM's: ``x <= t32`` holds exactly when ``x <= t`` does for every float32 ``x`` (float64 inputs are read as
float32 first, as for any forklift.ml model). The zero band goes to one side by moving the threshold to its edge;
a ``"Zero"`` split that sends the band one way across values that go the other has no single threshold and is
refused, as are categorical splits, linear trees and objectives whose prediction is no link of the margin.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np

from forklift.ml.tree_ensemble import Comparison, Link, ReadTrees, Tree, TreeEnsemble

OBJECTIVES = {  # LightGBM's objective: (link, a classifier)
    "binary": (Link.LOGISTIC, True),
    "multiclass": (Link.SOFTMAX, True),
    "regression": (Link.IDENTITY, False),
    "regression_l1": (Link.IDENTITY, False),
    "huber": (Link.IDENTITY, False),
    "fair": (Link.IDENTITY, False),
    "quantile": (Link.IDENTITY, False),
    "mape": (Link.IDENTITY, False),
    "cross_entropy": (Link.LOGISTIC, False),
    "poisson": (Link.EXP, False),
    "gamma": (Link.EXP, False),
    "tweedie": (Link.EXP, False),
}
ZERO_BAND = float(np.float32(1e-35))  # LightGBM's kZeroThreshold: `const double kZeroThreshold = 1e-35f`
BELOW_ZERO_BAND = float(np.nextafter(np.float32(-ZERO_BAND), np.float32(-np.inf)))  # the float32 just below it


@contextlib.contextmanager
def _stderr_dropped() -> Iterator[None]:
    """Drop what is written to the process's stderr meanwhile: LightGBM's C++ writes "[LightGBM] [Fatal] ..."
    there before it raises the error that the caller reports in its own words."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def read_lightgbm_file(path: Path) -> ReadTrees:
    """A LightGBM text model as an ensemble, a classifier by its objective; its features' names unless they are
    LightGBM's own (``Column_0`` ..., a model fitted on an array)."""
    try:
        with _stderr_dropped():
            booster = lightgbm.Booster(model_file=str(path))
    except lightgbm.basic.LightGBMError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        raise ValueError(f"{path}: not a LightGBM model LightGBM can read: {first}") from exc
    document = booster.dump_model(num_iteration=-1)
    link, classifier, scale = _objective(path, document["objective"])
    per_iteration = int(document["num_tree_per_iteration"])
    infos = document["tree_info"]
    if document.get("average_output"):  # a random forest: the mean of its iterations
        scale /= max(len(infos) // per_iteration, 1)
    trees = tuple(_tree(path, info, output=index % per_iteration, scale=scale) for index, info in enumerate(infos))
    ensemble = TreeEnsemble(
        trees=trees,
        n_features=int(document["max_feature_idx"]) + 1,
        base=np.zeros(per_iteration),
        link=link,
        comparison=Comparison.LESS_OR_EQUAL,
        two_classes=classifier and per_iteration == 1,
        absent_is_missing=False,  # LightGBM reads a sparse matrix's absent entries as zeros
    )
    names = tuple(document.get("feature_names", ()))
    unnamed = names == tuple(f"Column_{index}" for index in range(len(names)))
    return ReadTrees(ensemble, classifier, feature_names=() if unnamed else names)


def _objective(path: Path, objective: str) -> tuple[Link, bool, float]:
    """The link, whether it classifies, and the factor on the margin (binary's ``sigmoid``, folded into the
    leaves so that the plain logistic link predicts LightGBM's probability)."""
    name, *options = objective.split()
    if name not in OBJECTIVES:
        raise ValueError(
            f"{path}: LightGBM objective {name!r} is not one forklift.ml predicts ({', '.join(OBJECTIVES)})"
        )
    if "sqrt" in options:
        raise ValueError(
            f"{path}: LightGBM objective {name!r} with reg_sqrt (the prediction is squared) is not imported"
        )
    settings = dict(option.split(":", 1) for option in options if ":" in option)
    link, classifier = OBJECTIVES[name]
    return link, classifier, float(settings.get("sigmoid", "1"))


def _tree(path: Path, info: dict[str, Any], *, output: int, scale: float) -> Tree:
    """One tree's nodes as arrays, its leaves' values times ``scale``."""
    nodes, left, right = _breadth_first(info["tree_structure"])
    if any("leaf_coeff" in node for node in nodes):
        raise ValueError(f"{path}: linear trees (linear_tree) are not imported; their leaves are linear models")
    splits = [
        _split(path, info["tree_index"], node) if "split_feature" in node else (np.float32(0), False) for node in nodes
    ]
    return Tree(
        feature=np.array([node.get("split_feature", -1) for node in nodes], dtype=np.int64),
        threshold=np.array([threshold for threshold, _ in splits], dtype=np.float32),
        left=np.array(left, dtype=np.int64),
        right=np.array(right, dtype=np.int64),
        missing_left=np.array([missing_left for _, missing_left in splits], dtype=bool),
        values=np.array([[node.get("leaf_value", 0.0) * scale] for node in nodes], dtype=np.float64),
        gain=np.array([node.get("split_gain", 0.0) for node in nodes], dtype=np.float64),
        outputs=(output,),
    )


def _breadth_first(root: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """The nested nodes numbered breadth-first, so that parents come before their children (as
    ``Tree.depth`` reads them), and each node's children (-1 for a leaf)."""
    nodes, left, right = [root], [], []
    for node in nodes:  # grows while it is walked
        if "split_feature" in node:
            left.append(len(nodes))
            right.append(len(nodes) + 1)
            nodes += [node["left_child"], node["right_child"]]
        else:
            left.append(-1)
            right.append(-1)
    return nodes, left, right


def _split(path: Path, tree: int, node: dict[str, Any]) -> tuple[np.float32, bool]:
    """The float32 threshold and missing side that send every float32 value and NaN where LightGBM does."""
    if node["decision_type"] != "<=":
        raise ValueError(f"{path}: tree {tree} has categorical splits; forklift.ml reads numerical ('<=') ones")
    threshold, default_left, missing = float(node["threshold"]), bool(node["default_left"]), node["missing_type"]
    if missing not in ("None", "Zero", "NaN"):
        raise ValueError(f"{path}: tree {tree} has missing_type {missing!r}; expected 'None', 'Zero' or 'NaN'")
    zero_left = default_left if missing == "Zero" else threshold >= 0.0  # where the zero band goes
    nan_left = zero_left if missing == "None" else default_left
    # one cut point when the band joins the values on its side of the threshold
    if zero_left and threshold >= -ZERO_BAND:
        return _float32_below(max(threshold, ZERO_BAND)), nan_left
    if not zero_left and threshold <= ZERO_BAND:
        return _float32_below(min(threshold, BELOW_ZERO_BAND)), nan_left
    raise ValueError(
        f"{path}: tree {tree} splits feature {node['split_feature']} at {threshold!r} but sends zeros "
        f"(zero_as_missing) {'left' if zero_left else 'right'}, across values that go the other way: "
        "one threshold cannot say that"
    )


def _float32_below(threshold: float) -> np.float32:
    """The largest float32 at or below ``threshold``."""
    with np.errstate(over="ignore"):  # beyond float32's range: infinity, then its largest finite value
        rounded = np.float32(threshold)
    return np.nextafter(rounded, np.float32(-np.inf)) if float(rounded) > threshold else rounded
