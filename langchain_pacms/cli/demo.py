"""``pacms demo``: every strategy on the bundled agent session at a tight budget."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from langchain_pacms.core import available_strategies
from langchain_pacms.demo import (
    DEFAULT_BUDGET_RATIO,
    DEFAULT_STRATEGIES,
    format_table,
    load_demo_session,
    run_demo,
)

__all__ = ["budget_ratio", "register"]


def budget_ratio(value: str) -> float:
    """Parse a budget ratio for argparse: a number in ``(0, 1]``.

    Example:
        >>> budget_ratio("0.25")
        0.25
    """
    try:
        ratio = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0 < ratio <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return ratio


def _run(args: argparse.Namespace) -> int:
    session = load_demo_session()
    rows = run_demo(budget_ratio=args.budget_ratio, strategies=args.strategies)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    print(f"{session.title}\n")
    print(f"{len(session.candidates)} candidates; final question: {session.query!r}")
    print(f"budget: {100 * args.budget_ratio:.3g}% of the session's tokens (tokenizer o200k_base)")
    for fact in session.facts:
        ids = session.fact_ids(fact)
        print(f"fact {fact.name!r}: stated by {len(ids)} candidates ({', '.join(ids)})")
    print()
    print(format_table(rows, [f.name for f in session.facts]))
    over = next((r for r in rows if r.over_budget), None)
    if over is not None:
        mandatory = sum(c.mandatory for c in session.candidates)
        print(
            f"\nthe budget ({over.budget:,} tokens) is smaller than the {mandatory} mandatory "
            f"candidates that must be kept ({over.tokens_kept:,} tokens): each selection kept "
            "only those, over the budget"
        )
    print("\ntimes are warm: one untimed pass embedded the session first")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``demo`` sub-command."""
    parser = subparsers.add_parser(
        "demo",
        help="compare strategies on a bundled agent session",
        description=(
            "Select from a bundled agent session (memories, turns, tool outputs, restatements) "
            "with each strategy under one tight budget, and show whether each fact the final "
            "question needs survived."
        ),
    )
    parser.add_argument(
        "--budget-ratio",
        type=budget_ratio,
        default=DEFAULT_BUDGET_RATIO,
        help=f"budget as a fraction of all tokens, in (0, 1] (default {DEFAULT_BUDGET_RATIO})",
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        choices=available_strategies(),
        default=list(DEFAULT_STRATEGIES),
        help="strategies to compare",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=_run)
