"""The `forklift` command: one module per verb group, each verb's options beside the handler that uses them.

A bad input ends with one line naming the input and the problem, exit code 2, never a traceback. Verb modules
import their stage inside the handler, so start-up and `--help` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from forklift import __version__
from forklift.cli import app, data, distributed, ml, models, serving, training, tuning
from forklift.cli.common import EXIT_BAD_INPUT, Handler, HelpFormatter, OneLineParser
from forklift.errors import ForkliftError
from forklift.extras import install_hint, missing_module

GROUPS = (
    models,
    serving,
    data,
    training,
    distributed,
    tuning,
    ml,
    app,
)  # in the order `forklift --help` lists their verbs


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="forklift",
        description="forklift: train big, serve fast. An open deep-learning platform for computer vision.",
        formatter_class=HelpFormatter,
        epilog="Run 'forklift VERB --help' for a verb's options and an example.",
    )
    parser.add_argument("--version", action="version", version=f"forklift {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for group in GROUPS:
        group.register(verbs)
    return parser


def _verb_parser(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> tuple[
    argparse.ArgumentParser, list[str]
]:  # fmt: skip
    """The parser of the verb that was given (`models export`'s, not `models`'), and the arguments after its name."""
    while True:
        chooser = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, chooser.dest, None) if chooser is not None else None
        if chooser is None or name not in argv:
            return parser, argv
        argv = argv[argv.index(name) + 1 :]
        parser = chooser.choices[name]


def _parsed(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments; a positional given after an option (`models export M --to onnx OUT`), which argparse's
    first pass leaves over, is taken by the verb's own parser, as its usage line promises. What is still left over
    is said by the verb's parser, which names the verb and its --help, not the top level's."""
    args, unknown = parser.parse_known_args(argv)
    if not unknown:
        return args
    verb, rest = _verb_parser(parser, args, argv)
    try:
        again, unknown = verb.parse_known_intermixed_args(rest)
    except TypeError:  # a verb whose last positional takes all that follows (run's command): as it was parsed
        pass
    else:
        if not unknown:
            return argparse.Namespace(**(vars(args) | vars(again)))
    verb.error(f"unrecognized arguments: {' '.join(unknown)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    args = _parsed(parser, given)
    args.argv = given  # as typed: a verb may run itself again (--nproc)
    handler: Handler = args.handler
    try:
        return handler(args)
    except ForkliftError as exc:
        print(f"forklift: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as exc:  # an extra that is not installed: say which, in one line
        module = missing_module(exc)
        if module is None:
            raise
        print(f"forklift: error: {install_hint(module, needed_by=args.verb_prog, extra=args.extra)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: not an error of ours
        sys.stderr.close()
        return 0
