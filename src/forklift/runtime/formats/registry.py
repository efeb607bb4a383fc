"""What one model format's entry holds, and the table the format modules register their entries in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import FORMAT_FILES, FormatFiles, ModelDirectory
from forklift.runtime.summary import ModelFacts
from forklift.vocabulary import ModelFormat, Runtime

if TYPE_CHECKING:
    from forklift.runtime.base import PredictOptions, Predictor
    from forklift.runtime.onnx_graph import GraphPredictor

PredictorFactory = Callable[[ModelDirectory, Runtime, "PredictOptions"], "Predictor"]
Exporter = Callable[[ModelDirectory, Path], Path]


@dataclass(frozen=True)
class FormatEntry:
    """Everything forklift does with one format of model directory. The callables import their engines when
    called, so that the table costs nothing until a model is loaded."""

    format: ModelFormat
    runtimes: tuple[Runtime, ...]  # the engines that run it, the default (fastest measured, bench/predict.py) first
    predictor: PredictorFactory  # the engine asked for (one of `runtimes`) loaded on the model
    summary: Callable[[ModelDirectory], ModelFacts]  # what `forklift models inspect` counts
    export: Exporter | None  # the model as one ONNX file at the path given; None where nothing converts it
    no_export: str = ""  # why there is no export, said to the person who asks for one

    @property
    def files(self) -> FormatFiles:
        return FORMAT_FILES[self.format]

    @property
    def default_runtime(self) -> Runtime:
        return self.runtimes[0]


FORMATS: dict[ModelFormat, FormatEntry] = {}


def register(entry: FormatEntry) -> FormatEntry:
    """Add a format's entry (once: a second entry for a format is a programming error)."""
    if entry.format in FORMATS:
        raise ValueError(f"format {entry.format} registered twice")
    FORMATS[entry.format] = entry
    return entry


def graph_predictor(runtime: Runtime) -> type[GraphPredictor]:
    """The class that runs a Darknet-style ONNX graph (a model's own or an export) on ONNX Runtime or OpenVINO;
    its `network_type` opens any graph on that engine."""
    if runtime == Runtime.OPENVINO:
        from forklift.runtime.openvino_runtime import OpenVinoPredictor

        return OpenVinoPredictor
    if runtime == Runtime.ONNX:
        from forklift.runtime.onnx_runtime import OnnxPredictor

        return OnnxPredictor
    raise ForkliftError(f"--runtime {runtime} does not run ONNX graphs; onnx and openvino do")
