"""A model directory: one model, recognised by its files (DESIGN.md, "Model directory")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from forklift.errors import ForkliftError
from forklift.model_files.labels import read_labels
from forklift.model_files.model_config import ModelConfig, load_config
from forklift.vocabulary import Task


class FileRole(NamedTuple):
    """One file a kind of model needs: its role (the key in `ModelDirectory.files`) and the suffixes it may have."""

    role: str
    suffixes: tuple[str, ...]


# kind -> its files in the order they are looked for; the first one's presence decides the kind.
KINDS: dict[str, tuple[FileRole, ...]] = {
    "darknet": (FileRole("cfg", (".cfg",)), FileRole("weights", (".weights",)), FileRole("labels", (".names",))),
    "caffe": (
        FileRole("prototxt", (".prototxt",)),
        FileRole("caffemodel", (".caffemodel",)),
        FileRole("labels", (".labels",)),
    ),
    "style": (FileRole("state_dict", (".pth", ".model")),),  # a fast-neural-style network's PyTorch state dict
    "onnx": (FileRole("onnx", (".onnx",)), FileRole("labels", (".names", ".labels", ".txt"))),
}
LABELLESS = ("labels",)  # an image-to-image model (task style) answers images, not labels


@dataclass(frozen=True)
class ModelDirectory:
    """The files of one model, by role, with its labels and settings."""

    path: Path
    kind: str
    files: dict[str, Path]
    labels: list[str]
    config: ModelConfig

    @property
    def name(self) -> str:
        return self.path.resolve().name


def _pick_one(directory: Path, role: str, suffixes: tuple[str, ...]) -> Path | None:
    candidates = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    if len(candidates) > 1:
        names = ", ".join(p.name for p in candidates)
        raise ForkliftError(f"{directory}: two candidates for the {role} file ({names}); keep one")
    return candidates[0] if candidates else None


def find_kind(directory: Path) -> str:
    """Darknet if there is a .cfg, Caffe if a .prototxt, a style network if a .pth or .model, ONNX if only an
    .onnx (an export may sit beside a Darknet or style model)."""
    for kind, roles in KINDS.items():
        first_suffixes = roles[0].suffixes
        if any(p.suffix.lower() in first_suffixes for p in directory.iterdir() if p.is_file()):
            return kind
    raise ForkliftError(
        f"{directory}: not a model directory (no .cfg, .prototxt, .pth or .onnx file; see the README, "
        "'Model directory')"
    )


def open_model_dir(path: str | Path) -> ModelDirectory:
    """Recognise the model in `path`; every missing or ambiguous file is a one-line error naming it."""
    directory = Path(path)
    if not directory.exists():
        raise ForkliftError(f"{directory}: no such model directory")
    if not directory.is_dir():
        raise ForkliftError(f"{directory}: a model is a directory of files, not a single file")
    kind = find_kind(directory)
    config, config_path = load_config(directory)
    styled = kind == "style" or config.task == Task.STYLE
    files: dict[str, Path] = {}
    for role, suffixes in KINDS[kind]:
        found = _pick_one(directory, role, suffixes)
        if found is None and not (styled and role in LABELLESS):
            wanted = " or ".join(suffixes)
            hint = ' (an image-to-image model: say "task": "style" in forklift.json)' if role == "labels" else ""
            raise ForkliftError(f"{directory}: missing the {role} file ({wanted}) of this {kind} model{hint}")
        if found is not None:
            files[role] = found
    if kind in ("darknet", "style"):
        exported = _pick_one(directory, "onnx", (".onnx",))
        if exported is not None:
            files["onnx"] = exported
    if kind == "style":
        config.task = Task.STYLE
    if config_path is not None:
        files["config"] = config_path
    labels = read_labels(files["labels"]) if "labels" in files else []
    return ModelDirectory(directory, kind, files, labels, config)
