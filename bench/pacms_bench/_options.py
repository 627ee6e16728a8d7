"""Command-line options and errors the ``pacms-bench`` harnesses share.

Each ``add_`` helper adds an option with the same flag, type and default wherever it appears;
the help text is the harness's own. ``parser`` is an ``argparse`` parser or argument group.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["add_check", "add_result_cache", "add_sample", "add_split", "add_values", "fail"]


def add_split(parser: Any, help: str) -> None:
    """``--split oracle|s`` (default ``s``): the LongMemEval split read from a data folder."""
    parser.add_argument("--split", choices=("oracle", "s"), default="s", help=help)


def add_sample(parser: Any, n_help: str, all_help: str, n_type: Callable[[str], Any] = int) -> Any:
    """``--n`` (questions to sample, default 100) or ``--all``; returns their exclusive group."""
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--n", type=n_type, default=100, help=n_help)
    size.add_argument("--all", action="store_true", help=all_help)
    return size


def add_values(
    parser: Any,
    flag: str,
    default: Iterable[Any],
    metavar: str,
    help: str,
    type: Callable[[str], Any] = str,
) -> None:
    """``flag`` followed by one or more values of ``type`` (default: the ``default`` list)."""
    parser.add_argument(
        flag, type=type, nargs="+", default=list(default), metavar=metavar, help=help
    )


def add_result_cache(parser: Any, help: str, prune_help: str) -> None:
    """``--result-cache on|off`` (default ``on``), then ``--prune-result-cache``."""
    parser.add_argument("--result-cache", choices=("on", "off"), default="on", help=help)
    parser.add_argument("--prune-result-cache", action="store_true", help=prune_help)


def add_check(parser: Any, help: str, quiet_help: str = "no progress bar or status lines") -> None:
    """``--no-check`` (``check`` false: no test call before the run), then ``--quiet``."""
    parser.add_argument("--no-check", dest="check", action="store_false", help=help)
    parser.add_argument("--quiet", action="store_true", help=quiet_help)


def fail(message: str) -> int:
    """Print ``error: <message>`` to stderr; returns 2, the exit status of a usage error."""
    print(f"error: {message}", file=sys.stderr)
    return 2
