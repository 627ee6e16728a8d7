"""The policies the lifecycle replay compares: the baselines and the planners as replay policies.

A policy is ``(messages, index, counter) -> actions`` on a prefix; :data:`POLICIES` names the
factories, :data:`BASELINES` the baselines every table holds (``none``, the fold and prune rules
and LangChain's ``ClearToolUsesEdit``), :data:`SELECTION` the per-call selection rows (run by
:mod:`pacms_bench.selection_replay`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_pacms.lifecycle import Action, ContextIndex, HeuristicPlanner, Plan, PlannerTuning
from langchain_pacms.tokens import TokenCounter
from pacms_bench.replay_tokens import message_tokens
from pacms_bench.selection_replay import SELECTION_LIFE, SELECTION_STUBS

__all__ = [
    "BASELINES",
    "POLICIES",
    "SELECTION",
    "PolicyFn",
    "PolicyPlanner",
    "clear_tool_uses",
    "heuristic_planner",
    "planner_policy",
]


PolicyFn = Callable[[list[BaseMessage], ContextIndex, TokenCounter], list[Action]]
"""A replay policy: the actions it takes on a prefix, its index and a token counter."""


def _plannable(index: ContextIndex, kinds: tuple[str, ...] = ("tool",)) -> list[Any]:
    return [o for o in index.objects if o.kind in kinds and not o.latest and o.state == "active"]


def _oldest_fold(target: float) -> PolicyFn:
    def plan(
        messages: list[BaseMessage], index: ContextIndex, counter: TokenCounter
    ) -> list[Action]:
        total = index.active_tokens
        out: list[Action] = []
        removed = 0
        first_user = next((o.id for o in index.objects if o.kind == "user"), "")
        for obj in _plannable(index, ("tool", "assistant", "user")):
            if removed >= target * total:
                break
            if obj.id != first_user:
                out.append(Action("fold", obj.id, "oldest first"))
                removed += obj.tokens
        return out

    return plan


def _tool_prune(keep: int) -> PolicyFn:
    def plan(
        messages: list[BaseMessage], index: ContextIndex, counter: TokenCounter
    ) -> list[Action]:
        tools = _plannable(index)
        return [Action("prune", o.id, f"older than the last {keep}") for o in tools[:-keep]]

    return plan


def _tool_mask_prune(
    messages: list[BaseMessage], index: ContextIndex, counter: TokenCounter
) -> list[Action]:
    tools = _plannable(index)
    old, mid = tools[:-6], tools[-6:-3]
    return [Action("prune", o.id, "old") for o in old] + [Action("mask", o.id, "mid") for o in mid]


def _hybrid(
    messages: list[BaseMessage], index: ContextIndex, counter: TokenCounter
) -> list[Action]:
    """Turn fold, then tool prune.

    The oldest half of the tokens is folded turn by turn (tool spans included: in a long tool
    loop every turn is one), and every other tool output but the last 3 is pruned.
    """
    folds = _oldest_fold(0.5)(messages, index, counter)
    folded = {a.target for a in folds}
    tools = _plannable(index)[:-3]
    return folds + [
        Action("prune", o.id, "older than the last 3") for o in tools if o.id not in folded
    ]


def planner_policy(planner: Any) -> PolicyFn:
    """A lifecycle planner (heuristic or LLM) as a replay policy."""

    def plan(
        messages: list[BaseMessage], index: ContextIndex, counter: TokenCounter
    ) -> list[Action]:
        return list(planner.plan(index, messages).actions)

    return plan


def heuristic_planner(settings: Mapping[str, Any]) -> HeuristicPlanner:
    """The heuristic planner with ``settings`` (:class:`PlannerTuning` fields) over its defaults."""
    return HeuristicPlanner(tuning=PlannerTuning(**settings))


def _heuristic(**settings: Any) -> PolicyFn:
    return planner_policy(heuristic_planner(settings))


POLICIES: dict[str, Callable[..., PolicyFn]] = {
    "heuristic": _heuristic,
    "oldest-fold-50": lambda: _oldest_fold(0.5),
    "tool-prune-keep3": lambda: _tool_prune(3),
    "tool-mask-then-prune": lambda: _tool_mask_prune,
    "hybrid-fold-prune": lambda: _hybrid,
}
"""Policy name -> factory of ``(messages, index, counter) -> actions``."""


@dataclass
class PolicyPlanner:
    """A replay policy as a lifecycle planner, so the harness can run a baseline in the loop.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle import index_messages
        >>> planner = PolicyPlanner("tool-prune-keep3", POLICIES["tool-prune-keep3"]())
        >>> planner.plan(index_messages([HumanMessage("hi")]), [HumanMessage("hi")]).actions
        ()
    """

    name: str
    policy: PolicyFn
    counter: TokenCounter = field(default_factory=TokenCounter)

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """The policy's actions on ``index`` as a plan."""
        actions = tuple(self.policy(list(messages), index, self.counter))
        return Plan(f"{self.name}: {len(actions)} actions", actions, planner=self.name)

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        """Async twin of :meth:`plan` (the policies are pure computation)."""
        return self.plan(index, messages)


def clear_tool_uses(messages: list[BaseMessage], counter: TokenCounter) -> list[BaseMessage]:
    """LangChain's ``ClearToolUsesEdit`` (``keep=3``, always triggered) on a copy."""
    from langchain.agents.middleware import ClearToolUsesEdit

    copy = [m.model_copy() for m in messages]
    edit = ClearToolUsesEdit(trigger=0, keep=3)
    edit.apply(copy, count_tokens=lambda ms: message_tokens(list(ms), counter))  # type: ignore[arg-type]
    return copy


BASELINES = (
    "none",
    "oldest-fold-50",
    "tool-prune-keep3",
    "tool-mask-then-prune",
    "hybrid-fold-prune",
    "clear-tool-uses",
)
"""The rows the planner is compared with: no management first, then the fold and prune rules of
:data:`POLICIES` and LangChain's ``ClearToolUsesEdit``."""


SELECTION = (
    *(f"select:{s}@{r}" for r in (0.5, 0.3, 0.7) for s in ("pacms", "topk", "mmr", "lastk")),
    *SELECTION_STUBS,
    *SELECTION_LIFE,
)
"""Per-call selection policies (each strategy keeping 50%, 30% and 70% of the prefix's
tokens), without and with fold stubs, and behind the heuristic planner (see
:mod:`pacms_bench.selection_replay`)."""
