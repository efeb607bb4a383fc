"""PyTorch -> ONNX (opset 17, dynamic batch) with forklift's metadata; Darknet nets with the decode in the graph.

A Darknet graph's output is the decoded rows of `forklift.nets.darknet`, so ONNX Runtime needs no Python decode.
Metadata names the source files' digest and the export's version, so a stale export beside changed weights, or
one an older forklift wrote, is never used.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree

import onnx

from forklift.atomic import written_atomically
from forklift.model_files.model_dir import FORMAT_FILES, ModelDirectory
from forklift.user_cache import user_cache
from forklift.vocabulary import ModelFormat, Task

if TYPE_CHECKING:  # PyTorch is imported by an export alone: running a graph already exported needs none of it
    import torch

OPSET = 17
INPUT_NAME = "images"
OUTPUT_NAMES = {Task.DETECT: "detections", Task.CLASSIFY: "probabilities", Task.SEGMENT: "masks", Task.STYLE: "styled"}
META_SOURCE = "forklift.source_sha256"
META_TASK = "forklift.task"
META_CLASSES = "forklift.classes"
META_EXPORT = "forklift.export_version"
IR_FACTS = "forklift"  # the rt_info section of an OpenVINO IR that holds what an ONNX file's metadata would
EXPORT_VERSION = "2"  # of the Darknet graphs this code writes: 2 has no -inf Pad before pools (INT8 runs through)


def source_digest(model: ModelDirectory) -> str:
    """What a graph made from the model's files records of them (a Darknet export, an INT8 graph), so that one
    made from other files is never used: the digest of the cfg and weights, of a style network's state dict, or
    of the model's own ONNX file."""
    digest = hashlib.sha256()
    for role in FORMAT_FILES[model.format].sources:
        digest.update(model.files[role].read_bytes())
    return digest.hexdigest()


def export_darknet(model: ModelDirectory, out: Path) -> Path:
    import torch

    from forklift.nets.darknet import build_darknet

    net = build_darknet(model.files["cfg"], model.files["weights"])
    model.check_label_count(net.classes)
    task = Task.DETECT if net.is_detector else Task.CLASSIFY
    example = torch.zeros(1, net.config.channels, net.input_height, net.input_width)
    facts = {META_SOURCE: source_digest(model), META_CLASSES: str(net.classes), META_EXPORT: EXPORT_VERSION}
    return export_onnx(net, example, out, task, facts)


def export_style(model: ModelDirectory, out: Path) -> Path:
    """A style network's graph with any batch, height and width."""
    import torch

    from forklift.nets.style import load_style_net

    net = load_style_net(model.files["state_dict"])
    facts = {META_SOURCE: source_digest(model), META_EXPORT: EXPORT_VERSION}
    return export_onnx(net, torch.zeros(1, 3, 64, 64), out, Task.STYLE, facts, any_size=True)


EXPORTERS = {ModelFormat.DARKNET: export_darknet, ModelFormat.STYLE: export_style}  # the formats that run an export


def export_onnx(
    net: torch.nn.Module,
    example: torch.Tensor,
    out: Path,
    task: Task,
    facts: dict[str, str],
    *,
    any_size: bool = False,
) -> Path:
    """Write net's graph for inputs shaped like example (any batch size; with `any_size` any height and width
    too) to out, atomically, with the task and facts as metadata; the output is named by OUTPUT_NAMES[task]."""
    with written_atomically(out) as partial:
        _write_graph(net, example, partial, task, facts, any_size)
    return out


def _write_graph(
    net: torch.nn.Module, example: torch.Tensor, path: Path, task: Task, facts: dict[str, str], any_size: bool
) -> None:
    import torch

    axes = {0: "batch", 2: "height", 3: "width"} if any_size else {0: "batch"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's notes on constant folding and deprecation
        torch.onnx.export(
            net,
            (example,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAMES[task]],
            opset_version=OPSET,
            dynamic_axes={INPUT_NAME: axes, OUTPUT_NAMES[task]: axes},
            dynamo=False,
        )
    proto = onnx.load(str(path))
    for key, value in {**facts, META_TASK: task}.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(path))


def metadata(path: Path) -> dict[str, str]:
    """An ONNX file's metadata, or the same facts in an OpenVINO IR (its rt_info's IR_FACTS section)."""
    if path.suffix == ".xml":
        found = ElementTree.parse(path).getroot().find(f"rt_info/{IR_FACTS}")
        return {} if found is None else {entry.tag: entry.get("value", "") for entry in found}
    proto = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in proto.metadata_props}


def cache_dir() -> Path:
    return user_cache() / "onnx"


def exported_onnx(model: ModelDirectory) -> Path:
    """The model's own .onnx when this version of forklift exported it from these very files (a Darknet model's
    or a style network's), else a cached export (made once)."""
    digest = source_digest(model)
    beside = model.files.get("onnx")
    if beside is not None:
        facts = metadata(beside)
        if facts.get(META_SOURCE) == digest and facts.get(META_EXPORT) == EXPORT_VERSION:
            return beside
    cached = cache_dir() / f"{digest}-v{EXPORT_VERSION}.onnx"
    if not cached.exists():
        EXPORTERS[model.format](model, cached)
    return cached
