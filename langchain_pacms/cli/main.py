"""Entry point of the ``pacms`` command: one sub-command per module.

Each module's ``register(subparsers)`` adds its parser and sets ``func`` (namespace -> exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from langchain_pacms import __version__

__all__ = ["build_parser", "main"]

_COMMAND_MODULES = ("langchain_pacms.cli.demo", "langchain_pacms.cli.serve")


def build_parser() -> argparse.ArgumentParser:
    """Build the ``pacms`` argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="pacms",
        description="Budgeted, query-aware context selection for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"pacms {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pacms`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
