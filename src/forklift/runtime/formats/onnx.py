"""ONNX (a detector or classifier whose graph decodes as forklift's Darknet exports do, a segmentation net, an
image-to-image net): `.onnx` and a labels file, with forklift.json's task where the graph cannot say it. ONNX
Runtime is fastest here on f32; OpenVINO runs bf16 and INT8."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from forklift.atomic import written_atomically
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.formats.registry import FormatEntry, graph_predictor, register
from forklift.runtime.summary import ModelFacts
from forklift.vocabulary import ModelFormat, Runtime, Task

if TYPE_CHECKING:
    from forklift.runtime.base import PredictOptions, Predictor


def _predictor(model: ModelDirectory, runtime: Runtime, options: PredictOptions) -> Predictor:
    engine = graph_predictor(runtime)
    if model.config.task == Task.STYLE:
        from forklift.runtime.style import StylePredictor

        return StylePredictor(model, options, engine.network_type)
    if model.config.task == Task.SEGMENT:
        from forklift.runtime.segment import SegmentPredictor

        return SegmentPredictor(model, options, engine.network_type)
    return engine(model, options)


def _summary(model: ModelDirectory) -> ModelFacts:
    return graph_summary(model, _predictor)


def graph_summary(model: ModelDirectory, predictor_of: Callable[..., Predictor]) -> ModelFacts:
    """The model counted from the graph ONNX Runtime runs (its own or its export): what the predictor
    `predictor_of(model, Runtime.ONNX, options)` tells (task, input size) and the values of the graph's
    initializers; FLOPs are not counted from a graph. Formats that count on PyTorch use it where torch is missing."""
    import onnx
    from onnx import numpy_helper

    from forklift.runtime.base import FixedInput, PredictOptions
    from forklift.runtime.onnx_graph import graph_path

    predictor = predictor_of(model, Runtime.ONNX, PredictOptions(threads=1))
    proto = onnx.load(str(graph_path(model)))
    return ModelFacts(
        task=predictor.task,
        classes=len(model.labels),
        input_width=predictor.input_width if isinstance(predictor, FixedInput) else None,
        input_height=predictor.input_height if isinstance(predictor, FixedInput) else None,
        parameters=sum(int(numpy_helper.to_array(t).size) for t in proto.graph.initializer),
        flops=None,
    )


def copy_graph(model: ModelDirectory, out: Path) -> Path:
    """A model that is an ONNX graph exports as a copy of it."""
    source = model.files["onnx"]
    if out.resolve() == source.resolve():
        raise ForkliftError(f"{source}: the model is this ONNX file already; give another OUT to copy it to")
    with written_atomically(out) as partial:
        shutil.copyfile(source, partial)
    return out


ENTRY = register(
    FormatEntry(
        ModelFormat.ONNX,
        runtimes=(Runtime.ONNX, Runtime.OPENVINO),
        predictor=_predictor,
        summary=_summary,
        export=copy_graph,
    )
)
