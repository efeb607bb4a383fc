"""Caffe nets for OpenCV DNN: py-faster-rcnn's Python proposal layer made loadable, classes checked.

Faster R-CNN models trained with py-faster-rcnn ship a test prototxt whose proposal layer is Python code
(`rpn.proposal_layer.ProposalLayer`). OpenCV 4.x has the same computation built in as a `Proposal` layer, so
the net is rewritten in memory to use it; the user's files are never changed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import cv2
import yaml

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory
from forklift.model_files.prototxt import Message, Value, format_prototxt, read_prototxt

PROPOSAL_LAYER = ("rpn.proposal_layer", "ProposalLayer")  # python_param module, layer
BACKGROUND = "__background__"

# The proposal layer's settings in py-faster-rcnn: anchors from generate_anchors (base 16, ratios 0.5/1/2,
# scales 8/16/32 unless param_str says otherwise) and the TEST config (RPN_MIN_SIZE, RPN_PRE_NMS_TOP_N,
# RPN_POST_NMS_TOP_N, RPN_NMS_THRESH). OpenCV's CPU Proposal layer reads min_size but does not use it.
_PARAM_STR_DEFAULTS: dict[str, object] = {
    "feat_stride": 16,
    "ratios": [0.5, 1, 2],
    "scales": [8, 16, 32],
}
_TEST_SETTINGS: list[tuple[str, Value]] = [
    ("pre_nms_topn", 6000),
    ("post_nms_topn", 300),
    ("nms_thresh", 0.7),
]


def _param_str(layer: Message, where: str) -> dict[str, object]:
    """py-faster-rcnn reads param_str as YAML: `'feat_stride': 16`, optionally `'scales'` (`'ratios'` in forks)."""
    text = str(layer.block("python_param").get("param_str", ""))
    try:
        settings = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ForkliftError(f"{where}: param_str {text!r} is not YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(settings, dict):
        raise ForkliftError(f"{where}: param_str {text!r} is not a mapping of settings")
    unknown = sorted(set(settings) - set(_PARAM_STR_DEFAULTS))
    if unknown:
        raise ForkliftError(f"{where}: param_str setting {unknown[0]!r} has no OpenCV equivalent")
    return {**_PARAM_STR_DEFAULTS, **settings}


def _numbers(value: object, key: str, where: str) -> list[int | float]:
    values = value if isinstance(value, list) else [value]
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not values or len(numbers) != len(values):
        raise ForkliftError(f"{where}: param_str {key!r} must be a number or a list of numbers, not {value!r}")
    return numbers


def _proposal_param(layer: Message, where: str) -> Message:
    settings = _param_str(layer, where)
    feat_stride = settings["feat_stride"]
    if isinstance(feat_stride, bool) or not isinstance(feat_stride, int):
        raise ForkliftError(f"{where}: param_str 'feat_stride' must be an integer, not {feat_stride!r}")
    return Message(
        [
            ("feat_stride", feat_stride),
            ("base_size", 16),
            ("min_size", 16),
            *(("ratio", ratio) for ratio in _numbers(settings["ratios"], "ratios", where)),
            *(("scale", scale) for scale in _numbers(settings["scales"], "scales", where)),
            *_TEST_SETTINGS,
        ]
    )


def _opencv_layer(layer: Message, source: str) -> Message:
    """A Python proposal layer as OpenCV's Proposal layer (same name, bottoms, tops); others unchanged."""
    if layer.get("type") != "Python":
        return layer
    python = layer.block("python_param")
    module, class_name = str(python.get("module", "")), str(python.get("layer", ""))
    where = f"{source}: layer {layer.get('name')!r}"
    if (module, class_name) != PROPOSAL_LAYER:
        raise ForkliftError(
            f"{where} runs Python code (module {module!r}, layer {class_name!r}) that OpenCV cannot run;"
            " only py-faster-rcnn's rpn.proposal_layer has a built-in equivalent"
        )
    fields: list[tuple[str, Value]] = []
    for key, value in layer.fields:
        if key == "type":
            fields.append((key, "Proposal"))
        elif key == "python_param":
            fields.append(("proposal_param", _proposal_param(layer, where)))
        else:
            fields.append((key, value))
    return Message(fields)


def has_python_layers(net: Message) -> bool:
    return any(layer.get("type") == "Python" for layer in net.messages("layer"))


def rewrite_python_proposal(net: Message, source: str = "<prototxt>") -> Message:
    """The net with py-faster-rcnn's Python proposal layer replaced by OpenCV's; other Python layers refused."""
    return Message(
        [
            (key, _opencv_layer(value, source) if key == "layer" and isinstance(value, Message) else value)
            for key, value in net.fields
        ]
    )


def num_classes(net: Message, source: str = "<prototxt>") -> int:
    """Classes of the detector, background included: num_output of the InnerProduct the last Softmax reads."""
    producers: dict[str, Message] = {}
    for layer in net.messages("layer"):
        bottoms = set(layer.get_all("bottom"))
        producers.update({str(top): layer for top in layer.get_all("top") if top not in bottoms})
    for layer in reversed(net.messages("layer")):
        scores = producers.get(str(layer.get("bottom")))
        if layer.get("type") == "Softmax" and scores is not None and scores.get("type") == "InnerProduct":
            outputs = scores.block("inner_product_param").get("num_output")
            if isinstance(outputs, int):
                return outputs
    raise ForkliftError(f"{source}: no classifier (a Softmax over an InnerProduct) to count the classes by")


def output_layer(net: Message, blob: str, source: str = "<prototxt>") -> str:
    """The layer to ask OpenCV for to get Caffe blob `blob`: OpenCV's forward takes layer names, not tops."""
    writers = [layer for layer in net.messages("layer") if blob in layer.get_all("top")]
    if not writers:
        raise ForkliftError(f"{source}: no layer produces the blob {blob!r} that a Faster R-CNN test net has")
    return str(writers[-1].get("name"))


def class_names(model: ModelDirectory, classes: int) -> list[str]:
    """Names by class index, 0 being the background, which the labels file may list first or leave out."""
    labels = model.labels
    if len(labels) == classes:
        return labels
    if len(labels) == classes - 1:
        return [BACKGROUND, *labels]
    raise ForkliftError(
        f"{model.files['labels']}: {len(labels)} labels but the network has {classes} classes"
        f" (background included); give {classes - 1} names, or {classes} with the background first"
    )


def _read_net(prototxt: Path, caffemodel: Path, shown: Path) -> cv2.dnn.Net:
    try:
        return cv2.dnn.readNetFromCaffe(str(prototxt), str(caffemodel))
    except cv2.error as exc:
        reason = str(getattr(exc, "err", "") or exc).strip().splitlines()[0]
        raise ForkliftError(f"{shown}: OpenCV cannot load this net with {caffemodel.name}: {reason}") from exc


def load_caffe_net(model: ModelDirectory, net: Message | None = None) -> cv2.dnn.Net:
    """The model's net in OpenCV, via a rewritten copy of the prototxt when it has a Python layer.

    `net` is the parsed prototxt when the caller has it already.
    """
    prototxt, caffemodel = model.files["prototxt"], model.files["caffemodel"]
    net = net if net is not None else read_prototxt(prototxt)
    if not has_python_layers(net):
        return _read_net(prototxt, caffemodel, prototxt)
    text = format_prototxt(rewrite_python_proposal(net, str(prototxt)))
    with tempfile.TemporaryDirectory(prefix="forklift-caffe-") as folder:
        rewritten = Path(folder) / prototxt.name
        rewritten.write_text(text, encoding="utf-8")
        return _read_net(rewritten, caffemodel, prototxt)
