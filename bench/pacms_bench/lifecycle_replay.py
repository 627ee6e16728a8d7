"""Replay lifecycle policies on recorded agent runs: pruning, no-impact, cache-adjusted cost.

Protocol (after the Self-GC paper's offline evaluation):

* **Cuts**: after a tool output, once the prefix holds at least ``min_tools`` tool spans; at most
  ``max_cuts`` per session, evenly spaced with a seeded offset. The policy manages the prefix;
  the task message and the newest tool span are always kept.
* **Judge** (:mod:`pacms_bench.dependency_judge`, separate rules): the exact strings the
  rest of the session takes from earlier tool outputs must stay visible (strict), or be in a
  folded sidecar (with recovery). Dependencies follow the judge's strict definition (a value a
  later tool output shows again still counts; a path matches by ``/``-aligned suffix too);
  strict no-impact under the earlier definition, which leaves such re-derivable values out, is
  reported beside it.
* **Metrics** per data set and policy: pruning rate (share of prefix tokens removed from the
  view; also over non-system tokens), strict and with-recovery no-impact with Wilson 95%
  intervals, strict no-impact with re-derivable values excluded, recovery calls, rejected
  actions by reason.
* **Cost**: each session replayed call by call with the harness in the loop; the input tokens of
  each model call are priced ``cached_price`` for the unchanged prefix since the previous call
  and ``1.0`` for the rest.
* **Baselines**, through the same lifecycle checks: oldest-first fold, tool-output prune keeping
  the last 3, tool mask then prune, a hybrid of turn fold and tool prune, and LangChain's
  ``ClearToolUsesEdit`` (its real class, ``keep=3``).

The heuristic planner's settings are chosen on a seeded development split of the sessions (with
every development-only session, :data:`~pacms_bench.traces.DEV_ONLY`) and reported on
the rest.

Example:
    >>> wilson(8, 10)
    (0.49, 0.943)
"""

from __future__ import annotations

import json
import math
import multiprocessing
import random
import signal
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_pacms.lifecycle import (
    Action,
    CommitRule,
    ContextIndex,
    HeuristicPlanner,
    LifecycleHarness,
    Plan,
    PlannerTuning,
    boundary_in_force,
    check_actions,
    index_messages,
)
from langchain_pacms.messages import by_message, content_text
from langchain_pacms.tokens import TokenCounter
from pacms_bench.dependency_judge import Definition, cut_dependencies, verdict
from pacms_bench.progress import progress_bar
from pacms_bench.replay_cache import ReplayCache, session_digest
from pacms_bench.selection_replay import (
    SELECTION_LIFE,
    SELECTION_STUBS,
    behind_lifecycle,
    is_selection,
    selection_policy,
)
from pacms_bench.traces import TraceSession

__all__ = [
    "POLICIES",
    "SELECTION",
    "PolicyPlanner",
    "PolicyResult",
    "cost_replay",
    "cut_points",
    "evaluate_cuts",
    "run_lifecycle_eval",
    "wilson",
    "write_report",
]


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


@by_message  # the same messages are measured by every policy at every cut
def _message_text(m: BaseMessage) -> str:
    calls = getattr(m, "tool_calls", None) or []
    args = " ".join(json.dumps(c.get("args") or {}, ensure_ascii=False) for c in calls)
    return f"{content_text(m.content)} {args}".strip()


def _tokens(messages: Sequence[BaseMessage], counter: TokenCounter, system: bool = True) -> int:
    return sum(counter(_message_text(m)) for m in messages if system or m.type != "system")


# -- policies ------------------------------------------------------------------------------------
PolicyFn = Callable[[list[BaseMessage], ContextIndex, TokenCounter], list[Action]]


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


def _planner_policy(planner: Any) -> PolicyFn:
    """A lifecycle planner (heuristic or LLM) as a replay policy."""

    def plan(
        messages: list[BaseMessage], index: ContextIndex, counter: TokenCounter
    ) -> list[Action]:
        return list(planner.plan(index, messages).actions)

    return plan


def _heuristic_planner(settings: Mapping[str, Any]) -> HeuristicPlanner:
    """The heuristic planner with ``settings`` (:class:`PlannerTuning` fields) over its defaults."""
    return HeuristicPlanner(tuning=PlannerTuning(**settings))


def _heuristic(**settings: Any) -> PolicyFn:
    return _planner_policy(_heuristic_planner(settings))


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


def _clear_tool_uses(messages: list[BaseMessage], counter: TokenCounter) -> list[BaseMessage]:
    """LangChain's ``ClearToolUsesEdit`` (``keep=3``, always triggered) on a copy."""
    from langchain.agents.middleware import ClearToolUsesEdit

    copy = [m.model_copy() for m in messages]
    edit = ClearToolUsesEdit(trigger=0, keep=3)
    edit.apply(copy, count_tokens=lambda ms: _tokens(list(ms), counter))  # type: ignore[arg-type]
    return copy


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
    return role, _message_text(m) if role == "assistant" else content_text(m.content)


def _judge_inputs(
    messages: Sequence[BaseMessage], cut: int, definition: Definition = "strict"
) -> set[str]:
    """The dependencies of the cut after ``messages[cut]``, by the judge's ``definition``."""
    return cut_dependencies(
        [_judged_text(m) for m in messages[: cut + 1]],
        [_judged_text(m) for m in messages[cut + 1 :]],
        definition=definition,
    )


SELECTION = (
    *(f"select:{s}@{r}" for r in (0.5, 0.3, 0.7) for s in ("pacms", "topk", "mmr", "lastk")),
    *SELECTION_STUBS,
    *SELECTION_LIFE,
)
"""Per-call selection policies (each strategy keeping 50%, 30% and 70% of the prefix's
tokens), without and with fold stubs, and behind the heuristic planner (see
:mod:`pacms_bench.selection_replay`)."""


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
            view = _clear_tool_uses(prefix, count)
        else:
            view = prefix
        before, after = _tokens(prefix, count), _tokens(view, count)
        before_ns, after_ns = _tokens(prefix, count, False), _tokens(view, count, False)
        cell["pruned"].append(1 - after / before if before else 0.0)
        cell["pruned_non_system"].append(1 - after_ns / before_ns if before_ns else 0.0)
        deps, lenient = _dependencies(session, cut)
        seen = "\n".join(_message_text(m) for m in view)
        judged = verdict(deps, seen, sidecars)
        cell["with_dependencies"] += bool(deps)
        cell["strict"] += judged.strict
        cell["strict_rederivable_excluded"] += all(d in seen for d in lenient)
        cell["recovered"] += judged.with_recovery
        cell["recovery_calls"] += judged.recovery_calls
    cell["rejected"] = dict(cell["rejected"])
    cell["seconds"] = round(time.perf_counter() - start, 4)
    return cell


def _key(*parts: Any) -> str:
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
        plan_fn = _planner_policy(planner)
    runner = selection_policy(policy, count) if is_selection(policy) else None
    if plan_fn is None and policy not in ("none", "clear-tool-uses") and runner is None:
        raise ValueError(f"unknown policy {policy!r}")
    for session in sessions:
        key = _key(
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


# -- cost replay ---------------------------------------------------------------------------------
def cost_replay(
    session: TraceSession,
    planner: Any | None,
    *,
    threshold: float = 0.3,
    boundary: str = "tool",
    cached_price: float = 0.1,
    counter: TokenCounter | None = None,
    edit: Callable[[list[BaseMessage]], list[BaseMessage]] | None = None,
    cache_aware: bool = False,
) -> tuple[float, int]:
    """Cache-adjusted input cost of a session with ``planner`` in the loop (``None``: none).

    Before each model call (each assistant message) the harness steps on the state; a commit
    replaces the state. The call's input is the state (or ``edit(state)``: an edit of the
    outgoing request only, never committed, as LangChain's context editing does): the part equal
    to the previous call's input (same messages, same content, from the start) is priced
    ``cached_price``, the rest 1. With ``cache_aware`` the harness also commits only when that
    pays at ``cached_price`` (:meth:`~langchain_pacms.lifecycle.LifecycleHarness.pays`).

    Returns:
        The priced cost and the number of commits.
    """
    count = counter or TokenCounter()
    harness = (
        LifecycleHarness(
            planner,
            commit=CommitRule(
                threshold=threshold,
                boundary=boundary,  # type: ignore[arg-type]
                cached_price=cached_price if cache_aware else None,
            ),
            token_counter=count,
        )
        if planner is not None
        else None
    )
    state: list[BaseMessage] = []
    previous: list[BaseMessage] = []
    known: Mapping[str, str] | None = None
    cost = 0.0
    commits = 0
    for message in session.messages:
        if isinstance(message, AIMessage) and state:
            if harness is not None:
                commit = harness.step(state, thread_id="replay", known_ids=known)
                if commit is not None:
                    state, known, commits = list(commit.messages), commit.known_ids, commits + 1
            request = edit(list(state)) if edit is not None else state
            same = 0
            for a, b in zip(previous, request, strict=False):
                if a.id != b.id or a.content != b.content:
                    break
                same += 1
            cached = _tokens(request[:same], count)
            cost += cached_price * cached + _tokens(request[same:], count)
            previous = list(request)
        state.append(message)
    return cost, commits


# -- the whole evaluation ------------------------------------------------------------------------
HEURISTIC_BASE: dict[str, Any] = {
    "fold_min_tokens": 800,
    "mask_min_tokens": 300,
    "keep_recent": 2,
    "keep_above": 0.6,
    "keep_file_views": True,
}
"""Planner settings every evaluated setting starts from (stated in full, so the grid does not move
when the planner's defaults do; the planner's defaults are the setting the grid chose)."""

HEURISTIC_GRID: tuple[dict[str, Any], ...] = tuple(
    {**HEURISTIC_BASE, **g}
    for g in (
        {},
        {"keep_recent": 1},
        {"fold_min_tokens": 250, "mask_min_tokens": 150},
        {"fold_min_tokens": 250, "mask_min_tokens": 150, "keep_recent": 1},
        {"fold_min_tokens": 120, "mask_min_tokens": 120, "keep_above": 0.8, "keep_recent": 1},
        {"fold_min_tokens": 60, "mask_min_tokens": 60, "keep_above": 1.0, "keep_recent": 1},
        {"fold_min_tokens": 60, "mask_min_tokens": 60, "keep_above": 1.0, "keep_recent": 0},
        {
            "fold_min_tokens": 60,
            "mask_min_tokens": 60,
            "keep_above": 1.0,
            "keep_recent": 0,
            "fold_calls": False,
        },
    )
)
"""Heuristic planner settings tried on the development split (the last one folds tool results
alone, as the planner did before span folds), each over :data:`HEURISTIC_BASE`.

The one chosen prunes most among those at or above :data:`DEV_STRICT` strict no-impact on the
development split (the target's bar); if none reaches it, the one with the highest strict rate.
"""

DEV_STRICT = 0.95
"""Strict no-impact a setting must reach on the development split to be chosen for pruning."""

HORIZON_GRID: tuple[dict[str, Any], ...] = tuple(
    {
        "fold_min_tokens": 60,
        "mask_min_tokens": 60,
        "keep_above": 1.0,
        "keep_recent": 0,
        "keep_file_views": views,
        "max_stubs": k,
    }
    for views in (False, True)
    for k in (1, 2, 3, 6, 12, 20, 30, 40)
)
"""Settings that also prune every stub but the newest ``max_stubs``, for matching.

They are never the default: a planner that drops the pointer to a folded payload drops the
model's way back to it. Without kept file views they prune the most (a kept view is not bounded
by the horizon); with them, and a wide horizon, they sit just above the default's pruning. With
:data:`HEURISTIC_GRID` they are the settings :func:`_match` chooses from on the development
split when the default does not dominate a baseline there.
"""

BASELINES = (
    "none",
    "oldest-fold-50",
    "tool-prune-keep3",
    "tool-mask-then-prune",
    "hybrid-fold-prune",
    "clear-tool-uses",
)


def _split(sessions: Sequence[TraceSession], share: float, seed: int) -> tuple[list, list]:
    """``(development, test)``: a seeded ``share`` of the sessions, plus every development-only one.

    The seeded draw is over the other sessions alone, so adding development-only sessions
    leaves the test split as it was.
    """
    pool = sorted(s.name for s in sessions if not s.dev_only)
    dev = set(random.Random(seed).sample(pool, max(1, round(share * len(pool))))) if pool else set()
    return (
        [s for s in sessions if s.dev_only or s.name in dev],
        [s for s in sessions if not s.dev_only and s.name not in dev],
    )


BASELINE_COST_THRESHOLDS = (0.0, 0.3)
"""Thresholds the baselines are cost-replayed at: commit whenever they act, and cache-aware."""


def _session_cost(
    session: TraceSession,
    run: CostRun,
    boundary: str,
    cached_price: float,
    count: TokenCounter,
    cache: ReplayCache | None,
    llm: Any = None,
) -> tuple[float, int, float]:
    """:func:`cost_replay` of one session for one run, and the seconds it took to compute.

    Cached like the per-cut cells.
    """
    _, policy, settings, threshold, aware = run
    key = _key(
        "cost",
        session.dataset,
        session.name,
        session_digest(session.messages),
        policy,
        settings,
        threshold,
        boundary,
        cached_price,
        *(["cache-aware"] if aware else []),
    )
    found = cache.get(key) if cache is not None else None
    if found is not None:
        return float(found[0]), int(found[1]), float(found[2])
    start = time.perf_counter()
    planner: Any = None
    edit = None
    if policy == "heuristic":
        planner = _heuristic_planner(settings)
    elif policy == "llm":
        planner = llm
    elif policy == "clear-tool-uses":
        edit = lambda state: _clear_tool_uses(state, count)  # noqa: E731
    elif policy != "none":
        planner = PolicyPlanner(policy, POLICIES[policy](), count)
    cost, commits = cost_replay(
        session,
        planner,
        threshold=threshold,
        boundary=boundary,
        cached_price=cached_price,
        counter=count,
        edit=edit,
        cache_aware=aware,
    )
    seconds = round(time.perf_counter() - start, 4)
    if cache is not None:
        cache.put(key, [cost, commits, seconds])
    return cost, commits, seconds


CostRun = tuple[str, str, Mapping[str, Any], float, bool]
"""``(label, policy, settings, threshold, cache-aware)`` of one whole-session cost replay."""


def _cost_runs(
    best: Mapping[str, Any],
    thresholds: Sequence[float],
    llm: Mapping[str, Any] | None = None,
) -> list[CostRun]:
    """Every whole-session cost replay.

    The heuristic runs at each threshold, and once with the cache-aware commit rule at threshold
    0 (``heuristic@0.0+cache``: commit whenever it pays). LangChain's context editing edits
    every request and commits nothing, so it has one run; an LLM planner (``llm``: its
    settings) runs at the harness's default threshold.
    """
    runs: list[CostRun] = [("none", "none", {}, 0.0, False)]
    runs += [(f"heuristic@{t}", "heuristic", best, t, False) for t in thresholds]
    runs.append(("heuristic@0.0+cache", "heuristic", best, 0.0, True))
    if llm is not None:
        runs.append(("llm@0.3", "llm", llm, 0.3, False))
    for name in BASELINES[1:]:
        if name == "clear-tool-uses":
            runs.append((name, name, {}, 0.0, False))
        else:
            runs += [(f"{name}@{t}", name, {}, t, False) for t in BASELINE_COST_THRESHOLDS]
    return runs


def _scorer(
    sessions: Sequence[TraceSession],
    max_cuts: int,
    seed: int,
    counter: TokenCounter,
    cache: ReplayCache | None,
    tick: Callable[[], None],
) -> Callable[..., dict[str, Any]]:
    """``(policy, settings, planner=...) -> row``: :func:`evaluate_cuts` on ``sessions``."""

    def row(policy: str, settings: Mapping[str, Any] | None = None, **more: Any) -> dict[str, Any]:
        return evaluate_cuts(
            sessions,
            policy,
            settings=settings,
            max_cuts=max_cuts,
            seed=seed,
            counter=counter,
            cache=cache,
            tick=tick,
            **more,
        ).row()

    return row


def _choose(
    dev: Sequence[TraceSession],
    max_cuts: int,
    seed: int,
    counter: TokenCounter,
    cache: ReplayCache | None,
    tick: Callable[[], None],
) -> tuple[dict[str, Any], list[tuple[Any, dict[str, Any], dict[str, Any]]]]:
    """The heuristic setting chosen on the development split, and every setting's score."""
    dev_row = _scorer(dev, max_cuts, seed, counter, cache, tick)
    scored = []
    for settings in HEURISTIC_GRID:
        row = dev_row("heuristic", settings=settings)
        safe = row["strict_no_impact"] >= DEV_STRICT
        score = (safe, row["pruning_mean"] if safe else row["strict_no_impact"])
        scored.append((score, settings, row))
    return max(scored, key=lambda t: t[0])[1], scored


def _match(
    dev: Sequence[TraceSession],
    best: Mapping[str, Any],
    scored: Sequence[tuple[Any, dict[str, Any], dict[str, Any]]],
    max_cuts: int,
    seed: int,
    counter: TokenCounter,
    cache: ReplayCache | None,
    tick: Callable[[], None],
) -> dict[str, dict[str, Any]]:
    """Per baseline the default does not dominate on the dev split, the setting that meets it.

    Meeting a baseline is reaching its development pruning at the highest strict no-impact
    there. The candidates are :data:`HEURISTIC_GRID` (its rows ``scored`` by :func:`_choose`,
    which chose ``best`` among them) and :data:`HORIZON_GRID`; a setting qualifies when its
    development pruning is at least the baseline's, and the one with the highest development
    strict rate (then the higher pruning) is chosen. A baseline that no setting meets gets
    none. Every figure here is from the development split.
    """
    dev_row = _scorer(dev, max_cuts, seed, counter, cache, tick)
    grid = [(g, row) for _, g, row in scored]
    mine = next(row for g, row in grid if g == best)
    grid += [(g, dev_row("heuristic", g)) for g in HORIZON_GRID]
    matched: dict[str, dict[str, Any]] = {}
    for name in BASELINES:
        if name == "none":
            continue
        other = dev_row(name, None)
        if _dominates(mine, other):
            continue
        fits = [
            (r["strict_no_impact"], r["pruning_mean"], i)
            for i, (_, r) in enumerate(grid)
            if r["pruning_mean"] >= other["pruning_mean"]
        ]
        if not fits:
            continue
        settings, row = grid[max(fits)[2]]
        matched[name] = {
            "settings": settings,
            "dev": {"strict": row["strict_no_impact"], "pruning": row["pruning_mean"]},
            "baseline_dev": {"strict": other["strict_no_impact"], "pruning": other["pruning_mean"]},
        }
    return matched


def matched_name(baseline: str) -> str:
    """The row name of the heuristic setting matched to ``baseline`` (see :func:`_match`)."""
    return f"heuristic~{baseline}"


# -- worker processes -----------------------------------------------------------------------------
Task = tuple[Any, ...]
"""``("cuts", dataset, session, policy, settings, max_cuts, seed)`` or
``("cost", dataset, session, run, boundary, cached_price)``: one replay cell to compute."""

_WORKER: dict[str, Any] = {}


def _worker_init(sessions: Mapping[tuple[str, str], TraceSession], cache: ReplayCache) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool on Ctrl-C
    _WORKER.update(sessions=sessions, cache=cache, counter=TokenCounter())


def _fill(task: Task) -> None:
    """Compute one cell into the worker's cache."""
    kind, dataset, name, *rest = task
    session, cache, counter = (
        _WORKER["sessions"][(dataset, name)],
        _WORKER["cache"],
        _WORKER["counter"],
    )
    if kind == "cuts":
        policy, settings, max_cuts, seed = rest
        evaluate_cuts(
            [session],
            policy,
            settings=settings,
            max_cuts=max_cuts,
            seed=seed,
            counter=counter,
            cache=cache,
        )
    else:
        run, boundary, cached_price = rest
        _session_cost(session, run, boundary, cached_price, counter, cache)


def _fill_all(
    tasks: Sequence[Task],
    sessions: Sequence[TraceSession],
    cache: ReplayCache,
    jobs: int,
    tick: Callable[[], None],
) -> None:
    """Compute ``tasks`` in ``jobs`` worker processes into ``cache`` (a tick per task)."""
    by_name = {(s.dataset, s.name): s for s in sessions}
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_worker_init, initargs=(by_name, cache)
    )
    try:
        for done in as_completed([pool.submit(_fill, t) for t in tasks]):
            done.result()
            tick()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # cells finished so far stay cached
        raise
    pool.shutdown()


def _prefill(
    splits: Mapping[str, tuple[list[TraceSession], list[TraceSession]]],
    selection: Sequence[str],
    thresholds: Sequence[float],
    cached_price: float,
    max_cuts: int,
    seed: int,
    cache: ReplayCache,
    jobs: int,
    tick: Callable[[], None],
    grow: Callable[[int], None],
) -> None:
    """Every cell of the replay, computed in worker processes before the tables read them.

    First what does not depend on the heuristic setting (the development grids, the baselines
    on both splits, per-call selection), then, with the setting chosen, the rest (the heuristic,
    its matched and ``life+select`` rows, the cost replays); ``grow`` adds the matched rows'
    cells to the progress bar's total. The largest data set goes first in each phase.
    """
    order = sorted(splits, key=lambda d: -sum(len(s.messages) for s in splits[d][1]))
    sessions = [s for d in order for part in splits[d] for s in part]
    first: list[Task] = []
    for d in order:
        dev, test = splits[d]
        first += [
            ("cuts", d, s.name, "heuristic", g, max_cuts, seed)
            for g in (*HEURISTIC_GRID, *HORIZON_GRID)
            for s in dev
        ]
        first += [
            ("cuts", d, s.name, p, None, max_cuts, seed)
            for p in BASELINES
            if p != "none"
            for s in dev
        ]
        first += [
            ("cuts", d, s.name, p, None, max_cuts, seed)
            for p in (*BASELINES, *selection)
            if not behind_lifecycle(p)
            for s in test
        ]
    _fill_all(first, sessions, cache, jobs, tick)
    second: list[Task] = []
    for d in order:
        dev, test = splits[d]
        best, scored = _choose(dev, max_cuts, seed, TokenCounter(), cache, lambda: None)
        second += [
            ("cuts", d, s.name, p, best, max_cuts, seed)
            for p in ("heuristic", *(p for p in selection if behind_lifecycle(p)))
            for s in test
        ]
        matched = _match(dev, best, scored, max_cuts, seed, TokenCounter(), cache, lambda: None)
        second += [
            ("cuts", d, s.name, "heuristic", m["settings"], max_cuts, seed)
            for m in matched.values()
            for s in test
        ]
        grow(len(matched) * len(test))
        second += [
            ("cost", d, s.name, run, "tool", cached_price)
            for run in _cost_runs(best, thresholds)
            for s in test
        ]
    _fill_all(second, sessions, cache, jobs, tick)


def run_lifecycle_eval(
    sessions: Sequence[TraceSession],
    *,
    max_cuts: int = 8,
    seed: int = 0,
    dev_share: float = 0.3,
    thresholds: Sequence[float] = (0.0, 0.1, 0.3, 0.5),
    cached_price: float = 0.1,
    selection: Sequence[str] = (),
    progress: Callable[[str], None] = lambda _: None,
    cache: ReplayCache | None = None,
    bar: bool = False,
    planner: Any = None,
    planner_spec: str = "",
    jobs: int = 1,
) -> dict[str, Any]:
    """Cuts, policies and cost replay over every data set of ``sessions``; a JSON-ready dict.

    ``selection`` adds per-call selection policies (``select:<strategy>@<kept share>``, e.g.
    :data:`SELECTION`) to the per-cut tables. With ``cache`` every session's cells are kept
    and reused (an interrupted run resumes where it stopped); ``bar`` shows a progress bar
    on a terminal. ``planner`` (an :class:`~langchain_pacms.lifecycle.LLMPlanner` built from
    the chat model ``planner_spec``) adds an ``llm`` row on the test split and its cost
    replay at the default threshold 0.3. With ``cache`` and ``jobs > 1`` (and no
    ``planner``) the cells are computed in that many worker processes first; the tables are
    the same as with one.
    """
    llm = {"spec": planner_spec} if planner is not None else None
    counter = TokenCounter()
    report: dict[str, Any] = {
        "protocol": {
            "max_cuts": max_cuts,
            "seed": seed,
            "dev_share": dev_share,
            "min_tools": 4,
            "cached_price": cached_price,
            "thresholds": list(thresholds),
            "baseline_thresholds": list(BASELINE_COST_THRESHOLDS),
            "dev_strict": DEV_STRICT,
        },
        "datasets": {},
    }
    splits = {
        d: _split([s for s in sessions if s.dataset == d], dev_share, seed)
        for d in sorted({s.dataset for s in sessions})
    }
    replays = len(_cost_runs({}, thresholds, llm))
    total = sum(
        (len(HEURISTIC_GRID) + len(HORIZON_GRID) + len(BASELINES) - 1) * len(dev)
        + (1 + len(BASELINES) + len(selection) + (llm is not None) + replays) * len(test)
        for dev, test in splits.values()
    )
    shown = progress_bar(total, bar, desc="lifecycle", unit="session")
    tick = shown.update if shown is not None else (lambda: None)
    say = shown.write if shown is not None else progress

    def grow(cells: int) -> None:  # the matched rows are known once the dev split is scored
        if shown is not None:
            shown.total += cells
            shown.refresh()

    prefilled = False
    if cache is not None and jobs > 1 and planner is None:
        prefilled = True
        _prefill(
            splits, selection, thresholds, cached_price, max_cuts, seed, cache, jobs, tick, grow
        )
        tick = lambda: None  # noqa: E731 (every cell is counted: the tables read them back)
    for dataset, (dev, test) in splits.items():
        best, scored = _choose(dev, max_cuts, seed, counter, cache, tick)
        for _, settings, row in scored:
            say(f"{dataset} dev heuristic {settings}: {_figures(row)}")
        on_test = _scorer(test, max_cuts, seed, counter, cache, tick)
        rows = {"heuristic": on_test("heuristic", settings=best)}
        say(f"{dataset} heuristic (test): {_figures(rows['heuristic'])}")
        if llm is not None:
            rows["llm"] = on_test("llm", settings=llm, planner=planner)
        for name in (*BASELINES, *selection):
            rows[name] = on_test(name, settings=best if behind_lifecycle(name) else None)
            say(f"{dataset} {name}: {_figures(rows[name])}")
        matched = _match(dev, best, scored, max_cuts, seed, counter, cache, tick)
        if not prefilled:
            grow(len(matched) * len(test))
        for baseline, m in matched.items():
            name = matched_name(baseline)
            rows[name] = on_test("heuristic", settings=m["settings"])
            say(f"{dataset} {name} {m['settings']}: {_figures(rows[name])}")
        boundary = "auto"  # the harness's default, as the cuts
        costs: dict[str, Any] = {}
        seconds = 0.0
        for run in _cost_runs(best, thresholds, llm):
            label, name = run[0], run[1]
            total_cost, commits = 0.0, 0
            for s in test:
                c, k, t = _session_cost(s, run, boundary, cached_price, counter, cache, planner)
                total_cost, commits, seconds = total_cost + c, commits + k, seconds + t
                tick()
            costs[label] = total_cost
            if name != "none":
                costs[f"{label}:commits"] = commits
        base = costs["none"]
        report["datasets"][dataset] = {
            "sessions_dev": len(dev),
            "sessions_test": len(test),
            "heuristic_settings": best,
            "dev_grid": [
                {"settings": st, "strict": r["strict_no_impact"], "pruning": r["pruning_mean"]}
                for _, st, r in scored
            ],
            "matched": matched,
            "policies": rows,
            "cost": {k: (round(v, 1) if ":" not in k else v) for k, v in costs.items()},
            "cost_vs_none": {
                k: round(1 - v / base, 4)
                for k, v in costs.items()
                if ":" not in k and k != "none" and base
            },
            "cost_seconds": round(seconds, 1),
        }
        say(f"{dataset} cost vs none: {report['datasets'][dataset]['cost_vs_none']}")
    if shown is not None:
        shown.close()
    report["cost_total"], report["targets"] = _totals_and_targets(report["datasets"])
    return report


TARGETS = {"mini-swe": 0.5, "tau-bench": 0.3}
"""Pruning rate the heuristic must reach at >= 95% strict no-impact, per data set."""
COST_TARGET = 0.25
"""Cache-adjusted cost saving against no management the whole replay must reach."""


def _figures(row: Mapping[str, Any]) -> str:
    """A row's strict no-impact and mean pruning, for the progress lines."""
    return f"{row['strict_no_impact']:.3f} @ {row['pruning_mean']:.3f}"


def _dominates(mine: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """No lower strict no-impact at no lower pruning, and better on one of them (Pareto).

    An empty ``mine`` (a row that was not run) dominates nothing.
    """
    if not mine:
        return False
    a, b = (
        (mine["strict_no_impact"], mine["pruning_mean"]),
        (other["strict_no_impact"], other["pruning_mean"]),
    )
    return a[0] >= b[0] and a[1] >= b[1] and a != b


def _totals_and_targets(
    datasets: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole replay's cost per label, and each target of the issue with its figure."""
    labels = set.intersection(*(set(d["cost"]) for d in datasets.values())) if datasets else set()
    total = {k: sum(d["cost"][k] for d in datasets.values()) for k in sorted(labels)}
    base = total.get("none", 0.0)
    saved = {
        k: round(1 - v / base, 4) for k, v in total.items() if ":" not in k and k != "none" and base
    }
    best = max((k for k in saved if k.startswith("heuristic@")), key=saved.__getitem__, default="")
    targets: dict[str, Any] = {
        "cost": {
            "goal": COST_TARGET,
            "best": best,
            "saved": saved.get(best, 0.0),
            "met": saved.get(best, 0.0) >= COST_TARGET,
        }
    }
    for dataset, data in datasets.items():
        rows = data["policies"]
        mine = rows["heuristic"]
        not_dominated = [
            name
            for name, r in rows.items()
            if name in BASELINES and name != "none" and not _dominates(mine, r)
        ]
        unmatched = [
            name
            for name in not_dominated
            if not _dominates(rows.get(matched_name(name), {}), rows[name])
        ]
        entry: dict[str, Any] = {
            "strict": mine["strict_no_impact"],
            "strict_rederivable_excluded": mine["strict_rederivable_excluded"],
            "pruning": mine["pruning_mean"],
            "not_dominated": not_dominated,
            "above_every_baseline": not not_dominated,
            "not_matched": unmatched,
            "above_every_baseline_matched": not unmatched,
        }
        if dataset in TARGETS:
            entry["pruning_goal"] = TARGETS[dataset]
            entry["met"] = (
                mine["strict_no_impact"] >= DEV_STRICT and mine["pruning_mean"] >= TARGETS[dataset]
            )
        targets[dataset] = entry
    return {"cost": {k: round(v, 1) for k, v in total.items()}, "saved": saved}, targets


def _target_lines(report: Mapping[str, Any]) -> list[str]:
    """The targets as a Markdown table (empty for a report without them)."""
    targets = report.get("targets")
    if not targets:
        return []
    cost = targets["cost"]
    saved = report["cost_total"]["saved"]
    lines = [
        "### Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        f"| whole-replay cost >= {cost['goal']:.0%} below no management | "
        f"{cost['best'] or 'heuristic'} saves {cost['saved']:.1%} (all labels: "
        + ", ".join(f"{k} {v:+.1%}" for k, v in saved.items() if k.startswith("heur"))
        + f") | {'yes' if cost['met'] else 'no'} |",
    ]
    for dataset, t in targets.items():
        if dataset == "cost":
            continue
        if "pruning_goal" in t:
            lines.append(
                f"| {dataset}: strict >= {DEV_STRICT:.0%} at pruning >= "
                f"{t['pruning_goal']:.0%} | {t['strict']:.1%} at {t['pruning']:.1%} "
                f"({t['strict_rederivable_excluded']:.1%} re-derivable excluded) | "
                f"{'yes' if t['met'] else 'no'} |"
            )
        beaten = ", ".join(t["not_dominated"]) or "none"
        lines.append(
            f"| {dataset}: the default dominates every baseline (strict no-impact and "
            f"pruning no lower, one higher) | not dominated: {beaten} | "
            f"{'yes' if t['above_every_baseline'] else 'no'} |"
        )
        if t["not_dominated"]:
            left = ", ".join(t["not_matched"]) or "none"
            lines.append(
                f"| {dataset}: each of those dominated by the setting matched to it "
                f"on the development split (`{matched_name('<baseline>')}`) | "
                f"not dominated: {left} | "
                f"{'yes' if t['above_every_baseline_matched'] else 'no'} |"
            )
    return [*lines, ""]


def write_report(report: Mapping[str, Any], out: Path) -> list[Path]:
    """Write ``lifecycle.json``, ``lifecycle.md`` and (with matplotlib) ``lifecycle.png``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "lifecycle.json", out / "lifecycle.md"]
    paths[0].write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    lines = []
    for dataset, data in report["datasets"].items():
        lines += [
            f"### {dataset} ({data['sessions_test']} test sessions, "
            f"heuristic settings {data['heuristic_settings'] or 'defaults'})",
            "",
            "| policy | cuts | pruning (mean / median) | non-system pruning "
            "| strict no-impact [95% CI] | strict, re-derivable excluded [95% CI] "
            "| with recovery [95% CI] | recovery calls | rejected actions |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for name, r in data["policies"].items():
            rejected = "; ".join(f"{n} {why}" for why, n in r["rejected"].items()) or "-"
            lines.append(
                f"| {name} | {r['cuts']} | {r['pruning_mean']:.1%} / {r['pruning_median']:.1%} | "
                f"{r['pruning_non_system_mean']:.1%} | {r['strict_no_impact']:.1%} "
                f"[{r['strict_ci'][0]:.1%}, {r['strict_ci'][1]:.1%}] | "
                f"{r['strict_rederivable_excluded']:.1%} "
                f"[{r['strict_rederivable_excluded_ci'][0]:.1%}, "
                f"{r['strict_rederivable_excluded_ci'][1]:.1%}] | "
                f"{r['no_impact_with_recovery']:.1%} [{r['recovery_ci'][0]:.1%}, "
                f"{r['recovery_ci'][1]:.1%}] | {r['recovery_calls']} | {rejected} |"
            )
        lines += [
            "",
            f"Cache-adjusted input cost over the {data['sessions_test']} test sessions "
            "(`name@t`: committed by the harness at threshold t; saved: against no "
            "management, positive is cheaper):",
            "",
            "| policy | cost | saved | commits |",
            "|---|---:|---:|---:|",
            f"| none | {data['cost']['none']:,.0f} | - | - |",
        ]
        for label, saved in data["cost_vs_none"].items():
            commits = data["cost"].get(f"{label}:commits", "-")
            lines.append(f"| {label} | {data['cost'][label]:,.0f} | {saved:+.1%} | {commits} |")
        lines.append("")
    lines += _target_lines(report)
    paths[1].write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return paths
    paths.append(out / "lifecycle.png")
    _plot(report, plt, paths[-1])
    return paths


_STRATEGY_COLORS = {"pacms": 3, "topk": 0, "mmr": 2, "lastk": 1}  # tab10 indices
_FAMILY_MARKERS = {"select": "s", "select+stubs": "^", "life+select": "D"}


def _plot(report: Mapping[str, Any], plt: Any, path: Path) -> None:
    """Pruning against strict no-impact with Wilson intervals, one column per data set.

    The top row holds the planner (a star; a plus for a setting matched to a baseline) and the
    baselines; the bottom row the per-call selection
    rows (colour: strategy; marker: family; filled at 50% kept, hollow at 30%, thick-edged at
    70%) with the heuristic as a black star for reference.
    """
    from matplotlib.lines import Line2D

    datasets = list(report["datasets"])
    fig, axes = plt.subplots(
        2, len(datasets), figsize=(4.6 * len(datasets) + 3.2, 8), squeeze=False
    )
    tab = plt.get_cmap("tab10")

    def point(ax: Any, r: Mapping[str, Any], **style: Any) -> None:
        low, high = r["strict_ci"]
        y = r["strict_no_impact"]
        ax.errorbar(r["pruning_mean"], y, yerr=[[y - low], [high - y]], capsize=3, **style)

    for col, dataset in enumerate(datasets):
        policies = report["datasets"][dataset]["policies"]
        top, bottom = axes[0][col], axes[1][col]
        plain = [n for n in policies if not is_selection(n)]
        for k, name in enumerate(plain):
            mine = name.startswith("heuristic")  # the default (star) or a matched setting
            point(
                top,
                policies[name],
                fmt="*" if name == "heuristic" else "P" if mine else "o",
                color="black" if name == "heuristic" else "dimgray" if mine else tab(k % 10),
                label=name,
                markersize=11 if name == "heuristic" else 8 if mine else 6,
            )
        if "heuristic" in policies:
            point(bottom, policies["heuristic"], fmt="*", color="black", markersize=11)
        for name in (n for n in policies if is_selection(n)):
            family, _, spec = name.partition(":")
            strategy, _, share = spec.partition("@")
            color = tab(_STRATEGY_COLORS.get(strategy, 9))
            kept = float(share)
            point(
                bottom,
                policies[name],
                fmt=_FAMILY_MARKERS[family],
                color=color,
                markerfacecolor="none" if kept < 0.5 else color,
                markersize=7,
                markeredgewidth=2 if kept > 0.5 else 1,
            )
        for row, ax in ((0, top), (1, bottom)):
            ax.set_title(dataset if row == 0 else f"{dataset}: per-call selection")
            ax.set_xlabel("pruning rate (share of prefix tokens removed)")
            ax.set_ylabel("strict no-impact")
            ax.set_xlim(-0.02, 1)
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    keys = [Line2D([], [], marker="*", color="black", ls="", markersize=11, label="heuristic")]
    keys += [
        Line2D([], [], marker="o", color=tab(i), ls="", label=s)
        for s, i in _STRATEGY_COLORS.items()
    ]
    keys += [
        Line2D([], [], marker=m, color="black", ls="", label=f) for f, m in _FAMILY_MARKERS.items()
    ]
    keys += [
        Line2D([], [], marker="o", color="black", ls="", label="50% kept"),
        Line2D([], [], marker="o", color="black", markerfacecolor="none", ls="", label="30% kept"),
        Line2D(
            [],
            [],
            marker="o",
            color="black",
            markeredgewidth=2,
            ls="",
            label="70% kept (thick edge)",
        ),
    ]
    axes[1][-1].legend(handles=keys, fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
