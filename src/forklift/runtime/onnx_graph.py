"""What the engines that run an ONNX graph (ONNX Runtime, OpenVINO) share: which file, and what it says of itself.

An engine opens the graph as a `Network` (one input, one output, shapes with `None` for dynamic axes, forklift's
metadata); the task, class count and input size then come from that the same way whichever engine runs it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import NamedTuple

import numpy as np

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory
from forklift.model_files.precision import int8_graph
from forklift.runtime.base import PredictOptions
from forklift.runtime.darknet_predictor import DarknetPredictor
from forklift.runtime.onnx_export import (
    EXPORTERS,
    META_CLASSES,
    META_SOURCE,
    META_TASK,
    OUTPUT_NAMES,
    exported_onnx,
    metadata,
    source_digest,
)
from forklift.vocabulary import Precision, Runtime, Task, word

Shape = list[int | None]


class Network(ABC):
    """An ONNX graph loaded by one engine (with the options' threads and spinning): what it declares, and a
    batched forward pass. Subclasses load in `__init__(path, options)` and call `declare`."""

    runtime: Runtime | None = None

    @abstractmethod
    def __init__(self, path: Path, options: PredictOptions) -> None: ...

    def declare(self, path: Path, inputs: list[Shape], outputs: dict[str, Shape], metadata: dict[str, str]) -> None:
        """Record the graph's file, its input and output shapes (None: dynamic axes) and metadata."""
        if len(inputs) != 1 or len(outputs) != 1:
            raise ForkliftError(f"{path}: expected one input and one output, found {len(inputs)} and {len(outputs)}")
        self.path, self.metadata, self.input_shape = path, metadata, inputs[0]
        ((self.output_name, self.output_shape),) = outputs.items()

    @abstractmethod
    def run(self, batch: np.ndarray) -> np.ndarray:
        """[N, C, H, W] float32 -> the graph's one output for the batch."""


def graph_path(model: ModelDirectory, precision: Precision | None = None) -> Path:
    """The ONNX file an engine runs: the directory's own or a Darknet model's export, or for INT8 the quantised
    graph (made from these very files, else an error that says to quantise again)."""
    if precision != Precision.INT8:
        return exported_onnx(model) if model.format in EXPORTERS else model.files["onnx"]
    path = int8_graph(model)
    if metadata(path).get(META_SOURCE) != source_digest(model):
        raise ForkliftError(
            f"{path}: quantised from other weights than the model's; run 'forklift models quantize' again"
        )
    return path


def input_size(model: ModelDirectory, path: Path, shape: Shape) -> tuple[int, int]:
    """The network's input width and height: from the graph when fixed, else from forklift.json."""
    fixed = [d for d in shape[2:] if d is not None]
    if len(fixed) == len(shape[2:]):
        return fixed[1], fixed[0]
    width, height = model.config.input_width, model.config.input_height
    if not (width and height):
        raise ForkliftError(f"{path}: the input size is dynamic; set input_width/input_height in forklift.json")
    return width, height


class GraphFacts(NamedTuple):
    """What a Darknet-style graph's predictor needs to know about it."""

    input_size: tuple[int, int]  # width, height
    task: Task
    classes: int


def yolo_facts(model: ModelDirectory, network: Network) -> GraphFacts:
    """(input size, task, classes) of a detector or classifier graph: metadata first, then names and shapes."""
    path, facts, out_shape = network.path, network.metadata, network.output_shape
    found = facts.get(META_TASK)
    found = found or {v: k for k, v in OUTPUT_NAMES.items()}.get(network.output_name) or model.config.task
    if found is None:
        raise ForkliftError(
            f'{path}: unknown kind of output; set "task" in forklift.json (detect: rows of '
            "cx, cy, w, h, objectness, class probabilities; classify: class probabilities)"
        )
    task = word(Task, found, where=f"{path}: the task in its metadata")
    if task == Task.SEGMENT:  # load_predictor picks the segment engine by forklift.json's task
        raise ForkliftError(f'{path}: a segmentation model; set "task": "segment" in its forklift.json')
    width_of_rows = out_shape[-1] if isinstance(out_shape[-1], int) else None
    if META_CLASSES in facts:
        classes = int(facts[META_CLASSES])
    elif width_of_rows is not None:
        classes = width_of_rows - 5 if task == Task.DETECT else width_of_rows
    else:
        raise ForkliftError(f"{path}: the number of classes is not in the output shape {out_shape}")
    return GraphFacts(input_size(model, path, network.input_shape), task, classes)


class GraphPredictor(DarknetPredictor):
    """A Darknet-style detector or classifier as an ONNX graph; subclasses say which engine opens it."""

    network_type: type[Network]

    def __init__(self, model: ModelDirectory, options: PredictOptions) -> None:
        self.network = self.network_type(graph_path(model, options.precision), options)
        super().__init__(model, options, *yolo_facts(model, self.network))

    def infer(self, tensors: list[np.ndarray]) -> list[np.ndarray]:
        return list(self.network.run(np.stack(tensors)))
