"""XGBoost's boosters (trained here or read from a JSON/UBJSON file) as a :class:`TreeEnsemble`.

The facts used are XGBoost's model format (3.x): per tree ``left_children``, ``right_children``,
``split_indices``, ``split_conditions`` (a leaf's value for one-output trees), ``default_left``,
``loss_changes``; a multi-output tree keeps its leaves' vectors in ``leaf_weights``, indexed by the leaf's
``right_children`` entry; ``tree_info`` names the output (class) of each one-output tree; ``base_score`` is in
the prediction's space (a probability for the logistic objectives, a mean for Poisson), except for softmax,
whose base scores are margins.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import xgboost

from forklift.ml.column_bundles import ColumnBundles
from forklift.ml.tree_ensemble import Comparison, Link, ReadTrees, Tree, TreeEnsemble

XGBOOST_SOURCE = re.compile(r"^\[[\d:]+\] \S+:\d+: (Check failed: .*? : )?")
LINKS = {
    "reg:squarederror": Link.IDENTITY,
    "reg:absoluteerror": Link.IDENTITY,
    "reg:pseudohubererror": Link.IDENTITY,
    "reg:quantileerror": Link.IDENTITY,
    "reg:logistic": Link.LOGISTIC,
    "binary:logistic": Link.LOGISTIC,
    "binary:logitraw": Link.IDENTITY,
    "count:poisson": Link.EXP,
    "reg:gamma": Link.EXP,
    "reg:tweedie": Link.EXP,
    "multi:softprob": Link.SOFTMAX,
    "multi:softmax": Link.SOFTMAX,
}


def read_booster(
    booster: xgboost.Booster,
    *,
    two_classes: bool = False,
    link: Link | None = None,
    bundles: ColumnBundles | None = None,
    min_leaf_weight: float = 0.0,
) -> TreeEnsemble:
    """The booster's trees, base margin and link (``link`` overrides the objective's, for forklift's own
    objectives trained through XGBoost's squared error), over the data's columns when it was grown on
    ``bundles``' features; a vector-leaf tree's splits into a leaf lighter than ``min_leaf_weight`` taken back."""
    document = json.loads(booster.save_raw(raw_format="json"))
    return ensemble_from_json(document, two_classes=two_classes, link=link, bundles=bundles,
                              min_leaf_weight=min_leaf_weight)  # fmt: skip


def read_model_file(path: Path) -> ReadTrees:
    """An XGBoost model file (``.json`` or ``.ubj``) as an ensemble; a classifier by its objective."""
    booster = xgboost.Booster()
    try:
        booster.load_model(str(path))
    except xgboost.core.XGBoostError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        said = XGBOOST_SOURCE.sub("", first)  # XGBoost's time, source line and failed check: its own, not the user's
        raise ValueError(f"{path}: not an XGBoost model (JSON or UBJSON) XGBoost can read: {said}") from exc
    document = json.loads(booster.save_raw(raw_format="json"))
    objective = document["learner"]["objective"]["name"]
    try:
        ensemble = ensemble_from_json(document, two_classes=objective in ("binary:logistic", "binary:logitraw"))
    except ValueError as exc:  # what the model holds that forklift.ml does not read, said of the file
        raise ValueError(f"{path}: {exc}") from exc
    classification = objective.startswith(("binary:", "multi:"))
    return ReadTrees(ensemble, classification, feature_names=tuple(booster.feature_names or ()))


def ensemble_from_json(
    document: dict[str, Any],
    *,
    two_classes: bool,
    link: Link | None = None,
    bundles: ColumnBundles | None = None,
    min_leaf_weight: float = 0.0,
) -> TreeEnsemble:
    learner = document["learner"]
    booster = learner["gradient_booster"]
    if booster.get("name") not in ("gbtree", "dart"):
        raise ValueError(f"XGBoost booster {booster.get('name')!r}: only tree boosters (gbtree, dart) are trees")
    model = booster["model"] if booster["name"] == "gbtree" else booster["gbtree"]["model"]
    objective = learner["objective"]["name"]
    if objective not in LINKS:
        raise ValueError(f"XGBoost objective {objective!r} is not one forklift.ml predicts ({', '.join(LINKS)})")
    parameters = learner["learner_model_param"]
    n_outputs = max(int(parameters.get("num_class", "0")), int(parameters.get("num_target", "1")), 1)
    base = np.array(json.loads(parameters["base_score"].replace("E", "e")), dtype=np.float64).reshape(-1)
    base = np.broadcast_to(base, (n_outputs,)).copy()
    if objective in ("binary:logistic", "reg:logistic"):
        base = np.log(base / (1.0 - base))
    elif LINKS[objective] is Link.EXP:
        base = np.log(base)
    weights = [float(w) for w in booster["weight_drop"]] if booster["name"] == "dart" else [1.0] * len(model["trees"])
    # a leaf's vector is its node's (base_weights) over the trees grown at once: a forest's leaves average
    shrink = 1 / int(model["gbtree_model_param"].get("num_parallel_tree", "1"))
    trees = tuple(
        _tree(tree, group, n_outputs, weight, bundles, (min_leaf_weight, shrink))
        for tree, group, weight in zip(model["trees"], model["tree_info"], weights, strict=True)
    )
    return TreeEnsemble(
        trees=trees,
        n_features=int(parameters["num_feature"]) if bundles is None else bundles.width,
        base=base,
        link=link or LINKS[objective],
        comparison=Comparison.LESS,
        two_classes=two_classes,
    )


def _tree(
    tree: dict[str, Any],
    group: int,
    n_outputs: int,
    weight: float,
    bundles: ColumnBundles | None,
    light: tuple[float, float],
) -> Tree:
    left = np.asarray(tree["left_children"], dtype=np.int64)
    right = np.asarray(tree["right_children"], dtype=np.int64)
    width = int(tree["tree_param"].get("size_leaf_vector", "1") or 1)
    if width > 1 and light[0] > 0:
        tree = _without_light_leaves(tree, width, *light)
        left = np.asarray(tree["left_children"], dtype=np.int64)
        right = np.asarray(tree["right_children"], dtype=np.int64)
    leaf = left < 0
    conditions = np.asarray(tree["split_conditions"], dtype=np.float32)
    features = np.asarray(tree["split_indices"], dtype=np.int64)
    if bundles is not None:
        features, conditions = _on_columns(tree, features, conditions, leaf, bundles)
    elif any(tree.get("split_type", [])):
        raise ValueError("XGBoost model with categorical splits: forklift.ml reads numerical splits only")
    if width > 1:
        vectors = np.asarray(tree["leaf_weights"], dtype=np.float64).reshape(-1, width)
        values = np.zeros((len(left), width))
        values[leaf] = vectors[right[leaf]]
        outputs = tuple(range(n_outputs))
    else:
        values = np.where(leaf, conditions, 0.0).astype(np.float64)[:, None]
        outputs = (int(group),)
    return Tree(
        feature=np.where(leaf, -1, features),
        threshold=np.where(leaf, 0.0, conditions).astype(np.float32),
        left=np.where(leaf, -1, left),
        right=np.where(leaf, -1, right),
        missing_left=np.asarray(tree["default_left"], dtype=bool),
        values=values * weight,
        gain=np.where(leaf, 0.0, np.asarray(tree["loss_changes"], dtype=np.float64)),
        outputs=outputs,
    )


def _without_light_leaves(tree: dict[str, Any], width: int, min_weight: float, shrink: float) -> dict[str, Any]:
    """A vector-leaf tree with each split that made a child lighter than ``min_weight`` (summed row weights, per
    output) taken back: its node becomes a leaf of its own vector (``base_weights``, times ``shrink`` as a leaf's
    is: learning rate 1 over the trees grown at once), and the nodes below it go.
    XGBoost's multi-output trees split into such children but give them an all-zero vector (a weight below
    ``min_child_weight``), so that a class tree's leaf held no class at all (its probabilities 0/0)."""
    left = list(tree["left_children"])
    right = list(tree["right_children"])
    node_weight = np.asarray(tree["sum_hessian"], dtype=np.float64) / width
    vectors = np.asarray(tree["base_weights"], dtype=np.float64).reshape(-1, width)
    leaf_vectors = np.asarray(tree["leaf_weights"], dtype=np.float64).reshape(-1, width)
    own = {node: leaf_vectors[right[node]] for node in range(len(left)) if left[node] < 0}
    # light: under the least weight, or a leaf XGBoost gave no value at the least weight (its weights are summed in
    # double precision, and kept here in float32: 4.9999997 reads as 5)
    light = [weight < min_weight or (left[node] < 0 and weight < min_weight * (1 + 1e-6) and not own[node].any())
             for node, weight in enumerate(node_weight)]  # fmt: skip
    for node in reversed(range(len(left))):  # children before parents: a parent taken back sees its children as left
        if left[node] >= 0 and (light[left[node]] or light[right[node]]):
            left[node] = right[node] = -1
            own[node] = vectors[node] * shrink
    kept: dict[int, int] = {}
    order = [0]  # the nodes still reached, numbered again in the order they are met
    for node in order:
        kept[node] = len(kept)
        if left[node] >= 0:
            order += [left[node], right[node]]
    leaves = [node for node in order if left[node] < 0]
    index = {node: k for k, node in enumerate(leaves)}
    categorical = [(kept[node], start, size) for node, start, size in zip(tree.get("categories_nodes", []),
                   tree.get("categories_segments", []), tree.get("categories_sizes", []), strict=True)
                   if node in kept and left[node] >= 0]  # fmt: skip
    return {
        **tree,
        "categories_nodes": [node for node, _, _ in categorical],
        "categories_segments": [start for _, start, _ in categorical],
        "categories_sizes": [size for _, _, size in categorical],
        "left_children": [kept[left[n]] if left[n] >= 0 else -1 for n in order],
        "right_children": [kept[right[n]] if left[n] >= 0 else index[n] for n in order],
        "split_indices": [tree["split_indices"][n] for n in order],
        "split_conditions": [tree["split_conditions"][n] for n in order],
        "default_left": [tree["default_left"][n] for n in order],
        "loss_changes": [tree["loss_changes"][n] for n in order],
        "split_type": [tree["split_type"][n] for n in order] if tree.get("split_type") else [],
        "leaf_weights": np.concatenate([own[n] for n in leaves]).tolist(),
    }


def _on_columns(
    tree: dict[str, Any], features: np.ndarray, conditions: np.ndarray, leaf: np.ndarray, bundles: ColumnBundles
) -> tuple[np.ndarray, np.ndarray]:
    """The splits of a tree grown on ``bundles``' features as splits on the data's columns: a number's split on its
    column; a one-hot split (category ``k`` to the right, the rest to the left) as its column ``< 1`` to the left,
    where XGBoost splits a 0/1 column. A missing category goes with the rest (XGBoost's default for a one-hot
    split), as a row of no known category."""
    category = dict.fromkeys(np.flatnonzero(~leaf).tolist())
    segments = zip(tree["categories_nodes"], tree["categories_segments"], tree["categories_sizes"], strict=True)
    for node, start, size in segments:
        if size != 1:
            raise ValueError(f"XGBoost split on {size} categories at node {node}: forklift.ml reads one-hot ones only")
        category[node] = int(tree["categories"][start])
    columns, thresholds = features.copy(), conditions.copy()
    for node, chosen in category.items():
        columns[node] = bundles.column(int(features[node]), chosen)
        if chosen is not None:
            thresholds[node] = 1.0
    return columns, thresholds
