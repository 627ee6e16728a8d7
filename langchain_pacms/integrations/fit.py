"""Select until what is sent fits the budget: the selection rounds, and the floor of fold stubs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from langchain_core.messages import BaseMessage

from langchain_pacms._steps import Call, Steps
from langchain_pacms.messages.spans import Span
from langchain_pacms.selector import Candidate, Selection

__all__ = ["Pool", "Selects", "fit", "settle_floor", "stub_floor"]

_NO_QUERY = "the most recent conversation"
_MAX_ROUNDS = 6  # selections per call before keeping only the mandatory part
_GAP = 16  # tokens of room between a fitting round and one over budget not worth another round


@dataclass(frozen=True)
class Pool:
    """One call's candidates and what :func:`fit` needs to know about them."""

    candidates: list[Candidate]
    spans: list[Span]
    mandatory: str  # which part of the conversation is mandatory, for the report
    budget: int  # the call's token budget
    unseen: int  # tokens the model receives besides the selection
    charged: int = 0  # tokens of what is sent charged up front (the context message's headers)
    reused: frozenset[int] = frozenset()  # spans whose results later calls used (their stubs first)
    folded: frozenset[int] = frozenset()  # spans the lifecycle folded already (their own floor)
    in_turn: bool = False  # only the newest step is mandatory (a tool loop)
    pinned: tuple[str, ...] = ()  # mandatory while what is sent fits: let go in this order


class _Fit(NamedTuple):
    """A selection round whose messages fit the budget."""

    sent: int  # the tokens its messages send, unseen prompt included
    selection: Selection
    out: list[BaseMessage]
    floor: bool  # whether the stub floor applied


def stub_floor(
    cands: Sequence[Candidate], room: int, first: Collection[int] = (), folded: Collection[int] = ()
) -> list[Candidate] | None:
    """The pool with each span's floor mandatory: its stub, or the span if no dearer or ``folded``.

    Floors go in while they fit (``first`` spans, then oldest first); a span over its stub costs
    what it adds. ``None`` when no floor fits or a cost is unknown.
    """
    if any(c.tokens is None for c in cands):
        return None
    whole = {str(c.id): c for c in cands if isinstance(c.source, Span) and not c.source.stub}
    least_of: list[tuple[Candidate, Candidate]] = []  # (span, what its floor sends)
    for c in cands:
        if isinstance(c.source, Span) and c.source.sends:
            span = whole[c.source.full_id]
            least_of.append((span, span if int(span.tokens or 0) <= int(c.tokens or 0) else c))
        elif (
            str(c.id) in whole
            and not c.mandatory
            and c.source.indices
            and c.source.indices[0] in folded
        ):
            least_of.append((c, c))
    least_of.sort(
        key=lambda pair: (pair[0].source.indices[0] not in first, int(pair[0].position or 0))
    )
    used = sum(int(c.tokens or 0) for c in cands if c.mandatory)
    floor: dict[str, Candidate] = {}  # span id -> its floor (the stub or the span)
    for span, least in least_of:
        if used + int(least.tokens or 0) > room:
            continue
        used += int(least.tokens or 0)
        floor[str(span.id)] = least
    if not floor:
        return None
    floored = {str(c.id) for c in floor.values()}
    out = []
    for c in cands:
        below = floor.get(str(c.id))
        if (
            isinstance(c.source, Span)
            and c.source.stub
            and c.source.full_id in floor
            and str(c.id) not in floored
        ):
            continue  # the span itself is the floor: its stub is no alternative
        if str(c.id) in floored:
            c = dataclasses.replace(c, mandatory=True)
        elif below is not None:  # a span over its stub: it costs what it adds
            c = dataclasses.replace(c, tokens=max(1, int(c.tokens or 0) - int(below.tokens or 0)))
        out.append(c)
    return out


def settle_floor(selection: Selection, cands: Sequence[Candidate], shadowed: set[Any]) -> Selection:
    """A floored selection in the pool's own terms: shadowed stubs out, full span costs back."""
    cost = {c.id: c.tokens for c in cands if c.tokens is not None}
    pool = tuple(
        c
        if c.mandatory or c.tokens == cost.get(c.id)
        else dataclasses.replace(c, tokens=cost[c.id])
        for c in selection.candidates
    )
    tokens = {
        **selection.tokens,
        **{str(c.id): int(c.tokens) for c in pool if c.tokens is not None},
    }
    kept = tuple(i for i in selection.kept_ids if i not in shadowed)
    total = sum(tokens.values())
    held = sum(tokens[i] for i in kept)
    return dataclasses.replace(
        selection,
        candidates=pool,
        kept_ids=kept,
        pick_order=tuple(i for i in selection.pick_order if i not in shadowed),
        gains={i: g for i, g in selection.gains.items() if i not in shadowed},
        tokens=tokens,
        tokens_total=total,
        tokens_kept=held,
        tokens_dropped=total - held,
    )


class Selects(Protocol):
    """What :func:`fit` selects with: a :class:`~langchain_pacms.selector.Selector`, say."""

    def select(self, *args: Any, **kwargs: Any) -> Selection:
        """Select candidates for a query under a budget."""
        ...

    async def aselect(self, *args: Any, **kwargs: Any) -> Selection:
        """Async twin of :meth:`select`."""
        ...


def fit(
    selector: Selects,
    pool: Pool,
    query: str,
    *,
    options: Mapping[str, Any],
    apply: Callable[[Selection], list[BaseMessage]],
    sent_of: Callable[[list[BaseMessage]], int],
    lift_reused: bool,
    values_of: Callable[[Candidate], Collection[str]] | None = None,
    fallback: Selects | None = None,
) -> Steps[tuple[Selection, list[BaseMessage]]]:
    """Select until what is sent (by ``sent_of`` of ``apply(selection)``) fits the budget.

    Over budget: again with less room, then bisected; the fitting round sending the most wins.
    With ``values_of``, ``pacms`` covers the values it gives for each candidate. Once the
    selector falls back (a service that timed out), the next rounds ask ``fallback``, if given,
    so one call does not wait for it again.
    """
    budget, unseen = pool.budget, pool.unseen
    cands = list(pool.candidates)
    fixed = {c.id for c in cands if c.mandatory}
    pinned = [i for i in pool.pinned if i in fixed]
    room = budget - unseen - pool.charged
    lifted = [
        c.id
        for c in cands
        if lift_reused
        and isinstance(c.source, Span)
        and c.source.kind == "tool"
        and not (c.source.stub or c.mandatory)
        and c.source.indices[0] in pool.reused
    ]
    chooser, reason = selector, None
    fitted: _Fit | None = None  # the fitting round that sends the most
    low = over = 0  # the most room known to fit, the least known not to (0: none yet)
    rounds = 0
    for attempt in range(_MAX_ROUNDS + 1):
        if attempt == _MAX_ROUNDS:  # has not settled: keep only what must be kept
            if fitted is not None:
                break  # the best fitting round stands
            room = 1
        floored = stub_floor(cands, room, pool.reused, pool.folded)
        floor = floored is not None
        offered = cands if floored is None else floored
        values = {} if values_of is None else {"values": [values_of(c) for c in offered]}
        selection = yield Call(
            chooser.select,
            chooser.aselect,
            (offered, query if query.strip() else _NO_QUERY),
            {**options, **values, "budget": max(1, room), "relevant_ids": lifted},
        )
        rounds += 1
        if chooser is fallback:  # the reason the selector gave stays with the rounds after it
            selection = dataclasses.replace(selection, error=reason)
        elif selection.fell_back and fallback is not None:
            chooser, reason = fallback, selection.error
        kept = set(selection.kept_ids)
        shadowed = {
            c.id
            for c in selection.candidates
            if c.id in kept
            and isinstance(c.source, Span)
            and c.source.stub
            and c.source.full_id in kept
        }
        # a stub kept with its span: a floor stub gives way, any other leaves the pool (again)
        spare = {c.id for c in selection.candidates if c.id in shadowed and not c.mandatory}
        if spare:
            cands = [c for c in cands if c.id not in spare]
            continue
        if floored is not None:
            selection = settle_floor(selection, cands, shadowed)
        out = apply(selection)
        sent = sent_of(out) + unseen
        if sent <= budget:
            if fitted is None or sent > fitted.sent:
                fitted = _Fit(sent, selection, out, floor)
            # after a round over budget, the room between is halved while the gap is worth it
            low = max(low, room)
            if not over or over - low <= max(_GAP, budget // 50):
                break
            room = (low + over) // 2
            continue
        if all(c.id in fixed for c in selection.kept) and pinned:
            # over with only what must be kept: pinned spans go back to the selection, the
            # last pinned first, as many as the excess takes
            cost = {c.id: int(c.tokens or 0) for c in cands}
            excess, let_go = sent - budget, set()
            while pinned and excess > 0:
                released = pinned.pop(0)
                let_go.add(released)
                excess -= max(1, cost.get(released, 0))
            fixed -= let_go
            cands = [
                dataclasses.replace(c, mandatory=False) if c.id in let_go else c for c in cands
            ]
            continue
        if room <= 1 or all(c.id in fixed for c in selection.kept):
            break
        over = min(over or room, room)
        if low:
            room = (low + over) // 2
            if room <= low:
                break
            continue
        # below what this round kept (a round with slack would pick the same), by the excess
        room = min(room, selection.tokens_kept) - (sent - budget)
    if fitted is not None and selection is not fitted.selection:
        sent, selection, out, floor = fitted
    info = {
        **selection.info,
        "tokens_sent": sent,
        "tokens_unseen": unseen,
        "rounds": rounds,
        "stub_floor": floor,
        "lifted": len(lifted),
    }
    return dataclasses.replace(selection, budget=budget, over_budget=sent > budget, info=info), out
