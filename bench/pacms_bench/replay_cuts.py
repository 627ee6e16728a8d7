"""Cut recorded sessions, let a policy manage each prefix, and judge the view it leaves.

At each cut (:func:`cut_points`) the policy's checked actions give the view; the judge
(:mod:`pacms_bench.dependency_judge`) says whether the exact strings the rest of the session
takes from earlier tool outputs stay visible (strict) or recoverable from the sidecars.
:func:`evaluate_cuts` runs a policy on every cut of some sessions (one cached cell per session)
and :class:`PolicyResult` sums the cells into a row with Wilson 95% intervals.

Example:
    >>> wilson(8, 10)
    (0.49, 0.943)
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_pacms.lifecycle import boundary_in_force, check_actions, index_messages
from langchain_pacms.messages import content_text
from langchain_pacms.tokens import TokenCounter
from pacms_bench.dependency_judge import Definition, cut_dependencies, verdict
from pacms_bench.replay_cache import ReplayCache, session_digest
from pacms_bench.replay_policies import POLICIES, PolicyFn, clear_tool_uses, planner_policy
from pacms_bench.replay_tokens import message_text, message_tokens
from pacms_bench.selection_replay import behind_lifecycle, is_selection, selection_policy
from pacms_bench.traces import TraceSession

__all__ = ["PolicyResult", "cell_key", "cut_points", "evaluate_cuts", "wilson"]


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of ``hits / n`` (rounded to 3 places; ``(0, 0)`` for ``n = 0``)."""
    if n == 0:
        return (0.0, 0.0)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (round(centre - half, 3), round(centre + half, 3))


def cut_points(
    messages: Sequence[BaseMessage], *, min_tools: int = 4, max_cuts: int = 8, seed: int = 0
) -> list[int]:
    """Indices ``i`` such that the prefix ``messages[: i + 1]`` ends on a complete tool span.

    Example:
        >>> call = lambda k: AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": f"c{k}"}])
        >>> msgs = [HumanMessage("go")]
        >>> for k in range(6):
        ...     msgs += [call(k), ToolMessage(str(k), tool_call_id=f"c{k}")]
        >>> cut_points(msgs, max_cuts=2)
        [8, 10]
    """
    spans = 0
    eligible: list[int] = []
    for i, m in enumerate(messages):
        ends = isinstance(m, ToolMessage) and (
            i + 1 == len(messages) or not isinstance(messages[i + 1], ToolMessage)
        )
        if ends:
            spans += 1
            if spans >= min_tools and i + 1 < len(messages):
                eligible.append(i)
    if len(eligible) <= max_cuts:
        return eligible
    step = len(eligible) / max_cuts
    offset = random.Random(seed).random() * step
    return [eligible[int(offset + k * step)] for k in range(max_cuts)]


@dataclass
class PolicyResult:
    """Per-cut outcomes of one policy on one data set."""

    pruned: list[float] = field(default_factory=list)
    pruned_non_system: list[float] = field(default_factory=list)
    strict: int = 0
    strict_rederivable_excluded: int = 0
    recovered: int = 0
    recovery_calls: int = 0
    cuts: int = 0
    with_dependencies: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def row(self) -> dict[str, Any]:
        """The summary row (rates with Wilson intervals)."""
        n = self.cuts
        return {
            "cuts": n,
            "cuts_with_dependencies": self.with_dependencies,
            "pruning_mean": round(statistics.fmean(self.pruned), 4) if n else 0.0,
            "pruning_median": round(statistics.median(self.pruned), 4) if n else 0.0,
            "pruning_non_system_mean": (
                round(statistics.fmean(self.pruned_non_system), 4) if n else 0.0
            ),
            "strict_no_impact": round(self.strict / n, 4) if n else 0.0,
            "strict_ci": wilson(self.strict, n),
            "strict_rederivable_excluded": (
                round(self.strict_rederivable_excluded / n, 4) if n else 0.0
            ),
            "strict_rederivable_excluded_ci": wilson(self.strict_rederivable_excluded, n),
            "no_impact_with_recovery": round(self.recovered / n, 4) if n else 0.0,
            "recovery_ci": wilson(self.recovered, n),
            "recovery_calls": self.recovery_calls,
            "rejected": dict(self.rejected.most_common(8)),
            "seconds": round(self.seconds, 2),
        }

    def add(self, cell: Mapping[str, Any]) -> None:
        """Add one session's per-cut outcomes (as ``_cut_cells`` gives them)."""
        self.pruned.extend(cell["pruned"])
        self.pruned_non_system.extend(cell["pruned_non_system"])
        self.cuts += len(cell["pruned"])
        for name in (
            "strict",
            "strict_rederivable_excluded",
            "recovered",
            "recovery_calls",
            "with_dependencies",
        ):
            setattr(self, name, getattr(self, name) + cell[name])
        self.rejected.update(cell["rejected"])
        self.seconds += cell.get("seconds", 0.0)


_DEPENDENCIES: dict[tuple[str, str, int, int], tuple[set[str], set[str]]] = {}


def _dependencies(session: TraceSession, cut: int) -> tuple[set[str], set[str]]:
    """A session cut's dependencies, strict and re-derivable excluded, once for every policy."""
    key = (session.dataset, session.name, len(session.messages), cut)
    if key not in _DEPENDENCIES:
        if len(_DEPENDENCIES) > 20_000:
            _DEPENDENCIES.clear()
        _DEPENDENCIES[key] = (
            _judge_inputs(session.messages, cut),
            _judge_inputs(session.messages, cut, "rederivable_excluded"),
        )
    return _DEPENDENCIES[key]


_ROLES = {
    SystemMessage: "system",
    HumanMessage: "user",
    AIMessage: "assistant",
    ToolMessage: "tool",
}


def _judged_text(m: BaseMessage) -> tuple[str, str]:
    """A message as the judge reads it: its role, and its text (with a call's arguments)."""
    role = next((r for kind, r in _ROLES.items() if isinstance(m, kind)), "other")
    return role, message_text(m) if role == "assistant" else content_text(m.content)


def _judge_inputs(
    messages: Sequence[BaseMessage], cut: int, definition: Definition = "strict"
) -> set[str]:
    """The dependencies of the cut after ``messages[cut]``, by the judge's ``definition``."""
    return cut_dependencies(
        [_judged_text(m) for m in messages[: cut + 1]],
        [_judged_text(m) for m in messages[cut + 1 :]],
        definition=definition,
    )


def _cut_cells(
    session: TraceSession,
    policy: str,
    plan_fn: PolicyFn | None,
    runner: Any,
    max_cuts: int,
    seed: int,
    count: TokenCounter,
) -> dict[str, Any]:
    """The per-cut outcomes of one session under one policy (a JSON-ready cache cell)."""
    start = time.perf_counter()
    cell: dict[str, Any] = {
        "pruned": [],
        "pruned_non_system": [],
        "strict": 0,
        "strict_rederivable_excluded": 0,
        "recovered": 0,
        "recovery_calls": 0,
        "with_dependencies": 0,
        "rejected": Counter(),
    }
    messages = list(session.messages)
    for cut in cut_points(messages, max_cuts=max_cuts, seed=seed):
        prefix = messages[: cut + 1]
        sidecars: dict[str, str] = {}
        if plan_fn is not None:
            # what the shipped harness protects here (boundary="auto"): the newest object in a
            # long tool loop, the latest turn in a conversation
            tool_loop = boundary_in_force(prefix, "auto") == "tool"
            index = index_messages(
                prefix, token_counter=count, latest="step" if tool_loop else "turn"
            )
            checked = check_actions(
                prefix, index, plan_fn(prefix, index, count), token_counter=count
            )
            view = checked.result.messages
            sidecars = {s.object_id: s.payload for s in checked.result.sidecars}
            cell["rejected"].update(r.reason for r in checked.rejected)
            if runner is not None:  # selection behind the lifecycle, budget from the prefix
                view, stubs = runner(view, base=prefix)
                sidecars = {**stubs, **sidecars}  # a stub of a fold stub holds no payload
        elif runner is not None:
            view, sidecars = runner(prefix)
        elif policy == "clear-tool-uses":
            view = clear_tool_uses(prefix, count)
        else:
            view = prefix
        before, after = message_tokens(prefix, count), message_tokens(view, count)
        before_ns = message_tokens(prefix, count, False)
        after_ns = message_tokens(view, count, False)
        cell["pruned"].append(1 - after / before if before else 0.0)
        cell["pruned_non_system"].append(1 - after_ns / before_ns if before_ns else 0.0)
        deps, lenient = _dependencies(session, cut)
        seen = "\n".join(message_text(m) for m in view)
        judged = verdict(deps, seen, sidecars)
        cell["with_dependencies"] += bool(deps)
        cell["strict"] += judged.strict
        cell["strict_rederivable_excluded"] += all(d in seen for d in lenient)
        cell["recovered"] += judged.with_recovery
        cell["recovery_calls"] += judged.recovery_calls
    cell["rejected"] = dict(cell["rejected"])
    cell["seconds"] = round(time.perf_counter() - start, 4)
    return cell


def cell_key(*parts: Any) -> str:
    """The cache key of a replay cell: ``parts`` joined by ``/`` (mappings as sorted JSON)."""
    return "/".join(
        json.dumps(p, sort_keys=True, default=str) if isinstance(p, Mapping) else str(p)
        for p in parts
    )


def evaluate_cuts(
    sessions: Sequence[TraceSession],
    policy: str,
    *,
    settings: Mapping[str, Any] | None = None,
    max_cuts: int = 8,
    seed: int = 0,
    counter: TokenCounter | None = None,
    cache: ReplayCache | None = None,
    tick: Callable[[], None] = lambda: None,
    planner: Any = None,
) -> PolicyResult:
    """Run ``policy`` on every cut of ``sessions`` and judge each one.

    With ``cache`` each session's outcomes are read from it when present and stored when
    computed; ``tick`` is called once per session (a progress bar's update). The result's
    ``seconds`` are those the cells took to compute, wherever and whenever that was. The policy
    ``"llm"`` runs ``planner`` (an :class:`~langchain_pacms.lifecycle.LLMPlanner`); its
    ``settings`` should name the model (they key the cache). A ``life+select:`` policy runs
    the heuristic planner with ``settings`` and then the selection on its view.

    Raises:
        ValueError: For an unknown policy, or ``"llm"`` without a planner.
    """
    count = counter or TokenCounter()
    result = PolicyResult()
    factory = POLICIES.get("heuristic" if behind_lifecycle(policy) else policy)
    plan_fn = factory(**(settings or {})) if factory is not None else None
    if policy == "llm":
        if planner is None:
            raise ValueError("policy 'llm' needs a planner")
        plan_fn = planner_policy(planner)
    runner = selection_policy(policy, count) if is_selection(policy) else None
    if plan_fn is None and policy not in ("none", "clear-tool-uses") and runner is None:
        raise ValueError(f"unknown policy {policy!r}")
    for session in sessions:
        key = cell_key(
            "cuts",
            session.dataset,
            session.name,
            session_digest(session.messages),
            policy,
            settings or {},
            max_cuts,
            seed,
        )
        cell = cache.get(key) if cache is not None else None
        if cell is None:
            cell = _cut_cells(session, policy, plan_fn, runner, max_cuts, seed, count)
            if cache is not None:
                cache.put(key, cell)
        result.add(cell)
        tick()
    return result
