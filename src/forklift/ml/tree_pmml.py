"""A :class:`TreeEnsemble` as PMML 4.4, for PMML engines (PMML4S, JPMML, ...) to score as forklift predicts.

The document is one ``MiningModel`` whose ``modelChain`` computes each output's margin, then the prediction, in
PMML's own terms (``sum`` segmentation, a regression's normalization) rather than a classifier's tree votes, which
cannot add margins before a link:

- one segment per output: a ``MiningModel`` that sums (``sum``) the regression ``TreeModel`` of every tree adding
  to that output, published as the output field ``margin{k}``. A multi-output tree (its leaves add to several
  outputs) is written once per output, with that output's leaf values: PMML trees score one number;
- a last segment: a ``RegressionModel`` whose tables add the base margin (``intercept``) to the margins and
  whose ``normalizationMethod`` is the link (``none``, ``logit``, ``softmax``, ``exp``). A classifier has one
  table per class; a binary one (``two_classes``) writes class 0's table as the complement of class 1's (``-m``
  under ``logit``, ``1 - m`` under ``none``), so it holds whether an engine reads the last table or takes
  ``1 - p``.

A split sends a row left when its value, rounded to float32, is ``< threshold`` (XGBoost) or ``<= threshold``
(LightGBM). A PMML engine compares doubles, so each split is written at the double where float32 rounding crosses
the threshold (the midpoint to the neighbouring float32, ``lessThan`` or ``lessOrEqual`` as the tie rounds): every
double then goes the way forklift sends it, not only those that are float32 already. A missing value takes the
node's ``defaultChild`` (``missingValueStrategy="defaultChild"``), the branch its tree sends missing values to.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from forklift.ml.tree_ensemble import Comparison, Link, Tree, TreeEnsemble

NAMESPACE = "http://www.dmg.org/PMML-4_4"
TARGET = "y"
NORMALIZATION = {Link.IDENTITY: "none", Link.LOGISTIC: "logit", Link.SOFTMAX: "softmax", Link.EXP: "exp"}
BELOW, AT_OR_BELOW = ("lessThan", "greaterOrEqual"), ("lessOrEqual", "greaterThan")  # left's and right's predicates


def write_pmml(ensemble: TreeEnsemble, path: Path, *, classes: Sequence[object] | None) -> None:
    """Write ``ensemble`` as PMML: a classifier when ``classes`` (its labels, in output order) are given, else a
    regressor of one output. Features are ``x0 .. x{F-1}``; the target is ``y``."""
    _check(ensemble, classes)
    features = [f"x{index}" for index in range(ensemble.n_features)]
    root = ET.Element("PMML", xmlns=NAMESPACE, version="4.4")
    header = ET.SubElement(root, "Header", description="forklift.ml tree ensemble")
    ET.SubElement(header, "Application", name="forklift.ml")
    root.append(_data_dictionary(features, classes))
    function = "regression" if classes is None else "classification"
    model = ET.SubElement(root, "MiningModel", functionName=function)
    model.append(_mining_schema(features, target=True))
    model.append(_outputs(classes))
    chain = ET.SubElement(model, "Segmentation", multipleModelMethod="modelChain")
    margins: dict[int, str] = {}  # an output no tree adds to is its base margin alone
    for output in range(ensemble.n_outputs):
        trees = [tree for tree in ensemble.trees if output in tree.outputs]
        if trees:
            margins[output] = f"margin{output}"
            chain.append(_segment(margins[output], _margin_model(trees, output, ensemble.comparison, features)))
    chain.append(_segment("link", _link_model(ensemble, margins, classes)))
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _check(ensemble: TreeEnsemble, classes: Sequence[object] | None) -> None:
    """A regressor predicts one number; a classifier one probability per class."""
    if classes is None:
        fits = ensemble.n_outputs == 1 and ensemble.link is not Link.SOFTMAX
        what = "a regressor"
    else:
        fits = len(classes) >= 2 and len(classes) == (2 if ensemble.two_classes else ensemble.n_outputs)
        what = f"a classifier of {len(classes)} classes"
    if not fits:
        raise ValueError(
            f"PMML: {what} does not predict from {ensemble.n_outputs} outputs and a {ensemble.link.value} link"
        )


def _number(value: float) -> str:
    """The double's shortest exact decimal (a float32 widens exactly to a double)."""
    return repr(float(value))


def _data_type(classes: Sequence[object]) -> str:
    """The target's PMML type, so that an engine returns labels of the classes' own type (True and False came back
    as the words 'True' and 'False', predicting strings where the model was fitted on booleans)."""
    kind = np.asarray(classes).dtype.kind
    return "integer" if kind in "iu" else "double" if kind == "f" else "boolean" if kind == "b" else "string"


def label_text(label: object) -> str:
    """A class as PMML writes it: XML Schema's `true` and `false` for booleans, else as Python prints it."""
    return str(label).lower() if isinstance(label, bool | np.bool_) else str(label)


def _data_dictionary(features: list[str], classes: Sequence[object] | None) -> ET.Element:
    dictionary = ET.Element("DataDictionary", numberOfFields=str(len(features) + 1))
    for name in features:
        ET.SubElement(dictionary, "DataField", name=name, optype="continuous", dataType="double")
    if classes is None:
        ET.SubElement(dictionary, "DataField", name=TARGET, optype="continuous", dataType="double")
        return dictionary
    target = ET.SubElement(dictionary, "DataField", name=TARGET, optype="categorical", dataType=_data_type(classes))
    for label in classes:
        ET.SubElement(target, "Value", value=label_text(label))
    return dictionary


def _mining_schema(fields: list[str], *, target: bool) -> ET.Element:
    schema = ET.Element("MiningSchema")
    if target:
        ET.SubElement(schema, "MiningField", name=TARGET, usageType="target")
    for name in fields:
        ET.SubElement(schema, "MiningField", name=name)
    return schema


def _outputs(classes: Sequence[object] | None) -> ET.Element:
    """What an engine returns: the predicted value, and each class's probability for a classifier."""
    output = ET.Element("Output")
    predicted = {"name": f"predicted_{TARGET}", "feature": "predictedValue"}
    if classes is None:
        ET.SubElement(output, "OutputField", predicted, optype="continuous", dataType="double")
        return output
    ET.SubElement(output, "OutputField", predicted, optype="categorical", dataType=_data_type(classes))
    for label in classes:
        ET.SubElement(
            output,
            "OutputField",
            name=f"probability_{label_text(label)}",
            optype="continuous",
            dataType="double",
            feature="probability",
            value=label_text(label),
        )
    return output


def _segment(name: str, model: ET.Element) -> ET.Element:
    segment = ET.Element("Segment", id=name)
    ET.SubElement(segment, "True")
    segment.append(model)
    return segment


def _margin_model(trees: list[Tree], output: int, comparison: Comparison, features: list[str]) -> ET.Element:
    """The sum of the trees' values for ``output``, published as ``margin{output}`` for the link."""
    model = ET.Element("MiningModel", functionName="regression")
    model.append(_mining_schema(features, target=False))
    margin = ET.SubElement(model, "Output")
    ET.SubElement(
        margin,
        "OutputField",
        name=f"margin{output}",
        optype="continuous",
        dataType="double",
        feature="predictedValue",
        isFinalResult="false",
    )
    sum_ = ET.SubElement(model, "Segmentation", multipleModelMethod="sum")
    for index, tree in enumerate(trees):
        sum_.append(_segment(str(index), _tree_model(tree, tree.outputs.index(output), comparison, features)))
    return model


def _tree_model(tree: Tree, column: int, comparison: Comparison, features: list[str]) -> ET.Element:
    model = ET.Element(
        "TreeModel", functionName="regression", missingValueStrategy="defaultChild", splitCharacteristic="binarySplit"
    )
    used = [features[index] for index in np.unique(tree.feature[tree.feature >= 0])]
    model.append(_mining_schema(used or features, target=False))  # a MiningSchema holds at least one field
    model.append(_node(tree, 0, column, comparison, ET.Element("True")))
    return model


def _node(tree: Tree, index: int, column: int, comparison: Comparison, predicate: ET.Element) -> ET.Element:
    """Node ``index`` and its subtree, reached when ``predicate`` holds."""
    node = ET.Element("Node", id=str(index))
    node.append(predicate)
    if tree.feature[index] < 0:
        node.set("score", _number(tree.values[index, column]))
        return node
    left, right = int(tree.left[index]), int(tree.right[index])
    node.set("defaultChild", str(left if tree.missing_left[index] else right))
    field = f"x{tree.feature[index]}"
    threshold, operators = _double_split(np.float32(tree.threshold[index]), comparison)
    for child, operator in zip((left, right), operators, strict=True):
        condition = ET.Element("SimplePredicate", field=field, operator=operator, value=_number(threshold))
        node.append(_node(tree, child, column, comparison, condition))
    return node


def _double_split(threshold: np.float32, comparison: Comparison) -> tuple[float, tuple[str, str]]:
    """The double and predicates that split doubles as float32 rounding and the comparison split them: below
    the midpoint to the float32 under (``<``) or over (``<=``) the threshold; at the midpoint as it rounds (ties to
    even, as numpy and the CPU round)."""
    toward = -np.inf if comparison is Comparison.LESS else np.inf
    neighbour = np.nextafter(threshold, np.float32(toward))
    midpoint = (float(threshold) + float(neighbour)) / 2.0  # exact: a float32's neighbours differ in one more bit
    if not np.isfinite(midpoint):
        return float(threshold), BELOW if comparison is Comparison.LESS else AT_OR_BELOW
    tie_rounds_to_threshold = np.float32(midpoint) == threshold
    if comparison is Comparison.LESS:  # x32 < t: a tie that rounds to t is not below it
        return midpoint, BELOW if tie_rounds_to_threshold else AT_OR_BELOW
    return midpoint, AT_OR_BELOW if tie_rounds_to_threshold else BELOW


def _link_model(ensemble: TreeEnsemble, margins: dict[int, str], classes: Sequence[object] | None) -> ET.Element:
    """base + margin through the link: one table for a regressor, one per class for a classifier."""
    function = "regression" if classes is None else "classification"
    model = ET.Element("RegressionModel", functionName=function, normalizationMethod=NORMALIZATION[ensemble.link])
    model.append(_mining_schema(list(margins.values()), target=True))
    if classes is None:
        model.append(_table(margins.get(0), ensemble.base[0], 1.0))
    elif ensemble.two_classes:
        model.append(_table(margins.get(0), ensemble.base[0], 1.0, category=classes[1]))
        complement = 1.0 if ensemble.link is Link.IDENTITY else 0.0  # 1 - p, or sigmoid(-m) = 1 - sigmoid(m)
        model.append(_table(margins.get(0), complement - ensemble.base[0], -1.0, category=classes[0]))
    else:
        for output, (base, label) in enumerate(zip(ensemble.base, classes, strict=True)):
            model.append(_table(margins.get(output), base, 1.0, category=label))
    return model


def _table(margin: str | None, intercept: float, coefficient: float, *, category: object = None) -> ET.Element:
    table = ET.Element("RegressionTable", intercept=_number(intercept))
    if category is not None:
        table.set("targetCategory", label_text(category))
    if margin is not None:
        ET.SubElement(table, "NumericPredictor", name=margin, coefficient=_number(coefficient))
    return table
