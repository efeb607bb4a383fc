"""A fitted linear model as an ONNX graph: ``X`` float32 [N, F] to ``margin`` (the linear function, one column
per one-vs-rest model) and ``prediction``: class scores ([1 - p, p] or the normalised one-vs-rest probabilities
for logistic regression, [-s, s] or the scores for the SVM) or the value of a regression, [N, 1].

The graph holds what predicts: the rows' normalisation (``normalize=True``) and the random Fourier feature map
(``kernel="rbf"``: ``cos(X W + b) * sqrt(2 / n_components)``) before the product.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from forklift.ml.tree_ensemble import INPUT, MARGIN, ONNX_IR_VERSION, ONNX_OPSET, PREDICTION

NORM_FLOOR = 1e-30  # a zero row stays zero under normalisation, as scikit-learn's normalize leaves it


class LinearOutput(enum.Enum):
    """What a linear model's graph answers."""

    VALUE = "value"  # a regression's value
    SCORES = "scores"  # an SVM's class scores: [-s, s] for two classes
    PROBABILITIES = "probabilities"  # logistic regression's, normalised over the one-vs-rest models


def linear_graph(model: object, *, output: LinearOutput) -> onnx.ModelProto:
    """The graph of a fitted LogisticRegression, SupportVectorMachine or LinearRegression of forklift.ml."""
    coef = np.atleast_2d(np.asarray(model.coef_, dtype=np.float32))  # type: ignore[attr-defined]
    intercept = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float32))  # type: ignore[attr-defined]
    width = int(model.n_features_in_)  # type: ignore[attr-defined]
    tensors: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def constant(name: str, value: np.ndarray) -> str:
        """An initializer: integers stay int64 (axes), the rest float32."""
        dtype = np.int64 if np.issubdtype(np.asarray(value).dtype, np.integer) else np.float32
        tensors.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    features = INPUT
    if getattr(model, "normalize", False):
        nodes += [
            helper.make_node("ReduceL2", [INPUT], ["norm"], keepdims=1, axes=[1]),
            helper.make_node("Max", ["norm", constant("floor", np.array(NORM_FLOOR))], ["safe_norm"]),
            helper.make_node("Div", [INPUT, "safe_norm"], ["normalized"]),
        ]
        features = "normalized"
    if getattr(model, "kernel", "linear") == "rbf":
        mapping = model.feature_map_  # type: ignore[attr-defined]
        nodes += [
            helper.make_node("MatMul", [features, constant("rff_weights", mapping.random_weights_)], ["projected"]),
            helper.make_node("Add", ["projected", constant("rff_offset", mapping.random_offset_)], ["shifted"]),
            helper.make_node("Cos", ["shifted"], ["waves"]),
            helper.make_node(
                "Mul", ["waves", constant("rff_scale", np.array(np.sqrt(2.0 / mapping.n_components)))], ["mapped"]
            ),
        ]
        features = "mapped"
    nodes += [
        helper.make_node("MatMul", [features, constant("coef", coef.T)], ["product"]),
        helper.make_node("Add", ["product", constant("intercept", intercept)], [MARGIN]),
    ]
    outputs = 1 if output is LinearOutput.VALUE else (2 if coef.shape[0] == 1 else coef.shape[0])
    nodes += _prediction_nodes(output, coef.shape[0], constant)
    graph = helper.make_graph(
        nodes,
        "forklift_linear_model",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [None, width])],
        [
            helper.make_tensor_value_info(MARGIN, TensorProto.FLOAT, [None, coef.shape[0]]),
            helper.make_tensor_value_info(PREDICTION, TensorProto.FLOAT, [None, outputs]),
        ],
        initializer=tensors,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)], producer_name="forklift.ml")
    proto.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(proto)
    return proto


def _prediction_nodes(
    output: LinearOutput, columns: int, constant: Callable[[str, np.ndarray], str]
) -> list[onnx.NodeProto]:
    """From the margin to the prediction, by what the model answers and its number of one-vs-rest columns."""
    if output is LinearOutput.VALUE:
        return [helper.make_node("Identity", [MARGIN], [PREDICTION])]
    if output is LinearOutput.SCORES:
        if columns > 1:
            return [helper.make_node("Identity", [MARGIN], [PREDICTION])]
        return [
            helper.make_node("Neg", [MARGIN], ["negated"]),
            helper.make_node("Concat", ["negated", MARGIN], [PREDICTION], axis=1),
        ]
    nodes = [helper.make_node("Sigmoid", [MARGIN], ["probability"])]
    if columns > 1:  # one-vs-rest: each model's probability, normalised to sum to one
        return [
            *nodes,
            helper.make_node("ReduceSum", ["probability", constant("row_axis", np.array([1]))], ["total"], keepdims=1),
            helper.make_node("Div", ["probability", "total"], [PREDICTION]),
        ]
    return [
        *nodes,
        helper.make_node("Sub", [constant("one", np.array(1.0)), "probability"], ["other"]),
        helper.make_node("Concat", ["other", "probability"], [PREDICTION], axis=1),
    ]
