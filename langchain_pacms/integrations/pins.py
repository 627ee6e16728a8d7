"""The spans a call's selection keeps whatever it picks, while they fit: the pinned ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from langchain_pacms.lifecycle import restored_in_turn
from langchain_pacms.messages import Span
from langchain_pacms.selector import Candidate

__all__ = ["pin_spans"]


def pin_spans(
    messages: Sequence[BaseMessage], cands: list[Candidate], room: int, keep_first: bool
) -> tuple[list[Candidate], tuple[str, ...]]:
    """``cands`` with the spans that must stay mandatory, each while it fits ``room``.

    Those spans: the first message's (``keep_first``), then, for the recoveries of the latest
    turn that restored a round in place (``reactivate=True``), their results (the pointers),
    then the rounds, the newest recovery's first. A restored round that does not fit is left
    to the selection; its recovery's result then says so
    (:func:`~langchain_pacms.lifecycle.with_unsent_noted`).

    Returns the candidates and the ids pinned, in the order :func:`~.fit.fit` lets them go
    should what is sent still exceed the budget (the last pinned first).
    """
    restored = restored_in_turn(messages)

    def rank(c: Candidate) -> tuple[int, int] | None:
        """Pinning order (lower first), or ``None``: not pinned."""
        source = c.source
        if not isinstance(source, Span) or source.stub or c.mandatory:
            return None
        if keep_first and source.indices[:1] == (0,):
            return (0, 0)
        ranks = [restored[i] for i in source.indices if i in restored]
        if not ranks:
            return None
        # a recovery's result (ranked by its own position) is the pointer: the cheap part first
        results = any(restored[i] == i for i in source.indices if i in restored)
        return (1 if results else 2, -max(ranks))

    order = sorted((r, n) for n, c in enumerate(cands) if (r := rank(c)) is not None)
    used = sum(int(c.tokens or 0) for c in cands if c.mandatory)
    out = list(cands)
    pinned: list[str] = []
    for _, n in order:
        tokens = int(cands[n].tokens or 0)
        if used + tokens <= room:
            out[n] = dataclasses.replace(cands[n], mandatory=True)
            used += tokens
            pinned.append(str(cands[n].id))
    return out, tuple(reversed(pinned))
