"""PMML tree models as a :class:`TreeEnsemble`: forklift's own exports, and the shapes other tools write them in.

What is read (PMML 4.x): a ``TreeModel``, or a ``MiningModel`` whose ``Segmentation`` sums (``sum``) or averages
(``average``) tree models, nested, or chains them (``modelChain``: segments that publish a sum of trees as an output
field, then a ``RegressionModel`` that adds those fields times their coefficients to its intercepts and applies its
``normalizationMethod``: ``none``, ``logit``, ``exp``, or ``softmax`` over the classes). A regression's leaves hold
``score``; a classification tree's hold a ``ScoreDistribution`` (``probability``, else the record counts' shares).
``Targets`` may rescale a regression (``rescaleFactor``, ``rescaleConstant``). The features are the data
dictionary's fields other than the target, in its order (forklift's own are ``x0 ..``).

A split is two child nodes, the first with a ``SimplePredicate`` (``lessThan``, ``lessOrEqual``, ``greaterThan``,
``greaterOrEqual``) and the second with ``True`` or the opposite predicate. A PMML engine compares doubles, so a
threshold ``t`` becomes the float32 that splits float32 values as ``t`` splits them (``x < t`` is ``x < `` the least
float32 at or above ``t``). A missing value goes to the node's ``defaultChild`` (``missingValueStrategy=
"defaultChild"``), to a child whose predicate holds for it (``True``, an ``isMissing`` in an ``or``, a ``surrogate``
ending in ``True``), or else to the second child: there the file itself gives no prediction, and forklift.ml gives
the second child's.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from forklift.ml.tree_ensemble import Link, ReadTrees, Tree, TreeEnsemble
from forklift.ml.tree_pmml import label_text

NORMALIZATIONS = {"none": Link.IDENTITY, "logit": Link.LOGISTIC, "exp": Link.EXP, "softmax": Link.SOFTMAX}
BELOW = {"lessThan", "lessOrEqual"}
OPPOSITE = {"lessThan": "greaterOrEqual", "lessOrEqual": "greaterThan", "greaterThan": "lessOrEqual"}
OPPOSITE["greaterOrEqual"] = "lessThan"
PREDICATES = ("True", "False", "SimplePredicate", "CompoundPredicate", "SimpleSetPredicate")
STRATEGIES = ("none", "defaultChild", "nullPrediction")  # the others give a node's own score, or blend children


@dataclass
class _Sum:
    """Trees whose leaves (one value, or one per class) add up, times ``scale``, plus ``base``."""

    trees: list[Tree] = field(default_factory=list)
    base: float = 0.0

    def scaled(self, factor: float, *, column: int | None = None) -> _Sum:
        """The sum times ``factor`` (its one-valued trees adding to output ``column`` where given)."""
        trees = [
            replace(t, values=t.values * factor, outputs=t.outputs if column is None else (column,)) for t in self.trees
        ]
        return _Sum(trees, self.base * factor)


def read_pmml_file(path: Path) -> ReadTrees:
    """The tree ensemble in the PMML file ``path``, or one line saying what in it is not read."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise ValueError(f"{path}: not a PMML document (XML: {exc})") from exc
    for element in root.iter():
        element.tag = element.tag.rpartition("}")[2]  # PMML 4.1 .. 4.4 namespaces alike
    if root.tag != "PMML":
        raise ValueError(f"{path}: not a PMML document (its root is <{root.tag}>)")
    try:
        document = _Document(root)
        return replace(document.read(), feature_names=tuple(document.names))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


class _Document:
    def __init__(self, root: ET.Element) -> None:
        models = [child for child in root if child.tag.endswith("Model")]
        if len(models) != 1 or models[0].tag not in ("TreeModel", "MiningModel"):
            raise ValueError(f"holds {', '.join(m.tag for m in models) or 'no model'}: expected one tree model")
        self.model = models[0]
        targets = [f.get("name") for f in self.model.iterfind("MiningSchema/MiningField") if _is_target(f)]
        fields = root.findall("DataDictionary/DataField")
        self.target = next((f for f in fields if f.get("name") in targets), None)
        features = [f for f in fields if f is not self.target]
        categorical = [f.get("name") for f in features if f.get("optype") == "categorical"]
        if categorical:
            raise ValueError(f"the field {categorical[0]!r} is categorical: only numbers are read")
        self.names = [str(f.get("name")) for f in features]
        self.features = {name: index for index, name in enumerate(self.names)}
        for derived in root.iter("DerivedField"):  # a cast of a field (JPMML's "float(x1)") is that field
            ref = derived.find("FieldRef")
            if ref is None or ref.get("field") not in self.features:
                raise ValueError(f"the derived field {derived.get('name')!r} is not a field read as it is")
            self.features[str(derived.get("name"))] = self.features[str(ref.get("field"))]
        self.ours = any(a.get("name") == "forklift.ml" for a in root.iterfind("Header/Application"))
        self.replacements: dict[int, float] = {}  # a feature's missingValueReplacement, where a MiningField gives one
        for mining_field in root.iter("MiningField"):
            name, value = mining_field.get("name"), mining_field.get("missingValueReplacement")
            if value is None or name not in self.features:
                continue
            index = self.features[str(name)]
            if self.replacements.setdefault(index, float(value)) != float(value):
                raise ValueError(f"the field {name!r} has two missingValueReplacements")

    def read(self) -> ReadTrees:
        classification = self.model.get("functionName") == "classification"
        labels = self._labels() if classification else None
        chain = _chain(self.model)
        if chain is not None:
            fields, last = chain
            per_output, link = self._linear(last, {name: self._sum(m) for name, m in fields.items()}, labels)
            if labels is not None:
                return self._chained_classifier(per_output, link, labels, last)
            ensemble = self._ensemble(per_output[0].trees, [per_output[0].base], link)
        elif labels is not None:
            shares = self._shares(self.model, labels)
            ensemble = self._ensemble(shares.trees, [0.0] * len(labels), Link.IDENTITY)
        else:
            total = self._sum(self.model)
            ensemble = self._ensemble(total.trees, [total.base], Link.IDENTITY)
        return ReadTrees(ensemble, classification, labels)

    def _ensemble(self, trees: list[Tree], base: list[float], link: Link, *, two_classes: bool = False) -> TreeEnsemble:
        return TreeEnsemble(
            trees=tuple(trees),
            n_features=len(set(self.features.values())),
            base=np.asarray(base, dtype=np.float64),
            link=link,
            two_classes=two_classes,
            absent_is_missing=self.ours,  # another tool's model reads a sparse matrix's absent entries as zeros
        )

    def _labels(self) -> np.ndarray:
        if self.target is None or not self.target.findall("Value"):
            raise ValueError("a classifier whose target field lists no classes (Value elements)")
        values = [str(v.get("value")) for v in self.target.findall("Value")]
        kind = self.target.get("dataType", "string")
        if kind == "integer":
            return np.array([int(v) for v in values])
        if kind == "boolean":
            return np.array([v.strip().lower() in ("true", "1") for v in values])
        return np.array([float(v) for v in values]) if kind in ("double", "float") else np.array(values)

    def _sum(self, model: ET.Element) -> _Sum:
        """A model that scores one number: a regression tree, or a sum or average of such."""
        if model.tag == "TreeModel":
            total = _Sum([self._tree(model, lambda leaf: [_number(leaf, "score")])])
        elif model.tag == "MiningModel" and _method(model) in ("sum", "average"):
            parts = [self._sum(segment_model) for segment_model in _segments(model)]
            total = _Sum([t for p in parts for t in p.trees], sum(p.base for p in parts))
            if _method(model) == "average":
                total = total.scaled(1.0 / max(len(parts), 1))
        else:
            raise ValueError(
                f"a {model.tag} ({_method(model) or model.get('functionName')}) where a sum of trees is read"
            )
        return self._rescaled(model, total)

    def _rescaled(self, model: ET.Element, total: _Sum) -> _Sum:
        target = model.find("Targets/Target")
        if target is None:
            return total
        scaled = total.scaled(float(target.get("rescaleFactor", "1")))
        return _Sum(scaled.trees, scaled.base + float(target.get("rescaleConstant", "0")))

    def _shares(self, model: ET.Element, labels: np.ndarray) -> _Sum:
        """A classifier whose leaves hold the classes' shares: a tree, or an average of such trees."""
        if model.tag == "TreeModel":
            return _Sum([self._tree(model, lambda leaf: _distribution(leaf, labels))])
        if model.tag == "MiningModel" and _method(model) == "average":
            trees = [t for segment_model in _segments(model) for t in self._shares(segment_model, labels).trees]
            return _Sum(trees).scaled(1.0 / max(len(trees), 1))
        raise ValueError(f"a classifier's {model.tag} ({_method(model)}): expected a tree or an average of trees")

    def _chained_classifier(
        self, per_output: list[_Sum], link: Link, labels: np.ndarray, last: ET.Element
    ) -> ReadTrees:
        if link is Link.SOFTMAX or (link is Link.IDENTITY and len(labels) > 2):  # each class's own table
            trees = [t for s in per_output for t in s.trees]
            return ReadTrees(self._ensemble(trees, [s.base for s in per_output], link), True, labels)
        if len(labels) != 2 or link not in (Link.LOGISTIC, Link.IDENTITY):
            raise ValueError(f"{len(labels)} classes under a {link.value} normalization: expected two, or softmax")
        first = per_output[0]  # the first table's class; the other's probability is 1 - its
        if _table_for(last, labels)[0] == 0:  # it scores the first class: the second's is sigmoid(-m) or 1 - m
            first = first.scaled(-1.0)
            first.base += 1.0 if link is Link.IDENTITY else 0.0
        return ReadTrees(self._ensemble(first.trees, [first.base], link, two_classes=True), True, labels)

    def _linear(self, model: ET.Element, sums: dict[str, _Sum], labels: np.ndarray | None) -> tuple[list[_Sum], Link]:
        """A RegressionModel's tables over the chain's fields: one sum per table (per class, in its label order)."""
        if model.tag != "RegressionModel":
            raise ValueError(f"a model chain that ends in a {model.tag}: expected a RegressionModel")
        method = model.get("normalizationMethod", "none")
        if method not in NORMALIZATIONS:
            raise ValueError(f"normalizationMethod {method!r}: expected one of {', '.join(NORMALIZATIONS)}")
        tables = model.findall("RegressionTable")
        order = _table_for(model, labels) if labels is not None else [0]
        per_class = labels is not None and (method == "softmax" or (method == "none" and len(labels) > 2))
        per_output = [_Sum() for _ in (labels if labels is not None and per_class else tables)]
        for table, column in zip(tables, order, strict=True):
            if labels is not None and not per_class and table is not tables[0]:
                continue  # two classes: the other's probability follows from the first's
            slot = column if per_class else 0
            total = _Sum(base=float(table.get("intercept", "0")))
            for predictor in table:
                if predictor.tag != "NumericPredictor" or predictor.get("exponent", "1") not in ("1", "1.0"):
                    raise ValueError(f"a {predictor.tag} in a RegressionTable: only NumericPredictors of the chain")
                name = str(predictor.get("name"))
                if name not in sums:
                    raise ValueError(f"the RegressionTable reads {name!r}, which no segment of the chain publishes")
                part = sums[name].scaled(float(predictor.get("coefficient", "1")), column=slot)
                total = _Sum(total.trees + part.trees, total.base + part.base)
            per_output[slot] = total
        return per_output, NORMALIZATIONS[method]

    def _tree(self, model: ET.Element, leaf_values: Callable[[ET.Element], list[float]]) -> Tree:
        root = model.find("Node")
        if root is None:
            raise ValueError("a TreeModel without a Node")
        strategy = model.get("missingValueStrategy", "none")
        if strategy not in STRATEGIES:
            raise ValueError(
                f"missingValueStrategy={strategy!r}: read are {', '.join(STRATEGIES)} (forklift.ml's trees send a "
                "missing value on to one leaf)"
            )
        nodes: list[dict[str, Any]] = []
        self._node(root, model, leaf_values, nodes)
        width = len(nodes[0]["values"])
        return Tree(
            feature=np.array([n["feature"] for n in nodes], dtype=np.int64),
            threshold=np.array([n["threshold"] for n in nodes], dtype=np.float32),
            left=np.array([n["left"] for n in nodes], dtype=np.int64),
            right=np.array([n["right"] for n in nodes], dtype=np.int64),
            missing_left=np.array([n["missing_left"] for n in nodes], dtype=bool),
            values=np.array([n["values"] for n in nodes], dtype=np.float64).reshape(len(nodes), width),
            gain=np.zeros(len(nodes)),
            outputs=tuple(range(width)),
        )

    def _node(
        self,
        node: ET.Element,
        model: ET.Element,
        leaf_values: Callable[[ET.Element], list[float]],
        nodes: list[dict[str, Any]],
    ) -> int:
        """Append ``node`` and its subtree (parents first); its index."""
        index = len(nodes)
        children = node.findall("Node")
        record: dict[str, Any] = {"feature": -1, "threshold": 0.0, "left": 0, "right": 0, "missing_left": False}
        nodes.append(record)
        if not children:
            record["values"] = leaf_values(node)
            return index
        if len(children) != 2:
            raise ValueError(f"{_name(node)} has {len(children)} children: only binary splits are read")
        predicates = [_predicate(child) for child in children]
        field_name, operator, threshold = self._split(node, predicates)
        below_child, above_child = children if operator in BELOW else children[::-1]
        feature, cut = self.features[field_name], _float32_cut(threshold, operator)
        record["feature"], record["threshold"] = feature, cut
        if feature in self.replacements:  # a missing value is read as the field's replacement
            record["missing_left"] = bool(np.float32(self.replacements[feature]) < cut)
        else:
            record["missing_left"] = self._missing_child(node, children, predicates, model) is below_child
        record["left"] = self._node(below_child, model, leaf_values, nodes)
        record["right"] = self._node(above_child, model, leaf_values, nodes)
        record["values"] = [0.0] * len(nodes[-1]["values"])  # a split holds no value: as wide as its leaves
        return index

    def _split(self, node: ET.Element, predicates: list[_Predicate]) -> tuple[str, str, float]:
        first, second = (predicate.test for predicate in predicates)
        if first is None:
            raise ValueError(f"{_name(node)}: its first child's predicate is True: a split tests a threshold first")
        field_name, operator, threshold = first
        if second is not None and second != (field_name, OPPOSITE[operator], threshold):
            raise ValueError(f"{_name(node)}: its children do not split one field at one value")
        if field_name not in self.features:
            raise ValueError(f"{_name(node)} splits {field_name!r}, which is not a field of the data")
        return field_name, operator, threshold

    @staticmethod
    def _missing_child(
        node: ET.Element, children: list[ET.Element], predicates: list[_Predicate], model: ET.Element
    ) -> ET.Element:
        """The child a missing value goes to; where the file gives no prediction for it, the second."""
        if model.get("missingValueStrategy") == "defaultChild" and node.get("defaultChild") is not None:
            chosen = [child for child in children if child.get("id") == node.get("defaultChild")]
            if chosen:
                return chosen[0]
        holding = [child for child, read in zip(children, predicates, strict=True) if read.holds_when_missing]
        if holding:
            return holding[0]
        if model.get("noTrueChildStrategy") == "returnLastPrediction":
            raise ValueError(
                f"{_name(node)}: a missing value there scores the node itself (noTrueChildStrategy="
                "returnLastPrediction): forklift.ml's trees send every row on to a leaf"
            )
        return children[1]


def _is_target(mining_field: ET.Element) -> bool:
    return mining_field.get("usageType") in ("target", "predicted")


def _method(model: ET.Element) -> str | None:
    segmentation = model.find("Segmentation")
    return None if segmentation is None else segmentation.get("multipleModelMethod")


def _segments(model: ET.Element) -> Iterator[ET.Element]:
    for segment in model.iterfind("Segmentation/Segment"):
        if segment.find("True") is None:
            raise ValueError(f"{_name(segment, 'segment')} applies to some rows only: every segment must be True")
        inner = [child for child in segment if child.tag.endswith("Model")]
        if len(inner) != 1:
            raise ValueError(f"{_name(segment, 'segment')} holds {len(inner)} models")
        yield inner[0]


def _chain(model: ET.Element) -> tuple[dict[str, ET.Element], ET.Element] | None:
    """A modelChain's published fields (the model computing each) and its last model."""
    if model.tag != "MiningModel" or _method(model) != "modelChain":
        return None
    models = list(_segments(model))
    fields: dict[str, ET.Element] = {}
    for inner in models[:-1]:
        published = [
            o.get("name") for o in inner.iterfind("Output/OutputField") if o.get("feature") == "predictedValue"
        ]
        if len(published) != 1:
            raise ValueError(f"a {inner.tag} in the model chain publishes {len(published)} predicted values")
        fields[str(published[0])] = inner
    return fields, models[-1]


def _table_for(model: ET.Element, labels: np.ndarray | None) -> list[int]:
    """Each RegressionTable's class, as an index into ``labels``."""
    names = [label_text(label) for label in (labels if labels is not None else [])]
    order = []
    for table in model.findall("RegressionTable"):
        category = str(table.get("targetCategory"))
        if category not in names:
            raise ValueError(f"a RegressionTable for class {category!r}, not a class of the target")
        order.append(names.index(category))
    return order


@dataclass(frozen=True)
class _Predicate:
    """A child node's predicate: the threshold it tests (None for ``True``), and whether it holds for a missing
    value (``True``, ``or`` with ``isMissing``, a surrogate ending in ``True``)."""

    test: tuple[str, str, float] | None
    holds_when_missing: bool


def _predicate(child: ET.Element) -> _Predicate:
    found = next((p for p in child if p.tag in PREDICATES), None)
    if found is not None and found.tag == "True":
        return _Predicate(None, True)
    if found is not None and found.tag == "SimplePredicate" and found.get("operator") in OPPOSITE:
        return _Predicate(_threshold(found), False)
    parts = list(found) if found is not None else []
    kind = None if found is None else found.get("booleanOperator")
    if found is not None and found.tag == "CompoundPredicate" and len(parts) == 2:
        first, second = parts
        if kind == "surrogate" and first.get("operator") in OPPOSITE and second.tag in ("True", "False"):
            return _Predicate(_threshold(first), second.tag == "True")
        missing, test = (first, second) if first.get("operator") == "isMissing" else (second, first)
        one_field = missing.get("field") == test.get("field")
        if kind == "or" and missing.get("operator") == "isMissing" and test.get("operator") in OPPOSITE and one_field:
            return _Predicate(_threshold(test), True)
    said = "no predicate" if found is None else f"{found.tag} {kind or found.get('operator') or ''}".strip()
    raise ValueError(
        f"{_name(child)}: {said}: read are thresholds (lessThan, lessOrEqual, greaterThan, greaterOrEqual), True, "
        "or(isMissing, a threshold on its field) and surrogate(a threshold, True or False)"
    )


def _threshold(predicate: ET.Element) -> tuple[str, str, float]:
    return str(predicate.get("field")), str(predicate.get("operator")), float(str(predicate.get("value")))


def _name(element: ET.Element, kind: str = "node") -> str:
    return f"{kind} {element.get('id')}" if element.get("id") is not None else f"a {kind} without an id"


def _float32_cut(threshold: float, operator: str) -> np.float32:
    """The float32 ``c`` such that ``x < c`` holds for a float32 ``x`` exactly when the double comparison sends it
    below: ``x < t`` (and not ``x >= t``) for ``lessThan``; ``x <= t`` for ``lessOrEqual``."""
    nearest = np.float32(threshold)
    if operator in ("lessThan", "greaterOrEqual"):  # the least float32 at or above t
        return nearest if float(nearest) >= threshold else np.nextafter(nearest, np.float32(np.inf))
    at_or_below = nearest if float(nearest) <= threshold else np.nextafter(nearest, np.float32(-np.inf))
    return np.nextafter(at_or_below, np.float32(np.inf))  # x <= t32 is x < the next float32


def _number(node: ET.Element, name: str) -> float:
    value = node.get(name)
    if value is None:
        raise ValueError(f"leaf node {node.get('id', '?')} has no {name}")
    return float(value)


def _distribution(leaf: ET.Element, labels: np.ndarray) -> list[float]:
    """A classification leaf's share of each class: its ``probability``s, else its record counts' shares, else all
    on its ``score``."""
    names = [label_text(label) for label in labels]
    shares = np.zeros(len(names))
    entries = leaf.findall("ScoreDistribution")
    for entry in entries:
        if str(entry.get("value")) not in names:
            raise ValueError(
                f"leaf node {leaf.get('id', '?')} scores {entry.get('value')!r}, not a class of the target"
            )
        weight = entry.get("probability", entry.get("recordCount", "0"))
        shares[names.index(str(entry.get("value")))] = float(weight)
    if not entries:
        shares[names.index(str(leaf.get("score")))] = 1.0
    elif all(entry.get("probability") is None for entry in entries) and shares.sum() > 0:
        shares /= shares.sum()
    return shares.tolist()
