"""The cost replay: whole sessions with the harness in the loop, priced with a prompt cache.

Each session is replayed call by call; the input tokens of each model call are priced
``cached_price`` for the unchanged prefix since the previous call and ``1.0`` for the rest
(:func:`cost_replay`). :func:`cost_runs` lists every replay of a report and
:func:`session_cost` runs one on one session, cached like the per-cut cells.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms.lifecycle import CommitRule, LifecycleHarness
from langchain_pacms.tokens import TokenCounter
from pacms_bench.replay_cache import ReplayCache, session_digest
from pacms_bench.replay_cuts import cell_key
from pacms_bench.replay_policies import (
    BASELINES,
    POLICIES,
    PolicyPlanner,
    clear_tool_uses,
    heuristic_planner,
)
from pacms_bench.replay_tokens import message_tokens
from pacms_bench.traces import TraceSession

__all__ = [
    "BASELINE_COST_THRESHOLDS",
    "CostRun",
    "cost_replay",
    "cost_runs",
    "session_cost",
]


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
            cached = message_tokens(request[:same], count)
            cost += cached_price * cached + message_tokens(request[same:], count)
            previous = list(request)
        state.append(message)
    return cost, commits


BASELINE_COST_THRESHOLDS = (0.0, 0.3)
"""Thresholds the baselines are cost-replayed at: commit whenever they act, and cache-aware."""

CostRun = tuple[str, str, Mapping[str, Any], float, bool]
"""``(label, policy, settings, threshold, cache-aware)`` of one whole-session cost replay."""


def session_cost(
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
    key = cell_key(
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
        planner = heuristic_planner(settings)
    elif policy == "llm":
        planner = llm
    elif policy == "clear-tool-uses":
        edit = lambda state: clear_tool_uses(state, count)  # noqa: E731
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


def cost_runs(
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
