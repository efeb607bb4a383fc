"""forklift.ml's tabular models (`forklift ml fit`): model.onnx, the estimator's file and forklift.json's
"tabular" settings. They answer rows of features, not images: `forklift serve` routes JSON rows and v2 tensors to
`forklift.runtime.tabular`, and the image predictor refuses them in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory, tabular_settings
from forklift.runtime.formats.onnx import copy_graph
from forklift.runtime.formats.registry import FormatEntry, register
from forklift.runtime.summary import ModelFacts
from forklift.vocabulary import ModelFormat, Runtime, Task

if TYPE_CHECKING:
    from forklift.runtime.base import PredictOptions, Predictor


def _predictor(model: ModelDirectory, runtime: Runtime, options: PredictOptions) -> Predictor:
    raise ForkliftError(
        f"{model.path}: a tabular model answers rows of features, not images: use 'forklift ml predict' or "
        "POST JSON rows to 'forklift serve'"
    )


def _summary(model: ModelDirectory) -> ModelFacts:
    import onnx
    from onnx import numpy_helper

    settings = tabular_settings(model.config, model.path)
    proto = onnx.load(str(model.files["onnx"]))
    parameters = sum(int(numpy_helper.to_array(t).size) for t in proto.graph.initializer)
    for node in proto.graph.node:  # a tree ensemble keeps its nodes in attributes, not initializers
        parameters += sum(len(a.floats) + len(a.ints) for a in node.attribute)
    return ModelFacts(
        task=Task.TABULAR,
        classes=len(settings.classes),
        input_width=settings.width,
        input_height=None,
        parameters=parameters,
        flops=None,
    )


ENTRY = register(
    FormatEntry(
        ModelFormat.TABULAR, runtimes=(Runtime.ONNX,), predictor=_predictor, summary=_summary, export=copy_graph
    )
)
