"""The heuristic planner: the offline default that proposes fold / mask / prune by rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from langchain_core.messages import BaseMessage

from langchain_pacms._lru import LruMemo
from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls
from langchain_pacms.lifecycle.actions import Action, action_gain
from langchain_pacms.lifecycle.analysis import (
    Analysis,
    Features,
    analyse,
    object_features,
    words_of,
)
from langchain_pacms.lifecycle.fold import call_texts, fold_locators
from langchain_pacms.lifecycle.objects import ContextIndex, ContextObject
from langchain_pacms.lifecycle.plan import Plan
from langchain_pacms.lifecycle.tuning import PlannerTuning
from langchain_pacms.messages.identity import by_messages
from langchain_pacms.messages.payload import payload_of

if TYPE_CHECKING:
    from langchain_pacms.selector import ContextSelector

__all__ = ["HeuristicPlanner"]

_EMBED_CHARS = 4_000  # characters of an object embedded for relevance
_REL_FLOOR = 0.25  # relevance is scaled by max(best score, this)
_KIND_PRIOR: dict[str, float] = {
    "read": 0.5,
    "search": 0.4,
    "write": 0.6,
    "run": 0.2,
    "other": 0.4,
    "assistant": 0.6,
    "user": 1.0,
}

_FEATURE_CHARS = 32_000_000  # characters the feature memo's keys hold at most


def _key_chars(key: tuple[str, ...], _: object) -> int:
    return sum(map(len, key))


_Gains = tuple[tuple[str, ...], dict[tuple[str, ...], int]]
"""An object's stub's source locators, and its gain per set of those shown."""


class HeuristicPlanner:
    """Rule-based planner following the Self-GC safeguards (the offline default).

    Outside the protected tail, an object is pruned when a later one supersedes it, folded when
    a large stable body, masked when noisy output; the first user message, live handles, files
    edited later and the latest whole read of each file stay (docs/results/lifecycle.md).

    Args:
        selector: A :class:`~langchain_pacms.ContextSelector` whose embeddings score relevance;
            ``None`` (or a failing embedder, noted in the plan summary) scores by word overlap.
        tuning: The planner's rules (default ``PlannerTuning()``).

    Raises:
        TypeError: If ``selector`` has no ``embeddings`` or ``tuning`` is not a ``PlannerTuning``.

    Example:
        >>> HeuristicPlanner(tuning=PlannerTuning(fold_min_tokens=500)).tuning.fold_min_tokens
        500
    """

    name = "heuristic"

    def __init__(
        self, selector: ContextSelector | None = None, *, tuning: PlannerTuning | None = None
    ) -> None:
        if selector is not None and not hasattr(selector, "embeddings"):
            raise TypeError("selector must be a ContextSelector (it has no embeddings)")
        if tuning is not None and not isinstance(tuning, PlannerTuning):
            raise TypeError(f"tuning must be a PlannerTuning, got {type(tuning).__name__}")
        self.selector = selector
        self.tuning = tuning if tuning is not None else PlannerTuning()
        self._cache: LruMemo[tuple[str, ...], Features] = LruMemo(
            self.tuning.cache_size, max_bytes=_FEATURE_CHARS, weigh=_key_chars
        )
        self._gains: by_messages[_Gains] = by_messages(self.tuning.cache_size)

    def _features(self, obj: ContextObject, messages: Sequence[BaseMessage]) -> Features:
        # Keyed by all the features read: the calls, the text (a call's prose included) and
        # the payload: its digest while active, else its current text (the stub or mask).
        held = obj.sha256 if obj.state == "active" else payload_of(messages, obj.indices)
        key = (obj.kind, obj.signature, obj.text, held)
        hit = self._cache.get(key)
        if hit is None:
            hit = object_features(obj, messages)
            self._cache.put(key, hit)
        return hit

    def _lexical(self, a: Analysis) -> dict[str, float]:
        query = words_of(a.query)
        if not query:
            return {o.id: 0.0 for o in a.scored}
        return {o.id: len(query & a.features[o.id].words) / len(query) for o in a.scored}

    def _relevance(self, a: Analysis) -> Steps[tuple[dict[str, float], str]]:
        """Each scored object's relevance to the latest turns (cosine), and why it fell back."""
        if self.selector is None or not a.scored or not a.query.strip():
            return self._lexical(a), ""
        try:
            embed = self.selector.embeddings
            texts = [o.text[:_EMBED_CHARS] for o in a.scored]
            docs = yield Call(embed.embed_matrix, embed.aembed_matrix, (texts,))
            kind = {"kind": "query"}
            query = (yield Call(embed.embed_matrix, embed.aembed_matrix, ([a.query],), kind))[0]
            docs, query = self.selector.reweight_pool(np.asarray(docs), np.asarray(query))
            norms = np.linalg.norm(docs, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
            scores = (docs @ query) / np.maximum(norms, 1e-12)
            return {o.id: float(s) for o, s in zip(a.scored, scores)}, ""
        except Exception as err:  # fail soft: word overlap instead
            return self._lexical(a), f"{type(err).__name__}: {err}"

    def _gain(self, a: Analysis, obj: ContextObject, action: Action) -> int:
        """:func:`~langchain_pacms.lifecycle.actions.action_gain`, memoised per object."""
        held = tuple(a.messages[i] for i in obj.indices)

        def located() -> _Gains:
            fold = action.op == "fold"
            return (tuple(fold_locators(a.messages, obj, action.scope)) if fold else (), {})

        key = (obj.id, obj.kind, action.op, action.scope)
        locators, gains = self._gains(held, key, located)
        hidden = tuple(t for t in locators if t in a.shown)
        if hidden not in gains:
            gains[hidden] = action_gain(a.messages, obj, action, shown=a.shown)
        return gains[hidden]

    def _value(self, a: Analysis, obj: ContextObject, relevance: float) -> float:
        kinds = {c.kind for c in a.calls.get(obj.id, ())}
        prior = max((_KIND_PRIOR[k] for k in kinds), default=_KIND_PRIOR.get(obj.kind, 0.4))
        return 0.45 * relevance + 0.35 * a.recency[obj.id] + 0.2 * prior

    def _noisy(self, a: Analysis, obj: ContextObject) -> bool:
        kinds = {c.kind for c in a.calls.get(obj.id, ())}
        if "run" in kinds:
            return True
        return kinds <= {"other"} and a.features[obj.id].noise >= 3

    def _action(self, a: Analysis, obj: ContextObject, value: float) -> Action | None:
        tokens, rules = obj.tokens, self.tuning
        if obj.kind in ("user", "assistant"):
            if obj.kind == "user":
                big = obj.id != a.first_user and tokens >= rules.user_fold_min_tokens
                why = f"very large old user message ({tokens} tokens)"
            else:
                big = tokens >= rules.fold_min_tokens
                why = (
                    f"large generated body ({tokens} tokens); folded so a later step can quote "
                    "it exactly"
                )
            return Action("fold", obj.id, why) if big and value < rules.keep_above else None
        live = sorted(a.live.get(obj.id, ()))
        cover = a.superseded.get(obj.id)
        if cover is not None:
            by, why, later = cover
            missing = [t for t in live if t not in later]
            if not missing:
                return Action("prune", obj.id, f"superseded by {by}: {why}")
            live = missing
        if value >= rules.keep_above or obj.id in a.views:
            return None
        uses = f"; later calls use {', '.join(live[:3])}" if live else ""
        edited = a.edited.get(obj.id)
        noisy = self._noisy(a, obj) and not edited
        if noisy and tokens >= rules.mask_min_tokens:
            if live:
                why = f"noisy output ({tokens} tokens){uses}: fold keeps them recoverable"
                return Action("fold", obj.id, why)
            why = f"noisy output ({tokens} tokens, value {value:.2f}): head and tail kept"
            return Action("mask", obj.id, why)
        if noisy or tokens < rules.fold_min_tokens:
            return None
        body = f"; {', '.join(edited)} is edited later" if edited else ""
        why = f"large stable body ({tokens} tokens, value {value:.2f}){body}{uses}"
        return Action("fold", obj.id, why)

    def _scoped(self, a: Analysis, obj: ContextObject, action: Action | None) -> Action | None:
        """A tool span's fold with ``scope="span"`` when its call has text or long arguments."""
        if action is None or action.op != "fold" or obj.kind != "tool":
            return action
        if not self.tuning.fold_calls or not any(call_texts(a.messages[obj.indices[0]])):
            return action
        why = f"{action.reason}; with its call's text and arguments"
        return Action("fold", obj.id, why, scope="span")

    def _horizon(self, a: Analysis, actions: list[Action]) -> list[Action]:
        """``actions`` with every stub or mask beyond the newest ``max_stubs`` pruned instead."""
        limit = self.tuning.max_stubs
        if limit is None:
            return actions
        shrinks = {x.target for x in actions if x.op in ("fold", "mask")}
        shrunk = [
            o
            for o in a.index.objects
            if o.kind in ("tool", "assistant")
            and o.position < a.cutoff
            and (o.state != "active" or o.id in shrinks)
        ]
        old = shrunk[: max(len(shrunk) - limit, 0)]
        if not old:
            return actions
        why = f"an older stub than the newest {limit} (max_stubs)"
        drop = {o.id: Action("prune", o.id, why) for o in old}
        kept = [drop.pop(x.target, x) for x in actions]
        return kept + list(drop.values())

    def _decide(self, a: Analysis, relevance: Mapping[str, float], failure: str) -> Plan:
        best = max(relevance.values(), default=0.0)
        scale = max(best, _REL_FLOOR)
        actions: list[Action] = []
        idle = 0
        for obj in a.candidates:
            value = self._value(a, obj, max(relevance.get(obj.id, 0.0), 0.0) / scale)
            action = self._scoped(a, obj, self._action(a, obj, value))
            if action is not None and action.op != "prune" and self._gain(a, obj, action) <= 0:
                action, idle = None, idle + 1  # its stub or mask would not be smaller
            if action is not None:
                actions.append(action)
        actions = self._horizon(a, actions)
        counts = {op: sum(1 for x in actions if x.op == op) for op in ("prune", "fold", "mask")}
        targeted = sum(a.index.by_id[x.target].tokens for x in actions)
        summary = (
            f"{counts['prune']} prune, {counts['fold']} fold, {counts['mask']} mask on "
            f"{len(a.candidates)} eligible of {len(a.index.objects)} objects; "
            f"{targeted} of {a.index.active_tokens} tokens targeted; {idle} left out as "
            "saving nothing"
        )
        if failure:
            summary += f" (relevance by word overlap: embedding failed, {failure})"
        return Plan(summary, tuple(actions), planner=self.name)

    def _planning(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Steps[Plan]:
        rules = self.tuning
        analysis = analyse(
            index,
            messages,
            self._features,
            keep_recent=rules.keep_recent,
            keep_file_views=rules.keep_file_views,
            recency_half_life=rules.recency_half_life,
            smallest=min(rules.fold_min_tokens, rules.mask_min_tokens),
        )
        relevance, failure = yield from self._relevance(analysis)
        return self._decide(analysis, relevance, failure)

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Propose actions for ``index`` (built from ``messages``)."""
        return drive_calls(self._planning(index, messages))

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Async twin of :meth:`plan` (embeds with the model's async API)."""
        return await adrive_calls(self._planning(index, messages), offload=True)
