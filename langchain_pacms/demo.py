"""The bundled demo: one agent session, every strategy, one tight budget.

The session (``langchain_pacms/data/demo_session.json``) is a day of work between a developer and
a coding agent: memory entries, turns, large tool outputs, restatements, and a fact set early that
the last question asks about again. :func:`run_demo` selects from it with each strategy and
reports whether the re-asked fact survived.

Example:
    >>> rows = run_demo(budget_ratio=0.2)
    >>> {row.strategy: row.fact_kept for row in rows}["pacms"]
    True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from langchain_pacms.core import available_strategies
from langchain_pacms.selector import Candidate, ContextSelector

__all__ = ["DemoRow", "DemoSession", "format_table", "load_demo_session", "run_demo"]

DEFAULT_STRATEGIES = ("pacms", "topk", "mmr", "rag", "lastk")


@dataclass(frozen=True)
class DemoSession:
    """The bundled session: candidates, the final question and the ids holding the fact."""

    title: str
    query: str
    fact_ids: tuple[str, ...]
    candidates: tuple[Candidate, ...]


@dataclass(frozen=True)
class DemoRow:
    """One strategy's outcome on the demo session."""

    strategy: str
    kept: int
    total: int
    tokens_kept: int
    tokens_total: int
    budget: int
    fact_kept: bool
    milliseconds: float


def load_demo_session() -> DemoSession:
    """Load the bundled demo session."""
    raw: dict[str, Any] = json.loads(
        (resources.files("langchain_pacms") / "data" / "demo_session.json").read_text("utf-8")
    )
    candidates = tuple(
        Candidate(
            text=item["text"],
            id=item["id"],
            kind=item["kind"],
            position=position,
            mandatory=bool(item.get("mandatory", False)),
            metadata={"role": item.get("role", "")},
        )
        for position, item in enumerate(raw["candidates"])
    )
    return DemoSession(raw["title"], raw["query"], tuple(raw["fact_ids"]), candidates)


def run_demo(
    *,
    budget_ratio: float = 0.2,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    selector: ContextSelector | None = None,
) -> list[DemoRow]:
    """Select from the demo session with each strategy.

    Args:
        budget_ratio: Budget as a fraction of the session's tokens.
        strategies: Registered strategy names to compare.
        selector: Selector to use (default: offline defaults).

    Returns:
        One :class:`DemoRow` per strategy, in the order given.
    """
    unknown = [s for s in strategies if s not in available_strategies()]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {available_strategies()}")
    session = load_demo_session()
    selector = selector or ContextSelector()
    rows = []
    for name in strategies:
        sel = selector.select(
            session.candidates, session.query, budget_ratio=budget_ratio, strategy=name
        )
        kept = set(sel.kept_ids)
        rows.append(
            DemoRow(
                strategy=name,
                kept=len(sel.kept_ids),
                total=len(sel.candidates),
                tokens_kept=sel.tokens_kept,
                tokens_total=sel.tokens_total,
                budget=sel.budget,
                fact_kept=any(f in kept for f in session.fact_ids),
                milliseconds=1000 * sel.timings["total"],
            )
        )
    return rows


def format_table(rows: Sequence[DemoRow]) -> str:
    """Render demo rows as a plain-text table."""
    header = ("strategy", "kept", "tokens kept / budget", "re-asked fact", "time")
    body = [
        (
            r.strategy,
            f"{r.kept}/{r.total}",
            f"{r.tokens_kept:,} / {r.budget:,} (of {r.tokens_total:,})",
            "kept" if r.fact_kept else "DROPPED",
            f"{r.milliseconds:.1f} ms",
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(b) for b in body)])
