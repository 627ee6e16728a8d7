"""The bundled demo: one coding-agent session, every strategy, one tight budget.

Its final question needs two facts (one restated many times, one said once); each row tells
whether a kept candidate still states each fact.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from langchain_pacms.budget import Budget
from langchain_pacms.core import available_strategies
from langchain_pacms.selector import Candidate, ContextSelector, Selector

__all__ = ["DemoFact", "DemoRow", "DemoSession", "format_table", "load_demo_session", "run_demo"]

DEFAULT_STRATEGIES = ("pacms", "topk", "mmr", "rag", "lastk")
DEFAULT_BUDGET_RATIO = 0.015


@dataclass(frozen=True)
class DemoFact:
    """A fact the final question needs: stated by any text that contains every needle."""

    name: str
    needles: tuple[str, ...]

    def stated_in(self, text: str) -> bool:
        """Whether ``text`` states this fact."""
        return all(needle in text for needle in self.needles)


@dataclass(frozen=True)
class DemoSession:
    """The bundled session: candidates, the final question and the facts it needs."""

    title: str
    query: str
    facts: tuple[DemoFact, ...]
    candidates: tuple[Candidate, ...]

    def fact_ids(self, fact: DemoFact) -> tuple[str, ...]:
        """Ids of the candidates whose text states ``fact``."""
        return tuple(str(c.id) for c in self.candidates if fact.stated_in(c.text))


@dataclass(frozen=True)
class DemoRow:
    """One strategy's outcome on the demo session."""

    strategy: str
    kept: int
    total: int
    tokens_kept: int
    tokens_total: int
    budget: int
    facts_kept: tuple[bool, ...]
    milliseconds: float
    over_budget: bool = False
    """The mandatory candidates alone exceed the budget: only they were kept, over it."""


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
    facts = tuple(DemoFact(f["name"], tuple(f["needles"])) for f in raw["facts"])
    return DemoSession(raw["title"], raw["query"], facts, candidates)


def run_demo(
    *,
    budget_ratio: float = DEFAULT_BUDGET_RATIO,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    selector: Selector | None = None,
) -> list[DemoRow]:
    """One :class:`DemoRow` per strategy (timed on a warm embedding cache), in the order given.

    A strategy named twice gets one row (where it is first named).
    """
    strategies = list(dict.fromkeys(strategies))
    unknown = [s for s in strategies if s not in available_strategies()]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {available_strategies()}")
    session = load_demo_session()
    selector = selector or ContextSelector()
    # untimed warm-up: no strategy is charged the cold embedding
    budget = Budget(ratio=budget_ratio)
    selector.select(session.candidates, session.query, budget)
    rows = []
    for name in strategies:
        sel = selector.select(session.candidates, session.query, budget, strategy=name)
        kept_ids = set(sel.kept_ids)
        kept_texts = [c.text for c in sel.candidates if str(c.id) in kept_ids]
        rows.append(
            DemoRow(
                strategy=name,
                kept=len(sel.kept_ids),
                total=len(sel.candidates),
                tokens_kept=sel.tokens_kept,
                tokens_total=sel.tokens_total,
                budget=sel.budget,
                facts_kept=tuple(any(f.stated_in(t) for t in kept_texts) for f in session.facts),
                milliseconds=1000 * sel.timings["total"],
                over_budget=sel.over_budget,
            )
        )
    return rows


def format_table(rows: Sequence[DemoRow], fact_names: Sequence[str]) -> str:
    """Render demo rows as a plain-text table, one column per fact named in ``fact_names``."""
    header = ("strategy", "kept", "tokens kept / budget", *fact_names, "warm time")
    body = [
        (
            r.strategy,
            f"{r.kept}/{r.total}",
            f"{r.tokens_kept:,} / {r.budget:,} (of {r.tokens_total:,})",
            *("kept" if k else "DROPPED" for k in r.facts_kept),
            f"{r.milliseconds:.1f} ms",
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(b) for b in body)])
