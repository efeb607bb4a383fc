"""Edits of a Darknet cfg's text that keep everything else (comments, order, spacing) as the author wrote it.

Training rewrites a few options of a cfg (classes, filters, input size); collect the edits per line with
`set_option`, then `apply_edits` once.
"""

from __future__ import annotations

from forklift.errors import ForkliftError
from forklift.model_files.darknet_cfg import Section, parse_cfg


def set_net_size(net: Section, size: int, edits: dict[int, str], inserts: dict[int, list[str]]) -> None:
    for key in ("width", "height"):
        set_option(net, key, str(size), edits, inserts)


def set_option(section: Section, key: str, value: str, edits: dict[int, str], inserts: dict[int, list[str]]) -> None:
    """Record the edit that makes `key=value` in the section: its line replaced, or a line added under the header."""
    if key in section.option_lines:
        edits[section.option_lines[key] - 1] = f"{key}={value}"
    else:
        inserts.setdefault(section.line - 1, []).append(f"{key}={value}")


def apply_edits(text: str, edits: dict[int, str], inserts: dict[int, list[str]]) -> str:
    result = []
    for number, line in enumerate(text.splitlines()):
        result.append(edits.get(number, line))
        result.extend(inserts.get(number, []))
    return "\n".join(result) + "\n"


def set_classes(text: str, source: str, classes: int, size: int | None = None) -> str:
    """The cfg with `classes=` of each [yolo], `filters=` of the convolution before it, and [net] width and
    height (when a size is given) rewritten; everything else, comments included, stays as written."""
    config = parse_cfg(text, source)
    edits: dict[int, str] = {}  # 0-based line -> new text
    inserts: dict[int, list[str]] = {}  # insert after the section header at this 0-based line
    if size is not None:
        set_net_size(config.net, size, edits, inserts)
    for index, section in enumerate(config.layers):
        if section.kind != "yolo":
            continue
        before = config.layers[index - 1] if index else None
        if before is None or before.kind != "convolutional":
            raise ForkliftError(f"{section.where()}: [yolo] must follow a [convolutional] whose filters it sets")
        anchors = len(section.ints("mask", list(range(len(section.floats("anchors")) // 2))))
        set_option(section, "classes", str(classes), edits, inserts)
        set_option(before, "filters", str(anchors * (5 + classes)), edits, inserts)
    return apply_edits(text, edits, inserts)
