"""A tabular model directory (forklift.ml's) loaded to answer rows: its graph on ONNX Runtime, torch-free.

The graph takes float32 rows as its settings encode them and gives ``prediction``: class scores (the
predicted class is the highest) or one value a row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory, tabular_settings
from forklift.model_files.tabular import INPUT, PREDICTION, Scalar, TabularSettings, encode_records
from forklift.vision.results import Timing


@dataclass(frozen=True)
class RowsAnswer:
    """The answer for a batch of rows: the predicted class or value of each, the class scores (classifiers), and
    the time it took (a served batch's requests each report their batch's, as images do)."""

    predictions: list[Scalar]
    scores: np.ndarray | None  # float32 [rows, classes]; probabilities where the settings say so
    timing: Timing = field(default_factory=Timing)

    def rows(self, start: int, stop: int) -> RowsAnswer:
        scores = None if self.scores is None else self.scores[start:stop]
        return RowsAnswer(self.predictions[start:stop], scores, self.timing)


class TabularModel:
    """A tabular model directory's graph, loaded once, answering encoded rows."""

    def __init__(self, model: ModelDirectory, *, threads: int | None = None) -> None:
        import onnxruntime

        self.model = model
        self.settings: TabularSettings = tabular_settings(model.config, model.path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or 0
        options.inter_op_num_threads = 1
        try:
            self.session = onnxruntime.InferenceSession(
                str(model.files["onnx"]), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # ONNX Runtime's own errors for a file it cannot load
            raise ForkliftError(f"{model.files['onnx']}: ONNX Runtime cannot load it: {exc}") from exc
        width = self.session.get_inputs()[0].shape[1]
        if isinstance(width, int) and width != self.settings.width:
            raise ForkliftError(
                f"{model.path}: the graph takes {width} columns, but forklift.json's features encode to "
                f"{self.settings.width}"
            )

    def encode(self, records: list[Any]) -> np.ndarray:
        """JSON rows (objects by feature name or arrays) as the graph's input; bad ones are one line each."""
        return encode_records(self.settings, records)

    def answer(self, rows: np.ndarray) -> RowsAnswer:
        """Predictions for encoded rows (float32 [N, width])."""
        if rows.ndim != 2 or rows.shape[1] != self.settings.width:
            raise ForkliftError(f"rows of shape {list(rows.shape)}: this model takes [N, {self.settings.width}]")
        start = time.perf_counter()
        (output,) = self.session.run([PREDICTION], {INPUT: np.ascontiguousarray(rows, dtype=np.float32)})
        timing = Timing(inference=time.perf_counter() - start)
        if not self.settings.classification:
            return RowsAnswer([float(v) for v in output[:, 0]], None, timing)
        classes = self.settings.classes
        return RowsAnswer([classes[i] for i in output.argmax(axis=1)], output, timing)
