"""The search space of `forklift tune`: which settings a trial draws, and from what.

A dimension is written as on the command line (`--space lr=1e-4..1e-1:log`, `--space batch=8,16,32`,
`--space optimizer=sgd,momentum,adam`, `--space epochs=6`) or as a YAML mapping (`lr: 1e-4..1e-1:log`,
`batch: [8, 16, 32]`). A range `LOW..HIGH` draws real numbers, or whole numbers for whole-number settings (in their
steps); `:log` draws on a log scale; a list draws one of its values; one value fixes it. Which names a space may
use, and what each takes, is the search's to say: training settings (`forklift.tune.training`) or an estimator's
parameters (`forklift.tune.tabular`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from forklift.errors import ForkliftError

WORDS = {"true": True, "on": True, "false": False, "off": False, "null": None, "none": None}  # of a VALUE setting


class Kind(Enum):
    """What a setting's values are."""

    REAL = "real"
    WHOLE = "whole"  # in steps of the setting's step
    WORD = "word"  # one of the setting's words
    VALUE = "value"  # each as written: a number, a word, true/false or null; a range of whole numbers if both ends are


@dataclass(frozen=True)
class Setting:
    """What a space may draw for one name."""

    kind: Kind
    least: float = 0  # the smallest number it takes
    step: int = 1  # a whole-number setting's values are multiples of it
    words: tuple[str, ...] = ()  # a word setting's values


Settings = Mapping[str, Setting]  # the names a search's space may use


@dataclass(frozen=True)
class Dimension:
    """One setting a trial draws: from a range (low..high, maybe on a log scale) or from a list of choices."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None
    step: int | None = None  # a range of whole numbers in these steps; None: of real numbers

    def draw(self, trial: Any) -> Any:
        """The value for this trial (an `optuna.Trial`)."""
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        assert self.low is not None and self.high is not None
        if self.step is not None:
            step = 1 if self.log else self.step
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=step, log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def __str__(self) -> str:
        """As `--space` writes it."""
        if self.choices is not None:
            return f"{self.name}={','.join(_plain(choice) for choice in self.choices)}"
        return f"{self.name}={self.low:g}..{self.high:g}{':log' if self.log else ''}"

    @property
    def is_grid(self) -> bool:
        """Whether a grid search can enumerate it (a list or one value, not a range)."""
        return self.choices is not None


def parse_dimension(text: str, settings: Settings) -> Dimension:
    """`NAME=LOW..HIGH[:log]`, `NAME=A,B,C` or `NAME=VALUE` of one of `settings`, or one line naming the problem."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not value.strip():
        raise ForkliftError(f"--space {text}: write NAME=LOW..HIGH[:log], NAME=A,B,C or NAME=VALUE")
    return _dimension(name, value.strip(), settings, where=f"--space {text}")


def load_space_file(path: Path, settings: Settings) -> list[Dimension]:
    """A YAML mapping of NAME to a range string, a list of values or one value."""
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ForkliftError(f"{path}: cannot read it as a YAML search space: {str(exc).splitlines()[0]}") from exc
    if not isinstance(loaded, dict) or not loaded:
        raise ForkliftError(f"{path}: a search space is a YAML mapping such as 'lr: 1e-4..1e-1:log'")
    dimensions = []
    for name, value in loaded.items():
        text = ",".join(map(_plain, value)) if isinstance(value, list) else _plain(value)
        dimensions.append(_dimension(str(name).replace("-", "_"), text, settings, where=f"{path}: {name}"))
    return dimensions


def parse_space(specs: Sequence[str], settings: Settings) -> list[Dimension]:
    """The dimensions of `--space` options (a .yaml/.yml one is a file of them); a name given twice is refused."""
    dimensions: list[Dimension] = []
    for spec in specs:
        is_file = spec.endswith((".yaml", ".yml")) and "=" not in spec
        dimensions.extend(load_space_file(Path(spec), settings) if is_file else [parse_dimension(spec, settings)])
    seen: set[str] = set()
    for dimension in dimensions:
        if dimension.name in seen:
            raise ForkliftError(f"--space {dimension.name}: given twice")
        seen.add(dimension.name)
    return dimensions


def _dimension(name: str, text: str, settings: Settings, *, where: str) -> Dimension:
    setting = settings.get(name)
    if setting is None:
        raise ForkliftError(f"{where}: unknown setting {name!r}; one of {', '.join(settings)}")
    if setting.kind is Kind.WORD:
        values = tuple(v.strip() for v in text.split(","))
        wrong = [v for v in values if v not in setting.words]
        if wrong:
            raise ForkliftError(f"{where}: {name} must be among {', '.join(setting.words)}, not {wrong[0]!r}")
        return Dimension(name, choices=values)
    log = text.endswith(":log")
    body = text.removesuffix(":log")
    if ".." in body:
        ends = body.split("..", 1)
        whole = setting.kind is Kind.WHOLE or (setting.kind is Kind.VALUE and all(map(_is_whole, ends)))
        low, high = (_number(name, part, setting, whole=whole, where=where) for part in ends)
        if not low < high:
            raise ForkliftError(f"{where}: the range must go from low to high, not {low:g}..{high:g}")
        if log and low <= 0:
            raise ForkliftError(f"{where}: a :log range must start above 0")
        return Dimension(name, low=low, high=high, log=log, step=setting.step if whole else None)
    if log:
        raise ForkliftError(f"{where}: :log applies to a range LOW..HIGH")
    parts = body.split(",")
    if setting.kind is Kind.VALUE:
        return Dimension(name, choices=tuple(_value(part) for part in parts))
    whole = setting.kind is Kind.WHOLE
    return Dimension(name, choices=tuple(_number(name, part, setting, whole=whole, where=where) for part in parts))


def _number(name: str, text: str, setting: Setting, *, whole: bool, where: str) -> Any:
    try:
        value = int(text) if whole else float(text)
    except ValueError as exc:
        kind = "a whole number" if whole else "a number"
        raise ForkliftError(f"{where}: {name} needs {kind}, not {text.strip()!r}") from exc
    if value < setting.least:
        raise ForkliftError(f"{where}: {name} cannot be {value}")
    if whole and value % setting.step:
        raise ForkliftError(f"{where}: {name} values must be multiples of {setting.step}, not {value}")
    return value


def _is_whole(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _value(text: str) -> Any:
    """A value as written: a whole or real number, true/false, null, or else the word itself."""
    text = text.strip()
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return WORDS.get(text.lower(), text)


def _plain(value: Any) -> str:
    """A YAML scalar as typed on the command line (YAML reads on/off as booleans)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "null" if value is None else str(value)
