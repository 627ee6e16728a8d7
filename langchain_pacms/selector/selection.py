"""What a selection takes and gives: :class:`Candidate`, :class:`Selection`, :class:`Verdict`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core import Pick, Strategy
from langchain_pacms.errors import PACMSError

__all__ = [
    "KINDS",
    "Candidate",
    "CandidateInput",
    "EmbeddingError",
    "Kind",
    "Selection",
    "Verdict",
    "selection_of",
    "strategy_label",
]

Kind = Literal["system", "memory", "turn", "tool", "document"]
KINDS: frozenset[str] = frozenset({"system", "memory", "turn", "tool", "document"})


@dataclass(frozen=True)
class Candidate:
    """One selectable unit of context.

    Attributes:
        text: The text that is scored and counted.
        id: Stable identifier; defaults to the candidate's index in the pool.
        kind: ``system``, ``memory``, ``turn``, ``tool`` or ``document``.
        position: Chronological position (larger is newer); defaults to the pool index.
        mandatory: Always kept (system prompts, the latest user turn).
        tokens: Token cost; counted with the selector's counter when ``None``.
        metadata: Free-form data carried through to the :class:`Selection`.
        source: What the candidate came from (a ``Document``, messages, a store item).

    Example:
        >>> Candidate("The staging DB listens on port 6543.", id="db").kind
        'turn'
    """

    text: str
    id: str | None = None
    kind: str = "turn"
    position: int | None = None
    mandatory: bool = False
    tokens: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: Any = field(default=None, compare=False, repr=False)


CandidateInput = Candidate | str


@dataclass(frozen=True)
class Verdict:
    """One candidate's outcome, as the inspector and the selection log show it."""

    id: str
    kind: str
    position: int
    tokens: int
    mandatory: bool
    kept: bool
    relevance: float
    gain: float | None
    pick_rank: int | None


@dataclass(frozen=True)
class Selection:
    """The result of one selection.

    Attributes:
        candidates: The normalised candidates, in their original order.
        kept_ids: Ids kept, in original (chronological input) order.
        pick_order: Ids kept, in the order the strategy picked them (mandatory first).
        relevance: Per-candidate relevance to the query, as strategies rank by it:
            ``max(0, cos(candidate, query))``, or the embedder's own (the built-in one's
            IDF-weighted sparse relevance); 0 when nothing was scored.
        gains: Per-candidate score at pick time (marginal gain for ``pacms``); absent if dropped.
        tokens: Per-candidate token counts.
        tokens_total: Tokens in the whole pool.
        tokens_kept: Tokens in the kept candidates.
        tokens_dropped: ``tokens_total - tokens_kept``.
        budget: The token budget used.
        strategy: Strategy that produced the pick (``lastk`` when it fell back).
        over_budget: The mandatory candidates alone exceed the budget (then only they are kept).
        fell_back: Embedding failed and recency was used instead.
        error: What went wrong when it fell back.
        timings: Seconds spent per phase (``tokens``, ``embed``, ``solve``, ``total``).
        info: Strategy diagnostics. ``info["query_has_no_words"]``: the query had no words, so
            the newest candidates that fit were kept (not a failure: no ``fell_back``);
            ``info["pool_has_no_words"]``: the same for a pool without words under the built-in
            lexical embedder.

    Example:
        >>> from langchain_pacms import ContextSelector
        >>> sel = ContextSelector().select(["blue plums", "red apples"], "red", budget=3)
        >>> sel.kept_ids, sel.tokens_kept, sel.fell_back
        (('1',), 2, False)
    """

    candidates: tuple[Candidate, ...]
    kept_ids: tuple[str, ...]
    pick_order: tuple[str, ...]
    relevance: Mapping[str, float]
    gains: Mapping[str, float]
    tokens: Mapping[str, int]
    tokens_total: int
    tokens_kept: int
    tokens_dropped: int
    budget: int
    strategy: str
    over_budget: bool = False
    fell_back: bool = False
    error: str | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies and pickles rebuild the read-only maps (a ``MappingProxyType`` pickles not)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        proxies = tuple(k for k, v in values.items() if isinstance(v, MappingProxyType))
        plain = {k: dict(v) if k in proxies else v for k, v in values.items()}
        return (_selection, (plain, proxies))

    @property
    def kept(self) -> list[Candidate]:
        """Kept candidates in original order."""
        keep = set(self.kept_ids)
        return [c for c in self.candidates if c.id in keep]

    @property
    def dropped_ids(self) -> tuple[str, ...]:
        """Ids not kept, in original order."""
        keep = set(self.kept_ids)
        return tuple(c.id for c in self.candidates if c.id not in keep)  # type: ignore[misc]

    def verdicts(self) -> list[Verdict]:
        """One :class:`Verdict` per candidate, in original order."""
        rank = {cid: i for i, cid in enumerate(self.pick_order)}
        return [
            Verdict(
                id=str(c.id),
                kind=c.kind,
                position=int(c.position or 0),
                tokens=self.tokens[str(c.id)],
                mandatory=c.mandatory,
                kept=str(c.id) in rank,
                relevance=self.relevance.get(str(c.id), 0.0),
                gain=self.gains.get(str(c.id)),
                pick_rank=rank.get(str(c.id)),
            )
            for c in self.candidates
        ]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary with every candidate's verdict (no candidate text)."""
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "tokens_total": self.tokens_total,
            "tokens_kept": self.tokens_kept,
            "tokens_dropped": self.tokens_dropped,
            "kept": len(self.kept_ids),
            "dropped": len(self.candidates) - len(self.kept_ids),
            "over_budget": self.over_budget,
            "fell_back": self.fell_back,
            "error": self.error,
            "timings": dict(self.timings),
            "info": dict(self.info),
            "candidates": [v.__dict__ for v in self.verdicts()],
        }


class EmbeddingError(PACMSError, ValueError):
    """An embedder returned vectors that cannot be scored (wrong shape, NaN, inf or all zero).

    A selector treats it as an embedding failure: recency, or raised under ``strict``.

    Args:
        message: What is wrong.
        zero_query: The query's embedding is all zero (and nothing checked before it failed).
        zero_documents: Every document embedding is all zero (and nothing checked before it
            failed).
    """

    def __init__(
        self, message: str, *, zero_query: bool = False, zero_documents: bool = False
    ) -> None:
        super().__init__(message)
        self.zero_query = zero_query
        self.zero_documents = zero_documents


def _selection(values: dict[str, Any], proxies: tuple[str, ...]) -> Selection:
    """A :class:`Selection` from its fields, ``proxies`` read-only again (see ``__reduce__``)."""
    fixed: dict[str, Any] = {
        k: MappingProxyType(v) if k in proxies else v for k, v in values.items()
    }
    return Selection(**fixed)


def strategy_label(strategy: str | Strategy) -> str:
    """A strategy's name: the registered name, or a callable's ``__name__``."""
    return strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "custom")


def selection_of(
    cands: Sequence[Candidate],
    tokens: NDArray[np.int64],
    budget: int,
    pick: Pick,
    relevance: NDArray[np.float32],
    strategy: str | Strategy,
    *,
    timings: dict[str, float],
    fell_back: bool = False,
    error: str | None = None,
    no_words: str | None = None,
) -> Selection:
    """The :class:`Selection` that ``pick`` makes of a normalised pool.

    ``no_words``: the ``info`` flag saying what had no words to score by, if anything.
    """
    ids = [str(c.id) for c in cands]
    kept_mask = np.zeros(len(cands), dtype=bool)
    kept_mask[pick.order] = True
    kept_tokens = int(tokens[kept_mask].sum())
    total = int(tokens.sum())
    order = pick.order.tolist()
    scores = np.asarray(pick.scores, dtype=np.float64)[pick.order].tolist()
    info = dict(pick.info or {})
    if no_words is not None:
        info[no_words] = True
    return Selection(
        candidates=tuple(cands),
        kept_ids=tuple(i for i, k in zip(ids, kept_mask.tolist()) if k),
        pick_order=tuple(ids[j] for j in order),
        relevance=MappingProxyType(dict(zip(ids, relevance.tolist()))),
        gains=MappingProxyType({ids[j]: g for j, g in zip(order, scores) if math.isfinite(g)}),
        tokens=MappingProxyType(dict(zip(ids, tokens.tolist()))),
        tokens_total=total,
        tokens_kept=kept_tokens,
        tokens_dropped=total - kept_tokens,
        budget=budget,
        strategy=strategy_label(strategy),
        over_budget=pick.over_budget,
        fell_back=fell_back,
        error=error,
        timings=MappingProxyType(timings),
        info=MappingProxyType(info),
    )
