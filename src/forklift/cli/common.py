"""What every verb group of the `forklift` command shares: the parser of one verb with its example, the value
types of options, and the options that repeat across verbs (`--json`, `--runtime` with `--precision`, `--seed`).

Nothing here imports a stage: `forklift --help` and a bad option answer at once.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from forklift.errors import ForkliftError
from forklift.extras import Extra
from forklift.vocabulary import Precision, Runtime, Word, words

EXIT_BAD_INPUT = 2

Handler = Callable[[argparse.Namespace], int]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in descriptions as written."""


class OneLineParser(argparse.ArgumentParser):
    """A parser whose refusal is one line naming the verb and the problem, and where to read more (argparse's own
    prints the whole usage first, which for a verb of many options buries the line that matters)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def verb_parser(
    verbs: Any, name: str, summary: str, example: str, *, extra: Extra | None = None
) -> argparse.ArgumentParser:
    """A verb's parser whose description is its summary followed by an example command. `extra`: the extra of the
    distribution the verb needs, named when one of its modules is not installed."""
    parser: argparse.ArgumentParser = verbs.add_parser(
        name, help=summary, description=f"{summary}\n\nexample:\n  {example}", formatter_class=HelpFormatter
    )
    parser.set_defaults(verb_prog=parser.prog, extra=extra)
    return parser


def threshold(text: str) -> float:
    """A fraction from 0 to 1 (score and overlap thresholds, split shares)."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from exc
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def positive_number(text: str) -> float:
    """A finite number above 0 (sizes, times, rates)."""
    return _finite(text, low=0.0, low_allowed=False)


def non_negative_number(text: str) -> float:
    """A finite number of 0 or more (waits, weights where 0 turns a part off)."""
    return _finite(text, low=0.0, low_allowed=True)


def _finite(text: str, *, low: float, low_allowed: bool) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from exc
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    if value < low or (value == low and not low_allowed):
        raise argparse.ArgumentTypeError(
            f"{text} is not a number {'of' if low_allowed else 'above'} {low:g}{' or more' if low_allowed else ''}"
        )
    return value


def positive(text: str) -> int:
    """A whole number of at least 1 (counts, sizes)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def port(text: str) -> int:
    """A TCP port: a whole number in 1..65535."""
    value = positive(text)
    if value > 65_535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (1..65535)")
    return value


def count_or_auto(text: str) -> int | None:
    """`auto` (None: let forklift choose) or a positive whole number."""
    return None if text == "auto" else positive(text)


def positive_list(text: str) -> list[int]:
    """A comma-separated list of positive whole numbers, such as `1,2,4`."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} needs positive whole numbers")
    return values


def optional(kind: type[Word], value: str | None) -> Word | None:
    """An option's word (already one of argparse's choices) as its typed name, or None when it was not given."""
    return None if value is None else kind(value)


def add_json(parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, help: str | None = None) -> None:
    """`--json`: machine-readable output instead of the table or summary a person reads."""
    parser.add_argument("--json", action="store_true", help=help)


def add_runtime(parser: argparse.ArgumentParser, help: str = "engine (default: by model format)") -> None:
    """`--runtime` and `--precision`: which engine runs the model, and in which number format."""
    parser.add_argument("--runtime", choices=words(Runtime), help=help)
    parser.add_argument(
        "--precision",
        choices=words(Precision),
        help="f32, bf16 (OpenVINO) or int8 (the graph 'forklift models quantize' made and checked); "
        "default: the model's forklift.json, else f32",
    )


def add_seed(parser: argparse.ArgumentParser) -> None:
    """`--seed`: the same files or weights for the same seed."""
    parser.add_argument("--seed", type=int, default=0)


def add_data(parser: argparse.ArgumentParser, *, flag: bool = False, help: str = "a forklift data set folder") -> None:
    """A forklift data set folder (or what ``help`` says), as the positional DATA or as `--data DATA`."""
    if flag:
        parser.add_argument("--data", type=Path, required=True, metavar="DATA", help=help)
    else:
        parser.add_argument("data", type=Path, metavar="DATA", help=help)


def check_folder_to_write(out: Path, *, what: str) -> None:
    """Refuse, before any work, a folder to write that cannot be: a file by its name, or under a file."""
    if out.exists() and not out.is_dir():
        raise ForkliftError(f"{what} {out}: a file, not a folder to write in")
    above = next((p for p in out.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ForkliftError(f"{what} {out}: cannot be made, {above} is a file")
