"""``pacms demo``: every strategy on the bundled agent session at a tight budget."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from langchain_pacms.demo import DEFAULT_STRATEGIES, format_table, load_demo_session, run_demo

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    session = load_demo_session()
    rows = run_demo(budget_ratio=args.budget_ratio, strategies=args.strategies)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    print(f"{session.title}\n")
    print(f"{len(session.candidates)} candidates; final question: {session.query!r}")
    print(f"budget: {args.budget_ratio:.0%} of the session's tokens (tokenizer o200k_base)\n")
    print(format_table(rows))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``demo`` sub-command."""
    parser = subparsers.add_parser(
        "demo",
        help="compare strategies on a bundled agent session",
        description=(
            "Select from a bundled agent session (memories, turns, tool outputs, restatements) "
            "with each strategy under one tight budget, and show whether the fact the final "
            "question re-asks survived."
        ),
    )
    parser.add_argument(
        "--budget-ratio", type=float, default=0.2, help="budget as a fraction of all tokens"
    )
    parser.add_argument(
        "--strategies", nargs="+", default=list(DEFAULT_STRATEGIES), help="strategies to compare"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=_run)
