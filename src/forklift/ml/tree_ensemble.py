"""Every tree model forklift.ml holds, trained or imported, as one engine-free value: node arrays per tree, the
base margin, the link, and the ONNX graph that predicts it.

Trained models (XGBoost's learner) and imported ones (XGBoost and LightGBM files) are read into a
:class:`TreeEnsemble`, and every prediction goes through its ONNX graph on ONNX Runtime: what `export_model`
writes is the very graph that predicted in the estimator, and a model predicts the same whichever tool grew it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime
import scipy.sparse as sp
from onnx import TensorProto, helper, numpy_helper

ONNX_OPSET = 17
ONNX_ML_OPSET = 3
ONNX_IR_VERSION = 8  # what every ONNX Runtime since 1.14 reads
INPUT = "X"
MARGIN = "margin"
PREDICTION = "prediction"
BOUNDS = (("zero", 0.0), ("one", 1.0))  # the scalars the link's nodes may use
SPARSE_BLOCK_ROWS = 65_536  # rows of a sparse matrix made dense at a time for prediction


class Comparison(enum.Enum):
    """How a node's feature value is compared with its threshold to go to the left child."""

    LESS = "BRANCH_LT"  # XGBoost
    LESS_OR_EQUAL = "BRANCH_LEQ"  # LightGBM


class Link(enum.Enum):
    """What turns the summed margin into the prediction."""

    IDENTITY = "identity"
    LOGISTIC = "logistic"
    SOFTMAX = "softmax"
    EXP = "exp"


@dataclass(frozen=True, eq=False)
class Tree:
    """One tree as node arrays. Node ``i`` is a leaf where ``feature[i] == -1``; otherwise a row goes to
    ``left[i]`` when its value compares true with ``threshold[i]`` (or is missing and ``missing_left[i]``), else to
    ``right[i]``. ``values[i]`` is a leaf's contribution to the ensemble's ``outputs``; ``gain[i]`` the loss
    reduction of a split (for feature importances)."""

    feature: np.ndarray  # int64 (n_nodes,)
    threshold: np.ndarray  # float32 (n_nodes,)
    left: np.ndarray  # int64 (n_nodes,)
    right: np.ndarray  # int64 (n_nodes,)
    missing_left: np.ndarray  # bool (n_nodes,)
    values: np.ndarray  # float64 (n_nodes, len(outputs))
    gain: np.ndarray  # float64 (n_nodes,)
    outputs: tuple[int, ...]

    @property
    def leaves(self) -> np.ndarray:
        return np.flatnonzero(self.feature < 0)

    @property
    def depth(self) -> int:
        depth = np.zeros(len(self.feature), dtype=np.int64)
        for node in range(len(self.feature)):  # parents come before their children in every format read
            if self.feature[node] >= 0:
                depth[self.left[node]] = depth[self.right[node]] = depth[node] + 1
        return int(depth.max())


@dataclass(frozen=True, eq=False)
class FourierTerm:
    """SnapBoost's ridge rounds, summed: ``cos(X weights + offset) @ coef`` adds to the margin (each round's random
    Fourier features side by side, their ridge coefficients scaled by the learning rate and the map's norm)."""

    weights: np.ndarray  # float32 (n_features, n_components)
    offset: np.ndarray  # float32 (n_components,)
    coef: np.ndarray  # float32 (n_components, n_outputs)


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """The trees' summed leaf values plus ``base`` are the margin; ``link`` makes the prediction. A binary
    classifier (``two_classes``) predicts ``[1 - p, p]`` from its one output ``p``."""

    trees: tuple[Tree, ...]
    n_features: int
    base: np.ndarray  # float64 (n_outputs,)
    link: Link
    comparison: Comparison = Comparison.LESS
    two_classes: bool = False
    fourier: FourierTerm | None = None  # ridge rounds, which read every feature: no missing values
    absent_is_missing: bool = True  # a sparse matrix's absent entries: missing (XGBoost's reading), or zeros
    _session: list[onnxruntime.InferenceSession] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def n_outputs(self) -> int:
        return len(self.base)

    def feature_importances(self) -> np.ndarray:
        """Each feature's share of the splits' total gain (zeros when no tree splits)."""
        totals = np.zeros(self.n_features)
        for tree in self.trees:
            splits = tree.feature >= 0
            np.add.at(totals, tree.feature[splits], tree.gain[splits])
        return totals / totals.sum() if totals.sum() > 0 else totals

    def to_onnx(self) -> onnx.ModelProto:
        """The graph: ``X`` float32 [N, F] (NaN = missing) to ``margin`` [N, n_outputs] and ``prediction``."""
        return _graph(self)

    def predict(self, X: np.ndarray | sp.spmatrix, *, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """The margin and the prediction of each row (a sparse matrix's absent entries are missing values)."""
        session = self._session_for(threads)
        margins, predictions = [], []
        for block in _dense_blocks(X, absent=np.nan if self.absent_is_missing else 0.0):
            margin, prediction = session.run([MARGIN, PREDICTION], {INPUT: block})
            margins.append(margin)
            predictions.append(prediction)
        return np.concatenate(margins).astype(np.float64), np.concatenate(predictions).astype(np.float64)

    def _session_for(self, threads: int) -> onnxruntime.InferenceSession:
        if not self._session or self._session[0].get_session_options().intra_op_num_threads != threads:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            self._session[:] = [
                onnxruntime.InferenceSession(
                    self.to_onnx().SerializeToString(), options, providers=["CPUExecutionProvider"]
                )
            ]
        return self._session[0]

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_session"] = []  # rebuilt from the trees on first use
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)


@dataclass(frozen=True)
class ReadTrees:
    """What a model file another tool wrote holds: the ensemble, whether it classifies, its classes' labels where
    the file names them (in output order), and its features' names where it has them."""

    ensemble: TreeEnsemble
    classification: bool
    labels: np.ndarray | None = None
    feature_names: tuple[str, ...] = ()


def _dense_blocks(X: np.ndarray | sp.spmatrix, *, absent: float) -> Iterator[np.ndarray]:
    """float32 C-ordered blocks of rows; a sparse matrix's absent entries become ``absent`` (NaN, missing, as XGBoost
    reads them; 0.0 as LightGBM and scikit-learn do), a block at a time."""
    if not sp.issparse(X):
        yield np.ascontiguousarray(X, dtype=np.float32)
        return
    X = sp.csr_matrix(X)
    for start in range(0, max(X.shape[0], 1), SPARSE_BLOCK_ROWS):
        rows = X[start : start + SPARSE_BLOCK_ROWS]
        block = np.full(rows.shape, absent, dtype=np.float32)
        counts = np.diff(rows.indptr)
        block[np.repeat(np.arange(rows.shape[0]), counts), rows.indices] = rows.data
        yield block


def _graph(ensemble: TreeEnsemble) -> onnx.ModelProto:
    names = ["nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes"]
    names += ["nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true"]
    names += ["target_treeids", "target_nodeids", "target_ids", "target_weights"]
    nodes: dict[str, list[Any]] = {name: [] for name in names}
    for tree_id, tree in enumerate(ensemble.trees):
        leaf = tree.feature < 0
        count = len(tree.feature)
        nodes["nodes_treeids"] += [tree_id] * count
        nodes["nodes_nodeids"] += list(range(count))
        nodes["nodes_featureids"] += np.where(leaf, 0, tree.feature).tolist()
        nodes["nodes_values"] += np.where(leaf, 0.0, tree.threshold).astype(np.float32).tolist()
        nodes["nodes_modes"] += ["LEAF" if is_leaf else ensemble.comparison.value for is_leaf in leaf]
        nodes["nodes_truenodeids"] += np.where(leaf, 0, tree.left).tolist()
        nodes["nodes_falsenodeids"] += np.where(leaf, 0, tree.right).tolist()
        nodes["nodes_missing_value_tracks_true"] += (tree.missing_left & ~leaf).astype(int).tolist()
        for node in np.flatnonzero(leaf):
            for column, output in enumerate(tree.outputs):
                nodes["target_treeids"].append(tree_id)
                nodes["target_nodeids"].append(int(node))
                nodes["target_ids"].append(output)
                nodes["target_weights"].append(float(tree.values[node, column]))
    n_outputs = ensemble.n_outputs
    ensemble_node = helper.make_node(
        "TreeEnsembleRegressor",
        [INPUT],
        [MARGIN if ensemble.fourier is None else "tree_margin"],
        domain="ai.onnx.ml",
        n_targets=n_outputs,
        aggregate_function="SUM",
        post_transform="NONE",
        base_values=[float(b) for b in ensemble.base],
    )
    ensemble_node.attribute.extend(helper.make_attribute(name, values) for name, values in nodes.items())
    graph_nodes = [ensemble_node]
    initializers: list[onnx.TensorProto] = []
    if ensemble.fourier is not None:
        fourier = ensemble.fourier
        initializers += [
            numpy_helper.from_array(fourier.weights.astype(np.float32), "rff_weights"),
            numpy_helper.from_array(fourier.offset.astype(np.float32), "rff_offset"),
            numpy_helper.from_array(fourier.coef.astype(np.float32), "rff_coef"),
        ]
        graph_nodes += [
            helper.make_node("MatMul", [INPUT, "rff_weights"], ["projected"]),
            helper.make_node("Add", ["projected", "rff_offset"], ["shifted"]),
            helper.make_node("Cos", ["shifted"], ["waves"]),
            helper.make_node("MatMul", ["waves", "rff_coef"], ["ridge_margin"]),
            helper.make_node("Add", ["tree_margin", "ridge_margin"], [MARGIN]),
        ]
    graph_nodes += _link_nodes(ensemble)
    used = {name for node in graph_nodes for name in node.input}
    initializers += [helper.make_tensor(name, TensorProto.FLOAT, [], [value]) for name, value in BOUNDS if name in used]
    graph = helper.make_graph(
        graph_nodes,
        "forklift_tree_ensemble",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [None, ensemble.n_features])],
        [
            helper.make_tensor_value_info(MARGIN, TensorProto.FLOAT, [None, n_outputs]),
            helper.make_tensor_value_info(
                PREDICTION, TensorProto.FLOAT, [None, 2 if ensemble.two_classes else n_outputs]
            ),
        ],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET), helper.make_opsetid("ai.onnx.ml", ONNX_ML_OPSET)],
        producer_name="forklift.ml",
    )
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model)
    return model


def _link_nodes(ensemble: TreeEnsemble) -> list[onnx.NodeProto]:
    """From the margin to the prediction: the link, then ``[1 - p, p]`` for a binary classifier. A classifier's
    summed class frequencies (trees and forests: each leaf a float32 share) are clipped to [0, 1], so that a sum of
    1.0000001 does not make the other class's probability negative."""
    linked = "linked" if ensemble.two_classes else PREDICTION
    frequencies = ensemble.link is Link.IDENTITY and (ensemble.two_classes or ensemble.n_outputs > 1)
    if frequencies:
        nodes = [helper.make_node("Clip", [MARGIN, "zero", "one"], [linked])]
    elif ensemble.link is Link.IDENTITY:
        nodes = [helper.make_node("Identity", [MARGIN], [linked])]
    elif ensemble.link is Link.LOGISTIC:
        nodes = [helper.make_node("Sigmoid", [MARGIN], [linked])]
    elif ensemble.link is Link.SOFTMAX:
        nodes = [helper.make_node("Softmax", [MARGIN], [linked], axis=1)]
    else:
        nodes = [helper.make_node("Exp", [MARGIN], [linked])]
    if ensemble.two_classes:
        nodes += [
            helper.make_node("Sub", ["one", linked], ["other"]),
            helper.make_node("Concat", ["other", linked], [PREDICTION], axis=1),
        ]
    return nodes
