"""`forklift.json` / `forklift.yaml`: what a model's files cannot say (task, input, normalisation, thresholds)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from forklift.errors import ForkliftError
from forklift.vocabulary import ResizeMode, Task, word

CONFIG_NAMES = ("forklift.json", "forklift.yaml", "forklift.yml")


@dataclass
class ModelConfig:
    """Settings that override what forklift infers from the model files. `None` means: infer it."""

    task: Task | None = None
    input_width: int | None = None
    input_height: int | None = None
    resize: ResizeMode | None = None
    mean: list[float] | None = None  # per channel, in the model's colour order, 0..255 scale
    scale: float | list[float] | None = None  # multiplies (pixel - mean): one for all channels, or one each
    color_order: str | None = None  # rgb | bgr
    conf: float | None = None
    iou: float | None = None
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in (None, {})}


def load_config(directory: Path) -> tuple[ModelConfig, Path | None]:
    """The directory's config file, or defaults when there is none."""
    found = [directory / name for name in CONFIG_NAMES if (directory / name).is_file()]
    if len(found) > 1:
        raise ForkliftError(f"{directory}: two config files ({found[0].name}, {found[1].name}); keep one")
    if not found:
        return ModelConfig(), None
    path = found[0]
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ForkliftError(f"{path}: cannot parse: {str(exc).splitlines()[0]}") from exc
    if not isinstance(data, dict):
        raise ForkliftError(f"{path}: expected a mapping of settings at the top level")
    known = {f.name for f in fields(ModelConfig)} - {"extra"}
    settings = {k: v for k, v in data.items() if k in known}
    extra = {k: v for k, v in data.items() if k not in known}
    config = ModelConfig(**settings, extra=extra)
    if config.task is not None:
        config.task = word(Task, config.task, where=f"{path}: task")
    if config.resize is not None:
        config.resize = word(ResizeMode, config.resize, where=f"{path}: resize")
    if config.color_order is not None and config.color_order not in ("rgb", "bgr"):
        raise ForkliftError(f"{path}: color_order must be rgb or bgr, not {config.color_order!r}")
    return config, path


def save_config(directory: Path, config: ModelConfig) -> Path:
    path = directory / "forklift.json"
    data = config.to_json()
    data.update(data.pop("extra", {}))
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path
