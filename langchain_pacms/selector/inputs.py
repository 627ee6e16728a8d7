"""A selection's inputs resolved: candidates normalised, token costs, the budget, the query."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.budget import Budget, BudgetInput
from langchain_pacms.selector.selection import KINDS, Candidate, CandidateInput
from langchain_pacms.tokens import TokenCounter

__all__ = ["as_int", "check_query", "normalise", "relevant_mask", "resolve_inputs", "token_costs"]


MAX_TOKENS = 2**53  # a candidate's tokens (JSON's exact integers, as the service takes)
MAX_TOTAL_TOKENS = 2**62  # a pool's: sums of any of them stay within int64
MAX_POSITION = 2**62


def normalise(candidates: Sequence[CandidateInput]) -> tuple[Candidate, ...]:
    """The candidates as :class:`Candidate` objects with ids and positions, else ``ValueError``."""
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise ValueError("candidates must be a sequence of str or Candidate")
    placed = _placed_all(candidates)
    if placed is not None:
        return placed
    out: list[Candidate] = []
    seen: set[str] = set()
    for index, item in enumerate(candidates):
        cand = Candidate(text=item) if isinstance(item, str) else item
        if not isinstance(cand, Candidate):
            raise ValueError(
                f"candidate {index} is {type(item).__name__}; expected str or Candidate"
            )
        if not isinstance(cand.text, str):
            raise ValueError(
                f"candidate {index} has non-string text ({type(cand.text).__name__}); "
                "reduce rich content to text before selecting"
            )
        if cand.kind not in KINDS:
            raise ValueError(
                f"candidate {index} has unknown kind {cand.kind!r}; use one of {sorted(KINDS)}"
            )
        cid = str(index) if cand.id is None else str(cand.id)
        if cid in seen:
            raise ValueError(f"duplicate candidate id {cid!r}")
        seen.add(cid)
        tokens = None if cand.tokens is None else as_int(cand.tokens)
        if cand.tokens is not None and (tokens is None or not 0 <= tokens <= MAX_TOKENS):
            raise ValueError(
                f"candidate {cid!r} has invalid tokens {cand.tokens!r}; "
                "expected an int in [0, 2**53]"
            )
        position = index if cand.position is None else as_int(cand.position)
        if position is None or abs(position) > MAX_POSITION:
            raise ValueError(
                f"candidate {cid!r} has invalid position {cand.position!r}; "
                "expected an int within +-2**62"
            )
        mandatory = bool(cand.mandatory) if isinstance(cand.mandatory, (bool, np.bool_)) else None
        if mandatory is None:
            raise ValueError(f"candidate {cid!r} has mandatory={cand.mandatory!r}; expected a bool")
        if (
            cand.id is not cid
            or type(cand.position) is not int
            or type(cand.mandatory) is not bool
            or (cand.tokens is not None and type(cand.tokens) is not int)
        ):
            cand = _placed(cand, cid, position, mandatory, tokens)
        out.append(cand)
    return tuple(out)


def as_int(value: object) -> int | None:
    """``value`` as an ``int`` when it is an integer (Python's or numpy's, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def _placed_all(candidates: Sequence[CandidateInput]) -> tuple[Candidate, ...] | None:
    """The candidates as they are when all are plain, complete and valid; else ``None``."""
    if not all(type(c) is Candidate for c in candidates):
        return None
    cands: Sequence[Candidate] = candidates  # type: ignore[assignment]
    ids = [c.id for c in cands]
    if (
        not all(type(i) is str for i in ids)
        or len(set(ids)) != len(ids)
        or not all(type(c.text) is str for c in cands)
        or not {c.kind for c in cands} <= KINDS
        or not all(type(c.position) is int and abs(c.position) <= MAX_POSITION for c in cands)
        or not all(type(c.mandatory) is bool for c in cands)
        or not all(
            c.tokens is None or (type(c.tokens) is int and 0 <= c.tokens <= MAX_TOKENS)
            for c in cands
        )
    ):
        return None
    return tuple(cands)


def _placed(
    cand: Candidate, cid: str, position: int, mandatory: bool, tokens: int | None
) -> Candidate:
    if type(cand) is not Candidate:
        return replace(cand, id=cid, position=position, mandatory=mandatory, tokens=tokens)
    return Candidate(
        cand.text, cid, cand.kind, position, mandatory, tokens, cand.metadata, cand.source
    )


def check_query(query: object) -> None:
    """Raise ``ValueError`` unless ``query`` is a string with some non-space text."""
    if not isinstance(query, str):
        raise ValueError(f"query must be a str, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("query is empty; pass the text the selection should be relevant to")


def token_costs(cands: Sequence[Candidate], counter: TokenCounter) -> list[int]:
    """Each candidate's token cost: its own ``tokens``, else its text counted with ``counter``."""
    counted = iter(counter.count_many([c.text for c in cands if c.tokens is None]))
    return [next(counted) if c.tokens is None else c.tokens for c in cands]


def resolve_inputs(
    candidates: Sequence[CandidateInput], query: str, budget: BudgetInput, counter: TokenCounter
) -> tuple[tuple[Candidate, ...], NDArray[np.int64], int]:
    """``(candidates, tokens, budget)``, the budget in tokens; bad input raises ``ValueError``."""
    check_query(query)
    cands = normalise(candidates)
    costs = token_costs(cands, counter)
    if sum(costs) > MAX_TOTAL_TOKENS:
        raise ValueError(f"the candidates' tokens add up to {sum(costs)}; at most 2**62")
    tokens = np.array(costs, dtype=np.int64)
    return cands, tokens, Budget.coerce(budget).resolve(total=int(tokens.sum()))


def relevant_mask(cands: Sequence[Candidate], ids: Collection[str]) -> NDArray[np.bool_] | None:
    """Which candidates ``ids`` names, for a selection's ``relevant_ids``.

    Args:
        cands: The pool.
        ids: Candidate ids (a collection, not one string).

    Returns:
        One flag per candidate, or ``None`` when ``ids`` is empty.

    Raises:
        ValueError: For a single string or an id no candidate has.

    Example:
        >>> relevant_mask([Candidate("a", id="x"), Candidate("b", id="y")], ["y"]).tolist()
        [False, True]
    """
    if isinstance(ids, str):
        raise ValueError("relevant_ids must be a collection of candidate ids, not one string")
    wanted = {str(i) for i in ids}
    if not wanted:
        return None
    have = [str(c.id) for c in cands]
    mask = np.array([cid in wanted for cid in have], dtype=bool)
    unknown = wanted.difference(have)
    if unknown:
        raise ValueError(f"relevant_ids names no candidate: {sorted(unknown)[:5]}")
    return mask
