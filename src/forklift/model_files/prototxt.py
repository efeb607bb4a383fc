"""Protobuf text format (Caffe `.prototxt`) ⇄ an ordered tree, without a schema.

Caffe nets are edited as text, and the one edit forklift makes (swapping py-faster-rcnn's Python proposal
layer for OpenCV's own) must not need Caffe's `.proto`; so this reads any message as ordered (key, value)
pairs, keeps repeated keys in file order, and writes them back in a form protobuf's text parser (and OpenCV)
accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_encoding

from forklift.errors import ForkliftError


class Symbol(str):
    """A bare word: an enum value (`MAX`), `true`/`false` or `inf`; written back without quotes."""


Scalar = str | int | float

_TOKEN = re.compile(
    r"""(?P<newline>\n)
      | (?P<space>[ \t\r\f\v,;]+)
      | (?P<comment>\#[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<punct>[{}:])
      | (?P<word>[^\s{}:#"',;]+)""",
    re.VERBOSE,
)
_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?")


@dataclass
class Message:
    """One message: its fields in file order, repeated keys kept as separate entries."""

    fields: list[tuple[str, Value]] = field(default_factory=list)

    def get(self, key: str, default: Value | None = None) -> Value | None:
        """The first value of `key` (protobuf's last-wins rule never matters for the keys forklift reads)."""
        return next((value for name, value in self.fields if name == key), default)

    def get_all(self, key: str) -> list[Value]:
        return [value for name, value in self.fields if name == key]

    def messages(self, key: str) -> list[Message]:
        """The nested blocks named `key` (e.g. every `layer { ... }`)."""
        return [value for value in self.get_all(key) if isinstance(value, Message)]

    def block(self, key: str) -> Message:
        """The first nested block named `key`, or an empty one (an absent `*_param` means all defaults)."""
        found = self.messages(key)
        return found[0] if found else Message()


Value = Scalar | Message


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    line: int


def _tokens(text: str, source: str) -> list[_Token]:
    tokens: list[_Token] = []
    line, pos = 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ForkliftError(f"{source}:{line}: unterminated string")
        kind = match.lastgroup or ""
        if kind == "newline":
            line += 1
        elif kind not in ("space", "comment"):
            tokens.append(_Token(kind, match.group(), line))
        pos = match.end()
    return tokens


def _scalar(token: _Token, source: str) -> Scalar:
    if token.kind == "string":
        try:
            return text_encoding.CUnescape(token.text[1:-1]).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise ForkliftError(f"{source}:{token.line}: bad string {token.text}: {exc}") from exc
    if _INT.fullmatch(token.text):
        return int(token.text)
    if _FLOAT.fullmatch(token.text):
        return float(token.text.rstrip("fF"))
    return Symbol(token.text)


class _Parser:
    """Recursive descent over the tokens: message := (name (':' scalar | ':'? '{' message '}'))*."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.tokens = _tokens(text, source)
        self.pos = 0

    def _error(self, message: str) -> ForkliftError:
        line = self.tokens[min(self.pos, len(self.tokens) - 1)].line if self.tokens else 1
        return ForkliftError(f"{self.source}:{line}: {message}")

    def _peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> _Token:
        token = self._peek()
        if token is None:
            raise self._error("unexpected end of file (a '}' missing?)")
        self.pos += 1
        return token

    def message(self, nested: bool) -> Message:
        result = Message()
        while (token := self._peek()) is not None and token.text != "}":
            result.fields.append(self._field())
        if nested and token is None:
            raise self._error("unexpected end of file (a '}' missing?)")
        if not nested and token is not None:
            raise self._error("unmatched '}'")
        return result

    def _field(self) -> tuple[str, Value]:
        name = self._take()
        if name.kind != "word":
            raise self._error(f"expected a field name, found {name.text!r}")
        token = self._take()
        following = self._peek()
        if token.text == ":" and following is not None and following.text == "{":
            token = self._take()
        if token.text == "{":
            value = self.message(nested=True)
            self._take()  # the closing brace
            return name.text, value
        if token.text != ":":
            raise self._error(f"expected ':' or '{{' after {name.text!r}, found {token.text!r}")
        value_token = self._take()
        if value_token.kind not in ("word", "string"):
            raise self._error(f"expected a value for {name.text!r}, found {value_token.text!r}")
        return name.text, _scalar(value_token, self.source)


def parse_prototxt(text: str, source: str = "<prototxt>") -> Message:
    """Parse text format; errors name `source` (a file name) and the line."""
    return _Parser(text, source).message(nested=False)


def read_prototxt(path: Path) -> Message:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ForkliftError(f"{path}: cannot read: {exc}") from exc
    return parse_prototxt(text, str(path))


def _format_scalar(value: Scalar) -> str:
    if isinstance(value, Symbol):
        return str(value)
    if isinstance(value, str):
        return '"' + text_encoding.CEscape(value.encode("utf-8"), as_utf8=True) + '"'
    return repr(value)


def format_prototxt(message: Message, indent: int = 0) -> str:
    """Text format with two-space indentation, `key { ... }` blocks and double-quoted strings."""
    pad = "  " * indent
    lines = []
    for key, value in message.fields:
        if isinstance(value, Message):
            lines.append(f"{pad}{key} {{\n{format_prototxt(value, indent + 1)}{pad}}}\n")
        else:
            lines.append(f"{pad}{key}: {_format_scalar(value)}\n")
    return "".join(lines)
