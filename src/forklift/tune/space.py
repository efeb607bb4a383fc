"""The search space of `forklift tune`: which training settings a trial draws, and from what.

A dimension is written as on the command line (`--space lr=1e-4..1e-1:log`, `--space batch=8,16,32`,
`--space optimizer=sgd,momentum,adam`, `--space mosaic=on,off`, `--space epochs=6`) or as a YAML mapping
(`lr: 1e-4..1e-1:log`, `batch: [8, 16, 32]`). A range `LOW..HIGH` draws floats, or whole numbers for whole-number
settings (`img` in steps of 32); `:log` draws on a log scale; a list draws one of its values; one value fixes it.
Momentum is drawn only for trials whose optimiser has one, as Optuna's define-by-run spaces allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from forklift.errors import ForkliftError
from forklift.train.optimizers import USES_MOMENTUM
from forklift.vocabulary import Optimizer, Task, words

FLOATS = ("lr", "momentum", "weight_decay", "aug_scale", "aug_shift", "aug_hsv")
WHOLE = {"batch": 1, "epochs": 1, "img": 32}  # whole-number settings and their step
CHOICES: dict[str, tuple[str, ...]] = {"optimizer": words(Optimizer), "mosaic": ("on", "off")}
NAMES = (*FLOATS, *WHOLE, *CHOICES)
DEFAULTS: dict[Task, tuple[str, ...]] = {  # spaces that make sense with no --space at all
    Task.DETECT: ("lr=1e-4..1e-2:log", "optimizer=adamw,momentum", "momentum=0.8..0.98", "batch=8,16"),
    Task.CLASSIFY: ("lr=1e-4..1e-2:log", "optimizer=adamw,momentum,rmsprop", "momentum=0.8..0.98", "batch=16,32"),
    Task.SEGMENT: ("lr=1e-4..1e-2:log", "optimizer=adamw,adam", "weight_decay=1e-5..1e-2:log", "batch=4,8"),
}


@dataclass(frozen=True)
class Dimension:
    """One setting a trial draws: from a range (low..high, maybe on a log scale) or from a list of choices."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None

    def draw(self, trial: Any) -> Any:
        """The value for this trial (an `optuna.Trial`), as the trainer takes it."""
        if self.choices is not None:
            value = trial.suggest_categorical(self.name, list(self.choices))
            return value == "on" if self.name == "mosaic" else value
        assert self.low is not None and self.high is not None
        if self.name in WHOLE:
            step = WHOLE[self.name] if not self.log else 1
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=step, log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    @property
    def is_grid(self) -> bool:
        """Whether a grid search can enumerate it (a list or one value, not a range)."""
        return self.choices is not None


def parse_dimension(text: str) -> Dimension:
    """`NAME=LOW..HIGH[:log]`, `NAME=A,B,C` or `NAME=VALUE`, or one line naming the problem."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not value.strip():
        raise ForkliftError(f"--space {text}: write NAME=LOW..HIGH[:log], NAME=A,B,C or NAME=VALUE")
    return _dimension(name, value.strip(), where=f"--space {text}")


def load_space_file(path: Path) -> list[Dimension]:
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
        dimensions.append(_dimension(str(name).replace("-", "_"), text, where=f"{path}: {name}"))
    return dimensions


def search_space(specs: list[str], task: Task) -> list[Dimension]:
    """The dimensions of `--space` options (specs; a .yaml/.yml one is a file of them), or the task's defaults;
    a name given twice is refused."""
    dimensions: list[Dimension] = []
    for spec in specs or DEFAULTS[task]:
        is_file = spec.endswith((".yaml", ".yml")) and "=" not in spec
        dimensions.extend(load_space_file(Path(spec)) if is_file else [parse_dimension(spec)])
    seen: set[str] = set()
    for dimension in dimensions:
        if dimension.name in seen:
            raise ForkliftError(f"--space {dimension.name}: given twice")
        seen.add(dimension.name)
    optimisers = next((d.choices or () for d in dimensions if d.name == "optimizer"), ())
    if "momentum" in seen and not set(optimisers) & set(USES_MOMENTUM):
        raise ForkliftError("--space momentum: needs an optimizer with momentum in the space (momentum, rmsprop)")
    return dimensions


def draw_settings(dimensions: list[Dimension], trial: Any) -> dict[str, Any]:
    """A trial's training settings: each dimension drawn, momentum only where the optimiser uses it."""
    settings: dict[str, Any] = {}
    for dimension in sorted(dimensions, key=lambda d: d.name == "momentum"):  # the optimiser first
        if dimension.name == "momentum" and settings.get("optimizer", Optimizer.ADAMW) not in USES_MOMENTUM:
            continue
        settings[dimension.name] = dimension.draw(trial)
    return settings


def _dimension(name: str, text: str, *, where: str) -> Dimension:
    if name not in NAMES:
        raise ForkliftError(f"{where}: unknown setting {name!r}; one of {', '.join(NAMES)}")
    if name in CHOICES:
        values = tuple(v.strip() for v in text.split(","))
        wrong = [v for v in values if v not in CHOICES[name]]
        if wrong:
            raise ForkliftError(f"{where}: {name} must be among {', '.join(CHOICES[name])}, not {wrong[0]!r}")
        return Dimension(name, choices=values)
    log = text.endswith(":log")
    body = text.removesuffix(":log")
    if ".." in body:
        low, high = (_number(name, part, where) for part in body.split("..", 1))
        if not low < high:
            raise ForkliftError(f"{where}: the range must go from low to high, not {low:g}..{high:g}")
        if log and low <= 0:
            raise ForkliftError(f"{where}: a :log range must start above 0")
        if name == "img" and (low % 32 or high % 32):
            raise ForkliftError(f"{where}: image sizes must be multiples of 32")
        return Dimension(name, low=low, high=high, log=log)
    if log:
        raise ForkliftError(f"{where}: :log applies to a range LOW..HIGH")
    return Dimension(name, choices=tuple(_number(name, part, where) for part in body.split(",")))


def _number(name: str, text: str, where: str) -> Any:
    try:
        value = int(text) if name in WHOLE else float(text)
    except ValueError as exc:
        kind = "a whole number" if name in WHOLE else "a number"
        raise ForkliftError(f"{where}: {name} needs {kind}, not {text.strip()!r}") from exc
    if (name in WHOLE and value < 1) or (name not in WHOLE and value < 0):
        raise ForkliftError(f"{where}: {name} cannot be {value}")
    return value


def _plain(value: Any) -> str:
    """A YAML scalar as typed on the command line (YAML reads on/off as booleans)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
