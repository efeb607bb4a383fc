"""Class-name files (`.names`, `.labels`, `labels.txt`): one name a line."""

from __future__ import annotations

from pathlib import Path

from forklift.errors import ForkliftError


def read_labels(path: Path) -> list[str]:
    """Names in file order, trailing whitespace stripped, blank lines skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ForkliftError(f"{path}: cannot read labels: {exc}") from exc
    labels = [line.strip() for line in text.splitlines() if line.strip()]
    if not labels:
        raise ForkliftError(f"{path}: the labels file is empty")
    return labels


def write_labels(path: Path, labels: list[str]) -> None:
    path.write_text("".join(f"{name}\n" for name in labels), encoding="utf-8")
