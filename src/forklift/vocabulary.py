"""The words every stage shares, each defined once as a typed name: what a model does (`Task`), how its files hold it
(`ModelFormat`), which engine runs it (`Runtime`) and in which number format (`Precision`), the parts of a data set
(`Split`), how an image is fitted to the network's input (`ResizeMode`), the data-set formats forklift reads and
writes (`DataFormat`) and the optimisers a training run can use (`Optimizer`).

They are `StrEnum`s: a member is its string (`Task.DETECT == "detect"`), so JSON files, forklift.json and
command-line options keep their plain words, while the code names a value that a type checker can follow.
This module imports nothing heavy, so the CLI can offer the choices without loading a stage.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from forklift.errors import ForkliftError


class Task(StrEnum):
    """What a model answers and what a data set holds."""

    DETECT = "detect"  # boxes with labels
    CLASSIFY = "classify"  # one label per image
    SEGMENT = "segment"  # a label per pixel
    STYLE = "style"  # image in, styled image out
    TABULAR = "tabular"  # a row of features in, a class or a value out (forklift.ml's models)


class TabularTask(StrEnum):
    """What a tabular model (`forklift ml fit --task`) predicts from a row."""

    CLASSIFY = "classify"  # a class
    REGRESS = "regress"  # a value


class ModelFormat(StrEnum):
    """How a model directory's files hold its model (DESIGN.md, "Model directory"); `forklift.runtime.formats` has
    one entry per format: its files, engines, summary and export."""

    DARKNET = "darknet"  # .cfg, .weights, .names
    CAFFE = "caffe"  # .prototxt, .caffemodel, .labels
    STYLE = "style"  # a fast-neural-style network's PyTorch state dict (.pth or .model)
    ONNX = "onnx"  # .onnx and a labels file
    TWO_STAGE = "two_stage"  # a torchvision detector forklift exported: .onnx, .pt, labels, forklift.json "two_stage"
    TABULAR = "tabular"  # a forklift.ml model: model.onnx, the estimator's .pkl, forklift.json "tabular"


class Runtime(StrEnum):
    """The inference engines behind `forklift.runtime.base.Predictor`."""

    ONNX = "onnx"  # ONNX Runtime
    OPENVINO = "openvino"  # OpenVINO, float32
    TORCH = "torch"  # PyTorch, the network built from the Darknet cfg
    OPENCV = "opencv"  # OpenCV's DNN module (Caffe, and the Darknet reference)


class Precision(StrEnum):
    """The number format an engine computes in (`--precision`)."""

    F32 = "f32"  # float32: the default, scores as PyTorch gives them
    BF16 = "bf16"  # bfloat16 inside OpenVINO, on CPUs with AVX512-BF16 or AMX
    INT8 = "int8"  # the model directory's quantised graph, made and checked by `forklift models quantize`


class Split(StrEnum):
    """The part of a data set an image belongs to."""

    TRAIN = "train"  # trained on
    VAL = "val"  # measured after epochs, the best epoch chosen by it
    TEST = "test"  # kept apart, for a final measure


class ResizeMode(StrEnum):
    """How an image is fitted to the network's input size."""

    LETTERBOX = "letterbox"  # keep the aspect ratio, pad with gray
    STRETCH = "stretch"  # resize each side to the input, as Darknet's own `detect` does


class DataFormat(StrEnum):
    """Data-set formats of other tools that `forklift data import` reads and `export` writes."""

    COCO = "coco"
    VOC = "voc"
    YOLO = "yolo"
    POWERAI = "powerai"
    MASKS = "masks"  # a folder of images/, masks/ (PNG) and classes.txt


class Optimizer(StrEnum):
    """How a training run steps its weights: torch's optimisers under the names the tuning menus of old used."""

    SGD = "sgd"  # plain gradient descent
    MOMENTUM = "momentum"  # gradient descent with Nesterov momentum
    ADAM = "adam"
    ADAMW = "adamw"  # Adam with decoupled weight decay (the default)
    RMSPROP = "rmsprop"  # with momentum
    ADAGRAD = "adagrad"
    ADADELTA = "adadelta"


class LrScaling(StrEnum):
    """How the learning rate follows the global batch of a data-parallel run (`forklift.train.lr_scaling`)."""

    AUTO = "auto"  # linear for the gradient-descent optimisers, square root for the adaptive ones
    LINEAR = "linear"
    SQRT = "sqrt"
    NONE = "none"


class PretrainedKind(StrEnum):
    """What pulling a catalogue model gives: a ready model directory (Darknet, style) or a weights file to train
    from (a torchvision detector, segmenter or backbone)."""

    DARKNET = "darknet"
    STYLE = "style"
    WEIGHTS = "weights"


Word = TypeVar(
    "Word",
    Task,
    TabularTask,
    ModelFormat,
    Runtime,
    Precision,
    Split,
    ResizeMode,
    DataFormat,
    Optimizer,
    LrScaling,
    PretrainedKind,
)


def words(kind: type[StrEnum]) -> tuple[str, ...]:
    """The plain strings of an enum, in definition order: the choices a command-line option offers."""
    return tuple(member.value for member in kind)


def word(kind: type[Word], value: object, *, where: str) -> Word:
    """`value` (a string from a file, an option or a caller) as a member of `kind`, or one line naming where it
    came from, the value and the words allowed."""
    if value not in words(kind):
        raise ForkliftError(f"{where} must be one of {', '.join(words(kind))}, not {value!r}")
    return kind(value)
