"""Edits of a Darknet cfg's text that keep everything else (comments, order, spacing) as the author wrote it.

Training rewrites a few options of a cfg (classes, filters, input size); collect the edits per line with
`set_option`, then `apply_edits` once.
"""

from __future__ import annotations

from forklift.model_files.darknet_cfg import Section


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
