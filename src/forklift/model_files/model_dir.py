"""A model directory: one model, recognised by its files (DESIGN.md, "Model directory")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from forklift.errors import ForkliftError
from forklift.model_files.labels import read_labels
from forklift.model_files.model_config import ModelConfig, load_config
from forklift.model_files.tabular import TABULAR_KEY, TabularSettings
from forklift.vocabulary import ModelFormat, Task


class FileRole(NamedTuple):
    """One file a format of model holds: its role (the key in `ModelDirectory.files`) and the suffixes it may have."""

    role: str
    suffixes: tuple[str, ...]


@dataclass(frozen=True)
class FormatFiles:
    """The files of one model format: those it needs, in the order they are looked for (the first one's presence
    decides the format), those it may also hold, and those that are the model (a graph made from them records
    their digest, so that one made from other files is never used)."""

    needed: tuple[FileRole, ...]
    optional: tuple[FileRole, ...] = ()
    sources: tuple[str, ...] = ()


_LABELS = FileRole("labels", (".names", ".labels", ".txt"))
_EXPORT = FileRole("onnx", (".onnx",))  # forklift's own ONNX export beside the files it was made from
FORMAT_FILES: dict[ModelFormat, FormatFiles] = {
    ModelFormat.DARKNET: FormatFiles(
        (FileRole("cfg", (".cfg",)), FileRole("weights", (".weights",)), FileRole("labels", (".names",))),
        optional=(_EXPORT,),
        sources=("cfg", "weights"),
    ),
    ModelFormat.CAFFE: FormatFiles(
        (
            FileRole("prototxt", (".prototxt",)),
            FileRole("caffemodel", (".caffemodel",)),
            FileRole("labels", (".labels",)),
        ),
        sources=("prototxt", "caffemodel"),
    ),
    ModelFormat.STYLE: FormatFiles(
        (FileRole("state_dict", (".pth", ".model")),), optional=(_EXPORT,), sources=("state_dict",)
    ),
    ModelFormat.ONNX: FormatFiles((FileRole("onnx", (".onnx",)), _LABELS), sources=("onnx",)),
    # `forklift.runtime.two_stage_export` writes these; forklift.json's "two_stage" settings tell them from ONNX
    ModelFormat.TWO_STAGE: FormatFiles(
        (FileRole("onnx", (".onnx",)), _LABELS), optional=(FileRole("weights", (".pt",)),), sources=("onnx",)
    ),
    # `forklift ml fit` writes these; forklift.json's "tabular" settings tell them from ONNX
    ModelFormat.TABULAR: FormatFiles(
        (FileRole("onnx", (".onnx",)),), optional=(FileRole("estimator", (".pkl",)),), sources=("onnx",)
    ),
}
TWO_STAGE_KEY = "two_stage"  # forklift.json's key for a torchvision detector's settings
DERIVED_FORMATS = (ModelFormat.TWO_STAGE, ModelFormat.TABULAR)  # ONNX graphs told apart by forklift.json
LABELLESS = ("labels",)  # an image-to-image model (task style) answers images, not labels


@dataclass(frozen=True)
class ModelDirectory:
    """The files of one model, by role, with its labels and settings."""

    path: Path
    format: ModelFormat
    files: dict[str, Path]
    labels: list[str]
    config: ModelConfig

    @property
    def name(self) -> str:
        return self.path.resolve().name

    def check_label_count(self, classes: int) -> None:
        """One line naming the labels file when it holds another count than the network's classes: each box would
        be named by another class's label (predict, inspect and export alike)."""
        if "labels" in self.files and len(self.labels) != classes:
            raise ForkliftError(
                f"{self.files['labels']}: {len(self.labels)} labels, but the network has {classes} classes"
            )


def _pick_one(directory: Path, role: str, suffixes: tuple[str, ...]) -> Path | None:
    candidates = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    if len(candidates) > 1:
        names = ", ".join(p.name for p in candidates)
        raise ForkliftError(f"{directory}: two candidates for the {role} file ({names}); keep one")
    return candidates[0] if candidates else None


def find_format(directory: Path, config: ModelConfig) -> ModelFormat:
    """Darknet if there is a .cfg, Caffe if a .prototxt, a style network if a .pth or .model, else ONNX if there is
    an .onnx (an export may sit beside a Darknet or style model): a torchvision detector's when forklift.json has
    its "two_stage" settings."""
    suffixes = {p.suffix.lower() for p in directory.iterdir() if p.is_file()}
    for format, files in FORMAT_FILES.items():
        if format not in DERIVED_FORMATS and suffixes & set(files.needed[0].suffixes):
            if format == ModelFormat.ONNX and TWO_STAGE_KEY in config.extra:
                return ModelFormat.TWO_STAGE
            if format == ModelFormat.ONNX and TABULAR_KEY in config.extra:
                return ModelFormat.TABULAR
            return format
    raise ForkliftError(
        f"{directory}: not a model directory (no .cfg, .prototxt, .pth or .onnx file; see the README, "
        "'Model directory')"
    )


def holds_tabular_model(path: Path) -> bool:
    """Whether ``path`` is a folder whose forklift.json describes a tabular model: the verbs that take only those
    say so, where :func:`open_model_dir` would name a file an image model lacks."""
    return path.is_dir() and TABULAR_KEY in load_config(path)[0].extra


def open_model_dir(path: str | Path) -> ModelDirectory:
    """Recognise the model in `path`; every missing or ambiguous file is a one-line error naming it."""
    directory = Path(path)
    if not directory.exists():
        raise ForkliftError(f"{directory}: no such model directory")
    if not directory.is_dir():
        raise ForkliftError(f"{directory}: a model is a directory of files, not a single file")
    config, config_path = load_config(directory)
    format = find_format(directory, config)
    if format == ModelFormat.STYLE:
        config.task = Task.STYLE
    if format == ModelFormat.TABULAR:
        config.task = Task.TABULAR
    files: dict[str, Path] = {}
    for role, suffixes in FORMAT_FILES[format].needed:
        found = _pick_one(directory, role, suffixes)
        if found is None and not (config.task == Task.STYLE and role in LABELLESS):
            wanted = " or ".join(suffixes)
            hint = ' (an image-to-image model: say "task": "style" in forklift.json)' if role == "labels" else ""
            raise ForkliftError(f"{directory}: missing the {role} file ({wanted}) of this {format} model{hint}")
        if found is not None:
            files[role] = found
    for role, suffixes in FORMAT_FILES[format].optional:
        found = _pick_one(directory, role, suffixes)
        if found is not None:
            files[role] = found
    if config_path is not None:
        files["config"] = config_path
    labels = read_labels(files["labels"]) if "labels" in files else []
    if format == ModelFormat.TABULAR:
        labels = [str(c) for c in tabular_settings(config, directory).classes]
    return ModelDirectory(directory, format, files, labels, config)


def tabular_settings(config: ModelConfig, directory: Path) -> TabularSettings:
    """A tabular model's settings, from its forklift.json."""
    return TabularSettings.from_json(config.extra.get(TABULAR_KEY), where=str(directory / "forklift.json"))
