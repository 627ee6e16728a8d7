"""Request and response bodies of the selection service (pydantic; shown in the OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from langchain_pacms.core import COST_EXPONENT_RANGE
from langchain_pacms.remote import MAX_INT

__all__ = [
    "MAX_INT",
    "CandidateIn",
    "OptionValue",
    "SelectDebugResponse",
    "SelectRequest",
    "SelectResponse",
    "VerdictOut",
]

KindName = Literal["system", "memory", "turn", "tool", "document"]

MAX_OPTION_FLOAT = 1e6
"""Largest magnitude of a numeric strategy option (every built-in option is far inside it)."""

OptionValue = (
    Annotated[bool, Field(strict=True)]
    | Annotated[int, Field(ge=-MAX_INT, le=MAX_INT)]
    | Annotated[float, Field(ge=-MAX_OPTION_FLOAT, le=MAX_OPTION_FLOAT, allow_inf_nan=False)]
    | Annotated[str, Field(max_length=64)]
    | None
)
"""A strategy option's value: a bool, a bounded int or finite float, a short string or null."""

OPTION_RANGES: dict[str, tuple[float, float]] = {"cost_exponent": COST_EXPONENT_RANGE}
"""Ranges of the options that overflow on large values (``cost_exponent``)."""


class CandidateIn(BaseModel):
    """One candidate sent for selection."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(description="The text that is scored and counted.")
    id: str | None = Field(
        default=None, description="Unique id; defaults to the index in the list."
    )
    kind: KindName = Field(default="turn", description="What the candidate is.")
    mandatory: bool = Field(default=False, description="Always kept (system prompt, last turn).")
    tokens: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="Token cost, at most 2**53; counted with o200k_base when absent.",
    )
    position: int | None = Field(
        default=None,
        ge=-MAX_INT,
        le=MAX_INT,
        description="Chronological position (larger is newer), in [-2**53, 2**53]; default: index.",
    )
    values: list[str] | None = Field(
        default=None,
        description="The exact values the candidate holds (paths, ids, numbers). Given for "
        "every candidate, pacms covers these values instead of the embeddings' similarity.",
    )


class SelectRequest(BaseModel):
    """A selection request: a pool, a query and exactly one budget."""

    model_config = ConfigDict(extra="forbid", strict=True)

    candidates: list[CandidateIn] = Field(description="The pool, in chronological order.")
    query: str = Field(min_length=1, description="What the kept context should serve.")
    budget_tokens: int | None = Field(
        default=None, gt=0, le=MAX_INT, description="Absolute token budget, at most 2**53."
    )
    budget_ratio: float | None = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Budget as a fraction of the pool's tokens, in (0, 1].",
    )
    strategy: str | None = Field(
        default=None, description="Strategy name (see GET /strategies); default: the server's."
    )
    strategy_options: dict[str, OptionValue] = Field(
        default_factory=dict,
        description="Keyword options of the strategy: bools, ints within 2**53, finite numbers "
        "within 1e6, strings of at most 64 characters or null.",
    )
    relevant_ids: list[str] = Field(
        default_factory=list,
        description="Ids of candidates known to matter: each counts as relevant as the most "
        "relevant candidate.",
    )

    @field_validator("strategy_options")
    @classmethod
    def _in_range(cls, options: dict[str, Any]) -> dict[str, Any]:
        for name, (low, high) in OPTION_RANGES.items():
            value = options.get(name)
            if isinstance(value, (int, float)) and not low <= value <= high:
                raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
        return options

    @model_validator(mode="after")
    def _one_budget(self) -> SelectRequest:
        if (self.budget_tokens is None) == (self.budget_ratio is None):
            raise ValueError("pass exactly one of budget_tokens or budget_ratio")
        if not self.query.strip():
            raise ValueError("query is blank")
        given = sum(c.tokens or 0 for c in self.candidates)
        if given > MAX_INT:
            raise ValueError(f"candidates: the tokens given add up to {given}, over 2**53")
        return self


class SelectResponse(BaseModel):
    """The verdict in brief."""

    kept_ids: list[str] = Field(description="Kept ids in chronological (input) order.")
    pick_order: list[str] = Field(description="Kept ids in the order the strategy picked them.")
    strategy: str = Field(description="Strategy that ran (lastk when it fell back).")
    budget: int = Field(description="The token budget used.")
    tokens_total: int = Field(description="Tokens in the pool.")
    tokens_kept: int = Field(description="Tokens kept.")
    tokens_dropped: int = Field(description="Tokens dropped.")
    over_budget: bool = Field(description="Mandatory candidates alone exceed the budget.")
    fell_back: bool = Field(description="Embedding failed; recency was used.")
    error: str | None = Field(description="Why it fell back.")
    timings: dict[str, float] = Field(description="Seconds per phase on the server.")


class VerdictOut(BaseModel):
    """One candidate's outcome."""

    id: str
    kind: str
    position: int
    tokens: int
    mandatory: bool
    kept: bool
    relevance: float = Field(description="max(0, cos(candidate, query)).")
    gain: float | None = Field(description="Score at pick time; null when dropped.")
    pick_rank: int | None = Field(description="Rank in the pick order; null when dropped.")


class SelectDebugResponse(SelectResponse):
    """The verdict with every candidate's scores."""

    candidates: list[VerdictOut] = Field(description="One verdict per candidate, input order.")
    info: dict[str, Any] = Field(description="Strategy diagnostics.")
