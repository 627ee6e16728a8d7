"""Entry point of the ``pacms`` command: one sub-command per module.

Each module's ``register(subparsers)`` adds its parser and sets ``func`` (namespace -> exit code).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from langchain_pacms import __version__

__all__ = ["EVAL_MOVED", "build_parser", "main"]

_COMMAND_MODULES = ("langchain_pacms.cli.demo", "langchain_pacms.cli.serve")
EVAL_MOVED = (
    "pacms eval: the evaluation is its own command now, pacms-bench, with the same sub-commands "
    "and options (pacms eval longmemeval recall -> pacms-bench longmemeval recall); install it "
    "from the repository's bench/ folder: pip install -e ./bench"
)
"""What ``pacms eval ...`` prints (to stderr) before it exits with code 2."""


class _CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: an argument it does not know is its own error, with its usage.

    Plain argparse hands such arguments up, and ``pacms`` then prints the top-level usage.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def _eval_moved(args: argparse.Namespace) -> int:
    print(EVAL_MOVED, file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    """Build the ``pacms`` argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="pacms",
        description="Budgeted, query-aware context selection for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"pacms {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_CommandParser
    )
    for module_name in _COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    moved = subparsers.add_parser(
        "eval", help="moved: the evaluation is the pacms-bench command", add_help=False
    )
    moved.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    moved.set_defaults(func=_eval_moved)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pacms`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # before parsing: argparse reads options right after `eval` (`pacms eval -h`) as its own
    if argv[:1] == ["eval"]:
        return _eval_moved(argparse.Namespace())
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except OSError as err:  # the output cannot be written (`| head` left, a full disk)
        if err.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO):
            raise
        with contextlib.suppress(OSError, ValueError):  # nothing left to flush at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if err.errno != errno.EPIPE:
            print(f"pacms: cannot write the output: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
