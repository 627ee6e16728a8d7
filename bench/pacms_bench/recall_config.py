"""Strategy specs, the sweep's configuration, and its result rows and per-question results."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from langchain_pacms.core import Problem, solve
from pacms_bench.redundancy import STYLES

__all__ = [
    "BUDGET_BASES",
    "DEFAULT_BUDGETS",
    "DEFAULT_LEVELS",
    "DEFAULT_STRATEGIES",
    "ROW_FIELDS",
    "QuestionResult",
    "RecallConfig",
    "RecallRow",
    "StrategySpec",
    "budget_tokens",
    "column_options",
    "parse_strategy_spec",
]

DEFAULT_LEVELS: tuple[int, ...] = (0, 2, 4, 8)
"""Redundancy levels R of the study."""

DEFAULT_BUDGETS: tuple[float, ...] = (0.05, 0.10, 0.20, 0.45, 0.70)
"""Budget fractions: the study's three (20%, 45%, 70%) plus two tighter ones."""

DEFAULT_STRATEGIES: tuple[str, ...] = ("topk", "mmr", "lastk", "pacms", "rag")
"""Strategies compared by default (the study's four plus ``rag``)."""

BUDGET_BASES: tuple[str, ...] = ("pool", "original")
"""What a budget fraction is a fraction of: the padded pool, or the original history."""

ROW_FIELDS: tuple[str, ...] = (
    "question_id",
    "type",
    "R",
    "budget",
    "strategy",
    "recall",
    "kept_evidence",
    "n_evidence",
    "kept_tokens",
    "budget_tokens",
    "pool_tokens",
    "n_candidates",
    "n_kept",
)
"""Columns of one result row (the JSON's ``columns``)."""


# -- strategy specs ---------------------------------------------------------------------------


def _parse_value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


@dataclass(frozen=True)
class StrategySpec:
    """One column of the sweep: a registered strategy with fixed options.

    Attributes:
        label: Column label (the spec string as given, e.g. ``pacms:relevance_weight=0.5``).
        name: Registered strategy name.
        options: Keyword options passed to the strategy.
    """

    label: str
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Run the strategy once on a two-item problem to reject bad names and options early.

        Raises:
            ValueError: For an unknown strategy, an unknown option or a bad option value.
        """
        problem = Problem.build(np.eye(2), np.array([1.0, 0.0]), tokens=[1, 1], budget=1)
        try:
            solve(problem, self.name, **dict(self.options))
        except (TypeError, ValueError) as err:
            raise ValueError(f"strategy spec {self.label!r}: {err}") from None


def parse_strategy_spec(spec: str | StrategySpec) -> StrategySpec:
    """Parse ``name`` or ``name:key=value,key=value`` into a :class:`StrategySpec`.

    Values are read as ``true``/``false``, ``none``, int, float, else kept as strings (so
    ``fill=diverse`` works). The label is the spec with surrounding blanks removed.

    Args:
        spec: The spec string (or an existing spec, returned as is).

    Returns:
        The parsed spec.

    Raises:
        ValueError: For an empty name, an option without ``=``, or a repeated option.

    Example:
        >>> parse_strategy_spec("pacms:relevance_weight=0.5,cost_exponent=0").options
        {'relevance_weight': 0.5, 'cost_exponent': 0}
    """
    if isinstance(spec, StrategySpec):
        return spec
    label = spec.strip()
    name, sep, rest = label.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"strategy spec {spec!r} has no strategy name")
    options: dict[str, Any] = {}
    if sep:
        for part in rest.split(","):
            if not part.strip():
                continue
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq or not key:
                raise ValueError(
                    f"strategy spec {spec!r}: option {part.strip()!r} is not key=value"
                )
            if key in options:
                raise ValueError(f"strategy spec {spec!r}: option {key!r} given twice")
            options[key] = _parse_value(value)
    return StrategySpec(label=label, name=name, options=options)


# -- configuration and results ------------------------------------------------------------------


@dataclass(frozen=True)
class RecallConfig:
    """What a sweep runs. Build it with :meth:`create`, which validates and parses.

    Attributes:
        levels: Redundancy levels R (restatements per filler round).
        budgets: Budget fractions in ``(0, 1]``.
        strategies: The columns.
        style: Restatement style, ``"recap"`` or ``"full"``.
        budget_base: ``"pool"`` or ``"original"``.
        seed: Seed of the redundancy injection (the same for every question).
    """

    levels: tuple[int, ...]
    budgets: tuple[float, ...]
    strategies: tuple[StrategySpec, ...]
    style: str = "recap"
    budget_base: str = "pool"
    seed: int = 0

    @classmethod
    def create(
        cls,
        *,
        levels: Iterable[int] = DEFAULT_LEVELS,
        budgets: Iterable[float] = DEFAULT_BUDGETS,
        strategies: Iterable[str | StrategySpec] = DEFAULT_STRATEGIES,
        style: str = "recap",
        budget_base: str = "pool",
        seed: int = 0,
        check_strategies: bool = True,
    ) -> RecallConfig:
        """Validate the settings and parse the strategy specs.

        Args:
            levels: Redundancy levels (distinct ints >= 0); kept in the given order.
            budgets: Budget fractions (distinct, in ``(0, 1]``).
            strategies: Strategy names or ``name:key=value,...`` specs (distinct labels).
            style: ``"recap"`` or ``"full"``.
            budget_base: ``"pool"`` or ``"original"``.
            seed: Injection seed.
            check_strategies: Dry-run every spec on a tiny problem (see
                :meth:`StrategySpec.check`).

        Returns:
            The configuration.

        Raises:
            ValueError: For any invalid setting.
        """
        lv = tuple(levels)
        for level in lv:
            if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or level < 0:
                raise ValueError(f"levels must be ints >= 0, got {level!r}")
        bd = tuple(float(b) for b in budgets)
        for b in bd:
            if not 0.0 < b <= 1.0:
                raise ValueError(f"budgets must be fractions in (0, 1], got {b!r}")
        specs = tuple(parse_strategy_spec(s) for s in strategies)
        if not lv or not bd or not specs:
            raise ValueError("levels, budgets and strategies must each be non-empty")
        named: tuple[tuple[str, list[Any]], ...] = (
            ("levels", list(lv)),
            ("budgets", list(bd)),
            ("strategies", [s.label for s in specs]),
        )
        for what, keys in named:
            if len(set(keys)) != len(keys):
                raise ValueError(f"{what} must be distinct, got {keys}")
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {style!r}")
        if budget_base not in BUDGET_BASES:
            raise ValueError(f"budget_base must be one of {BUDGET_BASES}, got {budget_base!r}")
        if check_strategies:
            for spec in specs:
                spec.check()
        return cls(tuple(int(v) for v in lv), bd, specs, style, budget_base, int(seed))

    @property
    def labels(self) -> tuple[str, ...]:
        """Column labels, in order."""
        return tuple(s.label for s in self.strategies)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "levels": list(self.levels),
            "budgets": list(self.budgets),
            "strategies": [
                {"label": s.label, "name": s.name, "options": dict(s.options)}
                for s in self.strategies
            ],
            "style": self.style,
            "budget_base": self.budget_base,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecallConfig:
        """Inverse of :meth:`to_dict` (strategies are not dry-run)."""
        specs = [
            StrategySpec(s["label"], s["name"], dict(s.get("options", {})))
            for s in data["strategies"]
        ]
        return cls.create(
            levels=data["levels"],
            budgets=data["budgets"],
            strategies=specs,
            style=data.get("style", "recap"),
            budget_base=data.get("budget_base", "pool"),
            seed=data.get("seed", 0),
            check_strategies=False,
        )


@dataclass(frozen=True)
class RecallRow:
    """One cell of one question: a strategy under one budget at one redundancy level.

    Attributes:
        question_id: LongMemEval question id.
        type: Question type.
        R: Redundancy level.
        budget: Budget fraction.
        strategy: Strategy label.
        recall: ``kept_evidence / n_evidence``.
        kept_evidence: Evidence rounds kept.
        n_evidence: Evidence rounds in the pool.
        kept_tokens: Tokens kept.
        budget_tokens: The budget in tokens.
        pool_tokens: Tokens of the whole padded pool.
        n_candidates: Items in the padded pool.
        n_kept: Items kept.
    """

    question_id: str
    type: str
    R: int
    budget: float
    strategy: str
    recall: float
    kept_evidence: int
    n_evidence: int
    kept_tokens: int
    budget_tokens: int
    pool_tokens: int
    n_candidates: int
    n_kept: int

    def values(self) -> list[Any]:
        """The row as a list in :data:`ROW_FIELDS` order (recall rounded to 6 places)."""
        out = [getattr(self, f) for f in ROW_FIELDS]
        out[ROW_FIELDS.index("recall")] = round(self.recall, 6)
        return out


@dataclass
class QuestionResult:
    """Rows and bookkeeping of one question.

    Attributes:
        question_id: The question.
        rows: Its result rows.
        timings: Seconds per phase (``prepare``: injection and counting; ``build``:
            ``selector.prepare`` per level (embedding, checks, reweighting, the problem);
            ``solve:<label>`` per strategy)
            and ``cpu``, the CPU seconds of this process for the question (less sensitive to
            other load on the machine than the wall-clock phases).
        n_texts: Distinct texts embedded for this question.
        cache_hits: Embedding cache hits while preparing this question.
        cache_misses: Texts the embedding model had to embed.
        cached_cells: Cells read from the result cache instead of computed.
    """

    question_id: str
    rows: list[RecallRow]
    timings: dict[str, float]
    n_texts: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cached_cells: int = 0


# -- options and budgets ---------------------------------------------------------------------


def column_options(selector: Any, config: RecallConfig) -> dict[str, dict[str, Any]]:
    """The options every column of ``config`` runs with under ``selector``, by label.

    As ``ContextSelector.resolve_options`` gives them: ``pacms`` gets the embedder's kernel
    threshold, gain floor and relevance feedback unless the column sets them.
    """
    return {
        spec.label: selector.resolve_options(spec.name, spec.options)[1]
        for spec in config.strategies
    }


def budget_tokens(base_tokens: int, fraction: float) -> int:
    """``max(1, floor(base_tokens * fraction))``: the selector's ``budget_ratio`` rule."""
    return max(1, math.floor(base_tokens * fraction))
