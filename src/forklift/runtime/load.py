"""Choosing and loading the engine for a model directory: the one asked for, else the fastest its format's entry
(`forklift.runtime.formats`) knows for the precision.

Engines are imported only when chosen, and this module imports none of them, so that choosing costs nothing
until a model is loaded.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from forklift.errors import ForkliftError
from forklift.runtime.formats import FORMATS, FormatEntry
from forklift.vocabulary import Precision, Runtime, word

if TYPE_CHECKING:
    from forklift.model_files.model_dir import ModelDirectory
    from forklift.runtime.base import PredictOptions, Predictor

PRECISIONS = {  # what each engine computes in; INT8 runs the model directory's quantised graph
    Runtime.OPENVINO: (Precision.F32, Precision.BF16, Precision.INT8),
    Runtime.ONNX: (Precision.F32, Precision.INT8),  # ONNX Runtime has no bf16 kernels for CPUs
    Runtime.TORCH: (Precision.F32,),
    Runtime.OPENCV: (Precision.F32,),
}


def load_predictor(
    model: ModelDirectory, runtime: Runtime | str | None = None, options: PredictOptions | None = None
) -> Predictor:
    """The engine for the model: `runtime` when given (it must run this format of model), else the fastest measured
    for its format (bench/predict.py) that computes in the precision: the options', else the model's own (f32 unless
    its forklift.json says)."""
    from forklift.model_files.precision import default_precision
    from forklift.runtime.base import PredictOptions

    options = options or PredictOptions()
    entry = FORMATS[model.format]
    precision = options.precision or default_precision(model)
    if runtime:
        runtime = word(Runtime, runtime, where="--runtime")
    else:  # the fastest engine for the kind that computes in the precision asked for
        runtime = next((r for r in _by_speed(entry, precision) if precision in PRECISIONS[r]), Runtime.OPENVINO)
    if runtime not in entry.runtimes:
        raise ForkliftError(
            f"{model.path}: a {model.format} model runs with --runtime {' or '.join(entry.runtimes)}, not {runtime}"
        )
    if precision not in PRECISIONS[runtime]:
        raise ForkliftError(
            f"--precision {precision}: --runtime {runtime} computes in {' or '.join(PRECISIONS[runtime])}; "
            f"OpenVINO computes in {', '.join(PRECISIONS[Runtime.OPENVINO])}"
        )
    options = replace(options, precision=precision)
    if options.device != "cpu" and runtime != Runtime.TORCH:
        raise ForkliftError(f"{options.device}: only --runtime torch runs on a GPU, not --runtime {runtime}")
    return entry.predictor(model, runtime, options)


def _by_speed(entry: FormatEntry, precision: Precision) -> list[Runtime]:
    """The engines of a format, fastest first: for f32 its default (bench/predict.py); for bf16 and INT8 OpenVINO,
    whose INT8 kernels run 4-5x ONNX Runtime's on the same QDQ graph here (bench/quantize)."""
    first = entry.default_runtime if precision == Precision.F32 else Runtime.OPENVINO
    return [first, *(r for r in entry.runtimes if r != first)]
