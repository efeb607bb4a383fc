"""`forklift models quantize`: measure the model in f32 on val, make the INT8 graph from train images, measure it
(and bf16) the same way, and keep the INT8 graph only when its metric is within the allowed drop.

Everything is measured in a staging folder inside the model directory that links to the model's files, so the
directory itself changes only at the end, in one step, and a refused or interrupted run leaves it as it was.
Where plain quantisation drops too much, NNCF's accuracy control keeps the most sensitive layers in float and
tries again before forklift refuses.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import Dataset, ImageRecord
from forklift.errors import ForkliftError
from forklift.evaluation import METRICS
from forklift.evaluation.evaluate import EVAL_CONF, EVAL_IOU, check_labels, measure, measure_with
from forklift.model_files.model_dir import ModelDirectory, open_model_dir
from forklift.model_files.precision import INT8_DIR, PrecisionCheck, check_writable, record_checks
from forklift.quantize.calibration import calibration_inputs
from forklift.quantize.int8 import quantize_graph, save_graph
from forklift.runtime.base import PredictOptions, Predictor
from forklift.runtime.load import PRECISIONS, load_predictor
from forklift.runtime.onnx_export import metadata, source_digest
from forklift.runtime.onnx_graph import graph_path
from forklift.vocabulary import ModelFormat, Precision, Runtime


@dataclass(frozen=True)
class Quantized:
    """What `quantize_model_dir` measured and kept."""

    model_dir: Path
    checks: dict[Precision, PrecisionCheck]
    controlled: bool  # NNCF's accuracy control was needed (some layers stayed in float)
    graph: Path


def quantize_model_dir(
    model_dir: Path,
    data: Path,
    *,
    samples: int = 300,
    max_drop: float = 0.01,
    runtime: Runtime = Runtime.OPENVINO,
    seed: int = 0,
) -> Quantized:
    """Make, check and keep the model's INT8 graph; a one-line error, with nothing written, when it drops more
    than `max_drop` of the task's headline metric on val."""
    model = open_model_dir(model_dir)
    if model.format == ModelFormat.CAFFE:
        raise ForkliftError(f"{model_dir}: a Caffe model runs on OpenCV only, which has no INT8 engine here")
    if model.format in (ModelFormat.STYLE, ModelFormat.TABULAR):  # "share no class" said the wrong thing
        what = "a style model answers images" if model.format == ModelFormat.STYLE else "a tabular model answers rows"
        raise ForkliftError(f"{model_dir}: {what}, and quantize keeps an INT8 graph by a data set's metric, which it "
                            "has none of")  # fmt: skip
    check_writable(model)
    report = check_dataset(data)
    dataset = report.dataset
    check_labels(model.labels, dataset.classes, model_dir, data)
    val = [image for image in usable_images(report) if image.split == "val"]
    if not val:
        raise ForkliftError(f"{data}: no usable val images to measure f32 against INT8 on")
    metric = METRICS[dataset.task][0]
    staging = Path(tempfile.mkdtemp(prefix=".quantize-", dir=model.path))
    try:
        staged = _stage(model, staging)

        def score(precision: Precision) -> float:
            measured = measure(staged, dataset, val, runtime=runtime, precision=precision)
            return float(getattr(measured, metric) or 0.0)

        try:
            f32 = score(Precision.F32)
        except ForkliftError as exc:  # about the model, named as the person gave it, not its staged copy
            raise ForkliftError(str(exc).replace(str(staging), str(model_dir))) from exc
        inputs = calibration_inputs(model, report, samples=samples, seed=seed)
        source, digest = graph_path(model), source_digest(model)
        target = quantize_graph(source, inputs, staging, digest=digest, runtime=runtime)  # the staged model's
        int8 = PrecisionCheck(metric, f32, score(Precision.INT8), max_drop, len(val), len(inputs))
        controlled = not int8.passed
        if controlled:
            print(
                f"INT8 {metric} {int8.value:.4f} against f32 {f32:.4f}: keeping sensitive layers in float", flush=True
            )
            validation = (val, _graph_scorer(staged, dataset, metadata(target), runtime, metric))
            target = quantize_graph(
                source,
                inputs,
                staging,
                digest=digest,
                runtime=runtime,
                onnx_backend=target.suffix == ".onnx",
                validation=validation,
                max_drop=max_drop,
            )
            int8 = replace(int8, value=score(Precision.INT8))
        checks = {Precision.INT8: int8}
        if Precision.BF16 in PRECISIONS[runtime]:
            checks[Precision.BF16] = PrecisionCheck(metric, f32, score(Precision.BF16), max_drop, len(val))
        if not int8.passed:
            raise ForkliftError(
                f"{model_dir}: INT8 {metric} {int8.value:.4f} is {int8.drop:.4f} below f32's {f32:.4f}, more than "
                f"--max-drop {max_drop:g}; nothing written"
            )
        if (model.path / INT8_DIR).exists():  # the earlier INT8 graph goes with the staging folder
            (model.path / INT8_DIR).replace(staging / "replaced")
        (staging / INT8_DIR).replace(model.path / INT8_DIR)
        record_checks(model, checks)
        return Quantized(model.path, checks, controlled, model.path / target.relative_to(staging))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _stage(model: ModelDirectory, staging: Path) -> ModelDirectory:
    """A model directory in `staging` whose files link to the model's: measured as the model, changed apart."""
    for path in model.path.iterdir():
        if path.is_file():
            (staging / path.name).symlink_to(path.resolve())
    return open_model_dir(staging)


def _graph_scorer(
    staged: ModelDirectory, dataset: Dataset, facts: dict[str, str], runtime: Runtime, metric: str
) -> Any:
    """The validation function NNCF's accuracy control calls with a candidate graph and val images: the graph
    is written as the staged INT8 graph (with the first one's metadata) and measured as `forklift eval` would.
    NNCF ranks layers by calling it with one graph on one image at a time, so the graph is loaded once for as long
    as the files written stay the same (73 loads of 0.17 s each in one refusal, where 2 graphs were measured)."""
    loaded: dict[str, Predictor] = {}  # the last graph's predictor, by the digest of its files

    def score(graph: Any, images: Iterable[ImageRecord]) -> float:
        written = save_graph(graph, staged.path, facts=facts)
        digest = _files_digest([written, written.with_suffix(".bin")])
        if digest not in loaded:
            loaded.clear()
            loaded[digest] = load_predictor(staged, runtime, PredictOptions(conf=EVAL_CONF, iou=EVAL_IOU,
                                                                            precision=Precision.INT8))  # fmt: skip
        measured = measure_with(loaded[digest], dataset, list(images))
        return float(getattr(measured, metric) or 0.0)

    return score


def _files_digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()
