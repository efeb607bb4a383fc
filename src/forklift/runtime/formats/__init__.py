"""One entry per model format (`forklift.vocabulary.ModelFormat`): its files, the engines that run it and the
default one, how a predictor is made, what `forklift models inspect` counts, and its ONNX export. Each format
registers its entry in a module of its own here; importing this package imports them all, so `FORMATS` is whole.
"""

from __future__ import annotations

from dataclasses import asdict

from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.formats import caffe, darknet, onnx, style, tabular, two_stage  # noqa: F401  (each registers its entry)
from forklift.runtime.formats.registry import FORMATS, FormatEntry
from forklift.runtime.summary import ModelSummary

__all__ = ["FORMATS", "FormatEntry", "format_entry", "summarise"]


def format_entry(model: ModelDirectory) -> FormatEntry:
    return FORMATS[model.format]


def summarise(model: ModelDirectory) -> ModelSummary:
    """`forklift models inspect`: the format's own count of the model, with its name, format and files."""
    facts = asdict(format_entry(model).summary(model))
    labels = facts.pop("labels") or model.labels
    files = {role: str(path) for role, path in model.files.items()}
    return ModelSummary(name=model.name, format=model.format, labels=labels, files=files, **facts)
