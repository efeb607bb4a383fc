"""Darknet `.cfg` files: INI-like `[section]` blocks of `key=value` lines, parsed with their line numbers.

Every section and key that YOLOv2, YOLOv2-tiny, YOLOv3, YOLOv3-tiny, YOLOv3-SPP, YOLOv4-tiny and Darknet
classifiers use is understood; an unknown section is an error naming it and its line, so a cfg that forklift
would run wrongly is refused instead.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from pathlib import Path

from forklift.errors import ForkliftError

SECTION_ALIASES = {
    "net": "net",
    "network": "net",
    "convolutional": "convolutional",
    "conv": "convolutional",
    "maxpool": "maxpool",
    "max": "maxpool",
    "avgpool": "avgpool",
    "avg": "avgpool",
    "route": "route",
    "shortcut": "shortcut",
    "upsample": "upsample",
    "yolo": "yolo",
    "region": "region",
    "reorg": "reorg",
    "dropout": "dropout",
    "softmax": "softmax",
    "soft": "softmax",
    "cost": "cost",
}
ACTIVATIONS = ("leaky", "linear", "logistic", "relu", "mish", "swish")


@dataclass
class Section:
    """One `[type]` block; values stay text until a reader asks for a type, so errors can cite the line."""

    kind: str
    line: int
    options: dict[str, str] = field(default_factory=dict)
    option_lines: dict[str, int] = field(default_factory=dict)
    source: str = ""

    def where(self, key: str | None = None) -> str:
        line = self.option_lines.get(key, self.line) if key else self.line
        return f"{self.source}:{line}"

    def text(self, key: str, default: str | None = None) -> str:
        if key in self.options:
            return self.options[key]
        if default is None:
            raise ForkliftError(f"{self.where()}: [{self.kind}] needs '{key}='")
        return default

    def int(self, key: str, default: int | None = None) -> int:
        raw = self.text(key, None if default is None else str(default))
        try:
            return int(raw)
        except ValueError as exc:
            raise ForkliftError(f"{self.where(key)}: '{key}={raw}' is not a whole number") from exc

    def float(self, key: str, default: float | None = None) -> float:
        raw = self.text(key, None if default is None else repr(default))
        try:
            return float(raw)
        except ValueError as exc:
            raise ForkliftError(f"{self.where(key)}: '{key}={raw}' is not a number") from exc

    def ints(self, key: str, default: list[builtins.int] | None = None) -> list[builtins.int]:
        if key not in self.options and default is not None:
            return default
        raw = self.text(key)
        try:
            return [int(v) for v in raw.split(",") if v.strip()]
        except ValueError as exc:
            raise ForkliftError(f"{self.where(key)}: '{key}={raw}' is not a list of whole numbers") from exc

    def floats(self, key: str) -> list[builtins.float]:
        raw = self.text(key)
        try:
            return [float(v) for v in raw.split(",") if v.strip()]
        except ValueError as exc:
            raise ForkliftError(f"{self.where(key)}: '{key}={raw}' is not a list of numbers") from exc

    def activation(self) -> str:
        name = self.text("activation", "linear")
        if name not in ACTIVATIONS:
            raise ForkliftError(
                f"{self.where('activation')}: unknown activation '{name}' (known: {', '.join(ACTIVATIONS)})"
            )
        return name


@dataclass
class DarknetConfig:
    """The `[net]` section and the layers after it, in file order."""

    net: Section
    layers: list[Section]
    source: str

    @property
    def width(self) -> int:
        return self.net.int("width", 416)

    @property
    def height(self) -> int:
        return self.net.int("height", 416)

    @property
    def channels(self) -> int:
        return self.net.int("channels", 3)


def parse_cfg(text: str, source: str = "<cfg>") -> DarknetConfig:
    """Parse cfg text; `source` names the file in error messages."""
    sections: list[Section] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ForkliftError(f"{source}:{number}: section header '{line}' has no closing ']'")
            name = line[1:-1].strip().lower()
            if name not in SECTION_ALIASES:
                raise ForkliftError(f"{source}:{number}: unknown section or layer type [{name}]")
            sections.append(Section(SECTION_ALIASES[name], number, source=source))
            continue
        if "=" not in line:
            raise ForkliftError(f"{source}:{number}: expected 'key=value' or '[section]', found '{line}'")
        if not sections:
            raise ForkliftError(f"{source}:{number}: '{line}' comes before any [section]")
        key, value = (part.strip() for part in line.split("=", 1))
        sections[-1].options[key] = value
        sections[-1].option_lines[key] = number
    if not sections or sections[0].kind != "net":
        raise ForkliftError(f"{source}: a Darknet cfg starts with a [net] section")
    if len(sections) == 1:
        raise ForkliftError(f"{source}: no layers after [net]")
    return DarknetConfig(sections[0], sections[1:], source)


def cfg_text(path: Path) -> str:
    """A cfg file's text; bytes that are not UTF-8 (a binary given as a cfg) are kept as U+FFFD, for the parser to
    name the line they are on."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ForkliftError(f"{path}: cannot read: {exc.strerror}") from exc


def read_cfg(path: Path) -> DarknetConfig:
    return parse_cfg(cfg_text(path), str(path))
