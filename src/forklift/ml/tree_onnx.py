"""ONNX tree ensembles as a :class:`TreeEnsemble`: forklift's own exports, and the ``ai.onnx.ml``
``TreeEnsembleClassifier``/``TreeEnsembleRegressor`` other tools write (skl2onnx, onnxmltools).

Facts used, from the operators' specification (``ai.onnx.ml`` 1-3): a tree's nodes are tuples across the
``nodes_*`` attributes, named by (tree id, node id); a branch sends a row to its true node when
``value <mode> threshold`` holds, and a missing value to it when ``nodes_missing_value_tracks_true``; a leaf's
weights (``target_*``, ``class_*``) add to their target or class, summed over the trees (``SUM``) or averaged
(``AVERAGE``), then ``base_values`` are added and ``post_transform`` is the link. ``>`` and ``>=`` are the other side
of ``<=`` and ``<``; the graph's input is float32, so where a file mixes ``<`` and ``<=``, ``x <= t`` is read as
``x < nextafter(t)``.

Two-class classifiers are where the specification is vague and ONNX Runtime has rules of its own, so every import is
checked: ONNX Runtime runs the file on rows made from its thresholds (each side of each, and missing values), and the
ensemble read from it must predict the same; a file it does not is refused rather than imported to predict
otherwise. Beside the trees a graph may hold what does not change the numbers (``ZipMap``, ``Identity``, ``Cast``)
and a link (``Sigmoid``, ``Softmax``, ``Exp``); forklift's own graphs also their two-class and ridge-round nodes.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx import helper, numpy_helper

from forklift.ml.tree_ensemble import PREDICTION, Comparison, FourierTerm, Link, ReadTrees, Tree, TreeEnsemble

ENSEMBLES = ("TreeEnsembleClassifier", "TreeEnsembleRegressor")
POST_TRANSFORMS = {"NONE": None, "LOGISTIC": Link.LOGISTIC, "SOFTMAX": Link.SOFTMAX}
LINK_NODES = {"Sigmoid": Link.LOGISTIC, "Softmax": Link.SOFTMAX, "Exp": Link.EXP}
NEUTRAL_NODES = {"ZipMap", "Identity", "Cast"}
FORKLIFT_NODES = {"Clip", "Sub", "Concat", "MatMul", "Add", "Cos"}  # the two-class output and the ridge rounds
FORKLIFT_GRAPH = "forklift_tree_ensemble"
PROBE_ROWS = 512
AGREEMENT = 1e-5
CLASSES_PROPERTY = "forklift.classes"  # a classifier's labels, as JSON, in forklift's own graphs


def read_onnx_file(path: Path) -> ReadTrees:
    """The tree ensemble in the ONNX file ``path``, checked on ONNX Runtime; one line saying what is wrong."""
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf's DecodeError and friends: the file is not a model
        raise ValueError(f"{path}: not an ONNX model ({type(exc).__name__})") from exc
    if not model.graph.node:
        raise ValueError(f"{path}: not an ONNX model (no graph in it)")
    try:
        trees = _read_graph(model)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    _check_on_onnx_runtime(path, model, trees)
    return trees


def _read_graph(model: onnx.ModelProto) -> ReadTrees:
    graph = model.graph
    ours = graph.name == FORKLIFT_GRAPH
    tree_nodes = [node for node in graph.node if node.op_type in ENSEMBLES and node.domain == "ai.onnx.ml"]
    if any(node.op_type == "TreeEnsemble" for node in graph.node):
        raise ValueError(
            "a TreeEnsemble node (ai.onnx.ml opset 5) is not read; forklift.ml reads opset 3's "
            "TreeEnsembleClassifier/Regressor: convert with target_opset={'': 17, 'ai.onnx.ml': 3}"
        )
    if len(tree_nodes) != 1:
        raise ValueError(f"holds {len(tree_nodes)} tree ensemble nodes (TreeEnsembleClassifier/Regressor): expected 1")
    node = tree_nodes[0]
    allowed = NEUTRAL_NODES | set(LINK_NODES) | (FORKLIFT_NODES if ours else set())
    factor = _factor(graph) if not ours else 1.0
    other = [n for n in graph.node if n is not node and n.op_type not in allowed and n.op_type != "Mul"]
    if other:
        article = "an" if other[0].op_type[0] in "AEIOU" else "a"
        raise ValueError(
            f"the graph computes more than its trees ({article} {other[0].op_type} node): only a tree ensemble is "
            "imported"
        )
    if len(graph.input) != 1 or node.input[0] not in (graph.input[0].name, *_cast_outputs(graph)):
        raise ValueError("the trees do not read the graph's one input directly")
    attributes = {a.name: _value(a) for a in node.attribute}
    classifier = node.op_type == "TreeEnsembleClassifier"
    link = _link(attributes, graph, classifier=classifier)
    comparison = _comparison_of(attributes["nodes_modes"])
    trees, base, two_classes = _trees(attributes, comparison, classifier=classifier)
    n_features = _input_width(graph.input[0], trees)
    fourier = _fourier(graph) if ours and any(n.op_type == "Cos" for n in graph.node) else None
    if ours:  # forklift's graph: a regressor node; the two-class output is built after the link
        two_classes = any(n.op_type == "Concat" for n in graph.node)
        classifier = two_classes or any(n.op_type in ("Clip", "Softmax") for n in graph.node)
    ensemble = TreeEnsemble(
        trees=tuple(trees),
        n_features=n_features,
        base=base,
        link=link,
        comparison=comparison,
        two_classes=two_classes,
        fourier=fourier,
        absent_is_missing=ours,  # the graph reads dense rows: another tool's model was fitted on zeros there
    )
    if classifier and link is Link.IDENTITY and any((t.values[t.leaves] < 0).any() for t in trees):
        raise ValueError("a classifier whose outputs are not probabilities (negative leaf weights) is not imported")
    if not classifier and ensemble.n_outputs != 1:
        raise ValueError(f"a regressor of {ensemble.n_outputs} targets: forklift.ml's regressors predict one number")
    labels = None
    if classifier and not ours:
        labels = np.asarray(attributes.get("classlabels_int64s", attributes.get("classlabels_strings")))
    properties = {prop.key: prop.value for prop in model.metadata_props}
    if ours and CLASSES_PROPERTY in properties:
        labels = np.asarray(json.loads(properties[CLASSES_PROPERTY]))
    return ReadTrees(_times(ensemble, factor, classifier=classifier), classifier, labels)


def with_classes(model: onnx.ModelProto, classes: np.ndarray) -> onnx.ModelProto:
    """forklift's graph of a classifier, its classes' labels kept in the model's properties (the graph itself
    outputs the classes' scores in this order), so that an import gives them back."""
    helper.set_model_props(model, {CLASSES_PROPERTY: json.dumps(np.asarray(classes).tolist())})
    return model


def _factor(graph: onnx.GraphProto) -> float:
    """The product of the graph's ``Mul`` nodes by one constant (a converter's scale, or 1.0); others are refused."""
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    factor = 1.0
    for node in (n for n in graph.node if n.op_type == "Mul"):
        given = [constants[name] for name in node.input if name in constants and constants[name].size == 1]
        if len(given) != 1:
            raise ValueError("the graph computes more than its trees (a Mul node of two variables)")
        factor *= float(given[0].reshape(-1)[0])
    return factor


def _times(ensemble: TreeEnsemble, factor: float, *, classifier: bool) -> TreeEnsemble:
    """The ensemble whose prediction is ``factor`` times this one's: a scale of the margin, or of ``exp``'s base."""
    if factor == 1.0:
        return ensemble
    if ensemble.link is Link.EXP and factor > 0:
        return replace(ensemble, base=ensemble.base + math.log(factor))
    if ensemble.link is Link.IDENTITY and not classifier:
        trees = tuple(replace(tree, values=tree.values * factor) for tree in ensemble.trees)
        return replace(ensemble, trees=trees, base=ensemble.base * factor)
    raise ValueError(f"the prediction is multiplied by {factor:g} after a {ensemble.link.value} link")


def _value(attribute: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attribute)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [item.decode() for item in value]
    return value


def _cast_outputs(graph: onnx.GraphProto) -> list[str]:
    return [n.output[0] for n in graph.node if n.op_type == "Cast" and n.input[0] == graph.input[0].name]


def _link(attributes: dict[str, Any], graph: onnx.GraphProto, *, classifier: bool) -> Link:
    transform = attributes.get("post_transform", "NONE")
    if transform not in POST_TRANSFORMS or (transform == "LOGISTIC" and not classifier):
        raise ValueError(f"post_transform {transform!r} is not a link forklift.ml predicts")
    following = [LINK_NODES[n.op_type] for n in graph.node if n.op_type in LINK_NODES]
    if len(following) + (transform != "NONE") > 1:
        raise ValueError("more than one link (post_transform and a Sigmoid, Softmax or Exp node)")
    if transform != "NONE":
        return POST_TRANSFORMS[transform] or Link.IDENTITY
    return following[0] if following else Link.IDENTITY


def _trees(
    attributes: dict[str, Any], comparison: Comparison, *, classifier: bool
) -> tuple[list[Tree], np.ndarray, bool]:
    """The trees with their leaves' values, the base margin, and whether a two-class classifier scores only one class
    (ONNX Runtime's "binary case": its probabilities are ``[1 - p, p]``)."""
    prefix = "class" if classifier else "target"
    aggregate = attributes.get("aggregate_function", "SUM")
    if aggregate not in ("SUM", "AVERAGE"):
        raise ValueError(f"aggregate_function {aggregate!r}: only SUM and AVERAGE add trees")
    weights = np.asarray(_either(attributes, f"{prefix}_weights"), dtype=np.float64)
    outputs = np.asarray(attributes.get(f"{prefix}_ids", []), dtype=np.int64)
    if classifier:
        n_outputs = len(attributes.get("classlabels_int64s", attributes.get("classlabels_strings", [])))
    else:
        n_outputs = int(attributes.get("n_targets", 1))
    base = np.asarray(_either(attributes, "base_values"), dtype=np.float64)
    two_classes = classifier and n_outputs == 2 and len(np.unique(outputs)) == 1
    if two_classes:  # one score; ONNX Runtime adds the second base value to it when there are two
        outputs = np.zeros_like(outputs)
        base = base[-1:] if len(base) else np.zeros(1)
        n_outputs = 1
    elif len(base) == 0:
        base = np.zeros(n_outputs)
    if len(base) != n_outputs or (len(outputs) and outputs.max() >= n_outputs):
        raise ValueError(
            f"{len(base)} base values and {prefix} ids up to {outputs.max(initial=0)} for {n_outputs} outputs"
        )
    tree_ids = np.asarray(attributes["nodes_treeids"], dtype=np.int64)
    count = len(np.unique(tree_ids))
    if aggregate == "AVERAGE":
        weights = weights / count
    leaf_tree = np.asarray(attributes[f"{prefix}_treeids"], dtype=np.int64)
    leaf_node = np.asarray(attributes[f"{prefix}_nodeids"], dtype=np.int64)
    trees = [
        _tree(attributes, comparison, tree_ids == tree_id, leaf_tree == tree_id, leaf_node, outputs, weights)
        for tree_id in np.unique(tree_ids)
    ]
    return trees, base, two_classes


def _comparison_of(modes: list[str]) -> Comparison:
    """``<=`` when every split is ``<=`` or ``>`` (read as it is written, as LightGBM's are), else ``<``."""
    return Comparison.LESS_OR_EQUAL if set(modes) <= {"LEAF", "BRANCH_LEQ", "BRANCH_GT"} else Comparison.LESS


def _either(attributes: dict[str, Any], name: str) -> Any:
    return attributes.get(name, attributes.get(f"{name}_as_tensor", []))


def _tree(
    attributes: dict[str, Any],
    comparison: Comparison,
    mine: np.ndarray,
    my_leaves: np.ndarray,
    leaf_node: np.ndarray,
    outputs: np.ndarray,
    weights: np.ndarray,
) -> Tree:
    """One tree, its nodes renumbered breadth-first from the root (parents before children)."""
    ids = np.asarray(attributes["nodes_nodeids"], dtype=np.int64)[mine]
    modes = np.asarray(attributes["nodes_modes"])[mine]
    true = np.asarray(attributes["nodes_truenodeids"], dtype=np.int64)[mine]
    false = np.asarray(attributes["nodes_falsenodeids"], dtype=np.int64)[mine]
    tracks = np.asarray(attributes.get("nodes_missing_value_tracks_true", np.zeros(len(mine))), dtype=bool)[mine]
    thresholds = np.asarray(_either(attributes, "nodes_values"), dtype=np.float32)[mine]
    features = np.asarray(attributes["nodes_featureids"], dtype=np.int64)[mine]
    where = {int(node): index for index, node in enumerate(ids)}
    unknown = {m for m in modes if m not in ("LEAF", "BRANCH_LT", "BRANCH_LEQ", "BRANCH_GT", "BRANCH_GTE")}
    if unknown:
        raise ValueError(f"{sorted(unknown)[0]} splits (categories) are not read: only <, <=, > and >= thresholds")
    children = {int(c) for m, t, f in zip(modes, true, false, strict=True) if m != "LEAF" for c in (t, f)}
    roots = [node for node in ids.tolist() if node not in children]
    if len(roots) != 1 or any(int(c) not in where for c in children):
        raise ValueError("a tree whose nodes do not form one tree (a missing node, or more than one root)")
    order, new = [roots[0]], {roots[0]: 0}
    for node in order:  # breadth-first: the list grows as it is read
        index = where[node]
        if modes[index] != "LEAF":
            for child in (int(true[index]), int(false[index])):
                new[child] = len(order)
                order.append(child)
    columns = sorted(set(outputs[my_leaves].tolist())) or [0]
    size = len(order)
    tree: dict[str, np.ndarray] = {
        "feature": np.full(size, -1, dtype=np.int64),
        "threshold": np.zeros(size, dtype=np.float32),
        "left": np.zeros(size, dtype=np.int64),
        "right": np.zeros(size, dtype=np.int64),
        "missing_left": np.zeros(size, dtype=bool),
    }
    values = np.zeros((size, len(columns)))
    for position, node in enumerate(order):
        index = where[node]
        mode = modes[index]
        if mode == "LEAF":
            continue
        threshold = thresholds[index]
        if (mode in ("BRANCH_LEQ", "BRANCH_GT")) != (comparison is Comparison.LESS_OR_EQUAL):  # x <= t: x < next(t)
            threshold = np.nextafter(threshold, np.float32(np.inf if comparison is Comparison.LESS else -np.inf))
        below, above = (
            (true[index], false[index]) if mode in ("BRANCH_LT", "BRANCH_LEQ") else (false[index], true[index])
        )
        tree["feature"][position] = features[index]
        tree["threshold"][position] = threshold
        tree["left"][position], tree["right"][position] = new[int(below)], new[int(above)]
        tree["missing_left"][position] = bool(tracks[index]) == (mode in ("BRANCH_LT", "BRANCH_LEQ"))
    for leaf, output, weight in zip(leaf_node[my_leaves], outputs[my_leaves], weights[my_leaves], strict=True):
        if int(leaf) not in new:
            raise ValueError(f"a leaf weight for node {leaf}, which is not in its tree")
        values[new[int(leaf)], columns.index(int(output))] += weight
    return Tree(**tree, values=values, gain=np.zeros(size), outputs=tuple(columns))


def _input_width(value: onnx.ValueInfoProto, trees: list[Tree]) -> int:
    dims = value.type.tensor_type.shape.dim
    if len(dims) == 2 and dims[1].HasField("dim_value"):
        return int(dims[1].dim_value)
    return max((int(t.feature.max()) + 1 for t in trees), default=1)


def _fourier(graph: onnx.GraphProto) -> FourierTerm:
    arrays = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    return FourierTerm(weights=arrays["rff_weights"], offset=arrays["rff_offset"], coef=arrays["rff_coef"])


def _check_on_onnx_runtime(path: Path, model: onnx.ModelProto, trees: ReadTrees) -> None:
    """ONNX Runtime's predictions of the file against the ensemble's, on rows at every threshold's sides."""
    ensemble = trees.ensemble
    rows = _probe_rows(ensemble)
    _, ours = ensemble.predict(rows)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # a converter's declared output shapes ONNX Runtime warns of are not the user's
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime's Fail, InvalidGraph, ...: its first line says why
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: ONNX Runtime cannot load this graph: {said}") from exc
    feed = session.get_inputs()[0]
    data = rows.astype(np.float64) if feed.type == "tensor(double)" else rows
    if model.graph.name == FORKLIFT_GRAPH:
        theirs = session.run([PREDICTION], {feed.name: data})[0]
    else:
        theirs = _foreign_prediction(session.run(None, {feed.name: data}), trees)
    theirs = np.asarray(theirs, dtype=np.float64).reshape(ours.shape)
    worst = float(np.abs(theirs - ours).max(initial=0.0))
    if not np.allclose(theirs, ours, rtol=AGREEMENT, atol=AGREEMENT):
        raise ValueError(
            f"{path}: forklift.ml reads these trees otherwise than ONNX Runtime runs them (predictions differ by up to "
            f"{worst:.3g}): not imported"
        )


def _foreign_prediction(results: list[Any], trees: ReadTrees) -> np.ndarray:
    """The probabilities (a tensor, or ZipMap's list of maps, in label order), or the regression's values."""
    if not trees.classification:
        return np.asarray(results[-1])
    scores = results[-1]
    if isinstance(scores, list):  # ZipMap: one {label: probability} per row
        labels = trees.labels.tolist() if trees.labels is not None else []
        return np.array([[row[label] for label in labels] for row in scores])
    return np.asarray(scores)


def _probe_rows(ensemble: TreeEnsemble) -> np.ndarray:
    """Rows whose every feature is one of its thresholds, a float32 either side of one, or missing."""
    rng = np.random.default_rng(0)
    rows = np.zeros((PROBE_ROWS, ensemble.n_features), dtype=np.float32)
    for feature in range(ensemble.n_features):
        cuts = np.concatenate([t.threshold[t.feature == feature] for t in ensemble.trees] + [np.zeros(0, np.float32)])
        if not len(cuts):
            continue
        sides = np.concatenate(
            [cuts, np.nextafter(cuts, np.float32(-np.inf)), np.nextafter(cuts, np.float32(np.inf)), [np.nan]]
        ).astype(np.float32)
        rows[:, feature] = rng.choice(sides, size=PROBE_ROWS)
    if ensemble.fourier is not None:  # ridge rounds read every feature and no missing value
        rows = np.nan_to_num(rows, nan=0.0)
    return rows
