"""Lifecycle replay on real agent traces: cut points, policies, metrics, cost, reports.

At each cut point a policy manages the session prefix; the
:mod:`~langchain_pacms.eval.dependency_judge` (which shares no rules with the planners) checks
the continuation's exact dependencies against the managed view and the folded sidecars. The
cost replay runs a whole session call by call with the policy in the loop and prices input
tokens of an unchanged prefix at ``cached_price`` (a cache hit) and the rest at ``fresh_price``.

Example:
    >>> wilson(45, 50)[0] > 0.78
    True
    >>> cut_points([1, 2, 3, 4, 5, 6, 7, 8], max_cuts=2, seed=0, min_spans=4)
    [6, 8]
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from langchain_pacms.eval.dependency_judge import future_dependencies, judge_view, message_text
from langchain_pacms.eval.lifecycle_baselines import BASELINES
from langchain_pacms.eval.traces import TraceSession
from langchain_pacms.lifecycle import (
    LifecycleHarness,
    Planner,
    check_actions,
    index_messages,
)
from langchain_pacms.tokens import resolve_token_counter

Policy = Callable[[Sequence[BaseMessage]], "Managed"]


@dataclass(frozen=True)
class Managed:
    """A policy's output for one prefix.

    Attributes:
        view: The managed active view.
        sidecars: ``id -> payload`` of what was folded (recoverable).
        rejected: Reasons of plan actions the checks dropped.

    Example:
        >>> Managed([]).sidecars
        {}
    """

    view: list[BaseMessage]
    sidecars: dict[str, str] = field(default_factory=dict)
    rejected: tuple[str, ...] = ()


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial rate (``(0, 1)`` when ``n`` is 0).

    Example:
        >>> [round(x, 3) for x in wilson(0, 10)]
        [0.0, 0.278]
    """
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def cut_points(
    tool_indices: Sequence[int], *, max_cuts: int, seed: int, min_spans: int = 4
) -> list[int]:
    """Message indices to cut at: after a tool output once ``min_spans`` tool outputs exist.

    At most ``max_cuts`` cuts, evenly spaced over the eligible ones, with a seeded offset.

    Example:
        >>> cut_points([3, 5], max_cuts=4, seed=1)
        []
    """
    if max_cuts < 1:
        raise ValueError(f"max_cuts must be >= 1, got {max_cuts!r}")
    eligible = list(tool_indices[min_spans - 1 :])
    if len(eligible) <= max_cuts:
        return eligible
    step = len(eligible) / max_cuts
    offset = random.Random(seed).random() * step
    return [eligible[min(int(offset + k * step), len(eligible) - 1)] for k in range(max_cuts)]


def _last_tool_of_step(messages: Sequence[BaseMessage]) -> list[int]:
    """Tool outputs that end their assistant step (the next message is not a tool output)."""
    return [
        k
        for k, m in enumerate(messages)
        if isinstance(m, ToolMessage)
        and (k + 1 == len(messages) or not isinstance(messages[k + 1], ToolMessage))
    ]


class Tokens:
    """Token counts of message texts, cached by text.

    Example:
        >>> Tokens()([SystemMessage("hello world")]) > 0
        True
    """

    def __init__(self, counter: Any = None) -> None:
        self._count = resolve_token_counter(counter)
        self._cache: dict[str, int] = {}

    def text(self, text: str) -> int:
        """Tokens of one text."""
        n = self._cache.get(text)
        if n is None:
            n = self._cache[text] = self._count(text)
        return n

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of a message list."""
        return sum(self.text(message_text(m)) for m in messages)


def planner_policy(planner: Planner, latest: str) -> Policy:
    """Per-cut policy: plan on the prefix and apply the checked actions.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle import HeuristicPlanner
        >>> planner_policy(HeuristicPlanner(), "step")([HumanMessage("t", id="u")]).view[0].content
        't'
    """

    def run(prefix: Sequence[BaseMessage]) -> Managed:
        index = index_messages(prefix, latest=latest)  # type: ignore[arg-type]
        plan = planner.plan(index, prefix)
        rejected = [] if plan.ok else [f"plan rejected: {plan.rejected}"]
        checked = check_actions(prefix, index, plan.actions)
        rejected += [r.reason for r in checked.rejected]
        sidecars = {s.object_id: s.payload for s in checked.result.sidecars}
        return Managed(checked.result.messages, sidecars, tuple(rejected))

    return run


def baseline_policy(name: str) -> Policy:
    """Per-cut policy from a baseline of :mod:`~langchain_pacms.eval.lifecycle_baselines`.

    Example:
        >>> baseline_policy("tool_prune_keep3")([]).view
        []
    """
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; choose from {sorted(BASELINES)}")
    fn = BASELINES[name]

    def run(prefix: Sequence[BaseMessage]) -> Managed:
        view, sidecars = fn(prefix)
        return Managed(view, sidecars)

    return run


@dataclass(frozen=True)
class CutResult:
    """One policy at one cut.

    Example:
        >>> CutResult("s", 3, 0.5, 0.6, 2, True, True, 0, ()).pruning
        0.5
    """

    session_id: str
    cut: int
    pruning: float
    pruning_non_system: float
    dependencies: int
    strict: bool
    with_recovery: bool
    recovery_calls: int
    rejected: tuple[str, ...]


def evaluate_cuts(
    session: TraceSession, policy: Policy, cuts: Sequence[int], tokens: Tokens
) -> list[CutResult]:
    """Run ``policy`` at each cut of ``session`` and judge the views.

    Example:
        >>> session = TraceSession("s", "x", [])
        >>> evaluate_cuts(session, baseline_policy("hybrid_fold_prune"), [], Tokens())
        []
    """
    messages = session.messages
    texts = [message_text(m) for m in messages]
    out = []
    for cut in cuts:
        prefix = messages[: cut + 1]
        managed = policy(prefix)
        before = tokens(prefix)
        after = tokens(managed.view)
        system = tokens([m for m in prefix if isinstance(m, SystemMessage)])
        sys_after = tokens([m for m in managed.view if isinstance(m, SystemMessage)])
        deps = future_dependencies(messages, cut, texts)
        verdict = judge_view(deps, managed.view, managed.sidecars)
        non_sys = before - system
        out.append(
            CutResult(
                session.session_id,
                cut,
                1 - after / before if before else 0.0,
                1 - (after - sys_after) / non_sys if non_sys > 0 else 0.0,
                len(deps),
                verdict.strict,
                verdict.with_recovery,
                verdict.recovery_calls,
                managed.rejected,
            )
        )
    return out


def summarize(results: Sequence[CutResult]) -> dict[str, Any]:
    """Metrics over cut results: pruning mean/median, rates with Wilson 95% intervals.

    Example:
        >>> summary = summarize([CutResult("s", 3, 0.5, 0.6, 2, True, True, 0, ())])
        >>> summary["strict_no_impact"]["rate"]
        1.0
    """
    n = len(results)

    def rate(k: int) -> dict[str, Any]:
        lo, hi = wilson(k, n)
        return {"rate": k / n if n else 0.0, "ci95": [lo, hi], "k": k, "n": n}

    pruning = [r.pruning for r in results]
    non_sys = [r.pruning_non_system for r in results]
    with_deps = [r for r in results if r.dependencies]
    rejected = Counter(reason for r in results for reason in r.rejected)
    return {
        "cuts": n,
        "sessions": len({r.session_id for r in results}),
        "cuts_with_dependencies": len(with_deps),
        "pruning_mean": statistics.fmean(pruning) if pruning else 0.0,
        "pruning_median": statistics.median(pruning) if pruning else 0.0,
        "pruning_non_system_mean": statistics.fmean(non_sys) if non_sys else 0.0,
        "pruning_non_system_median": statistics.median(non_sys) if non_sys else 0.0,
        "strict_no_impact": rate(sum(r.strict for r in results)),
        "no_impact_with_recovery": rate(sum(r.with_recovery for r in results)),
        "recovery_calls_mean": statistics.fmean(r.recovery_calls for r in results) if n else 0.0,
        "recovery_calls_total": sum(r.recovery_calls for r in results),
        "rejected": dict(rejected.most_common()),
    }


def split_sessions(ids: Sequence[str], dev_share: float, seed: int) -> tuple[list[str], list[str]]:
    """Seeded split of session ids into (dev, report).

    Example:
        >>> dev, rep = split_sessions([str(k) for k in range(10)], 0.3, 0)
        >>> len(dev), len(rep), set(dev) & set(rep)
        (3, 7, set())
    """
    if not 0.0 < dev_share < 1.0:
        raise ValueError(f"dev_share must be in (0, 1), got {dev_share!r}")
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    k = max(1, round(len(order) * dev_share))
    return sorted(order[:k]), sorted(order[k:])


def choose_settings(dev: Mapping[str, dict[str, Any]], target: float = 0.95) -> str:
    """Pick the setting with the highest mean pruning whose dev strict no-impact meets ``target``.

    Falls back to the highest strict no-impact when none meets it.

    Example:
        >>> choose_settings({"a": {"pruning_mean": 0.6, "strict_no_impact": {"rate": 0.9}},
        ...                  "b": {"pruning_mean": 0.3, "strict_no_impact": {"rate": 0.97}}})
        'b'
    """
    ok = [k for k, s in dev.items() if s["strict_no_impact"]["rate"] >= target]
    if ok:
        return max(ok, key=lambda k: dev[k]["pruning_mean"])
    return max(dev, key=lambda k: (dev[k]["strict_no_impact"]["rate"], dev[k]["pruning_mean"]))


# -- cost replay ---------------------------------------------------------------------------------
def _key(m: BaseMessage) -> tuple[str, str]:
    return (str(m.id), message_text(m))


def prefix_cost(
    previous: Sequence[BaseMessage],
    current: Sequence[BaseMessage],
    tokens: Tokens,
    cached_price: float,
    fresh_price: float,
) -> tuple[float, int]:
    """Price one call's input: the leading messages equal to the last call's are cache hits.

    Returns:
        ``(cost, input tokens)``.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> a, b = HumanMessage("x " * 10, id="a"), HumanMessage("y " * 10, id="b")
        >>> t = Tokens()
        >>> prefix_cost([a], [a, b], t, 0.1, 1.0)[0] == 0.1 * t([a]) + t([b])
        True
    """
    same = 0
    for old, new in zip(previous, current, strict=False):
        if _key(old) != _key(new):
            break
        same += 1
    hit = tokens(current[:same])
    rest = tokens(current[same:])
    return cached_price * hit + fresh_price * rest, hit + rest


def call_points(messages: Sequence[BaseMessage]) -> list[int]:
    """Indices of assistant messages: each is one model call that saw the messages before it.

    Example:
        >>> call_points([SystemMessage("s"), AIMessage("a")])
        [1]
    """
    return [k for k, m in enumerate(messages) if isinstance(m, AIMessage) and k > 0]


def replay_cost(
    session: TraceSession,
    manage: Callable[[list[BaseMessage], int], list[BaseMessage]] | None,
    tokens: Tokens,
    cached_price: float = 0.1,
    fresh_price: float = 1.0,
) -> dict[str, float]:
    """Replay ``session`` call by call; ``manage(history, call_no)`` returns the new history.

    ``None`` is no management. New trace messages are appended to the managed history after
    each call, as the agent would have seen them.

    Example:
        >>> session = TraceSession("s", "x", [SystemMessage("s", id="s"), AIMessage("a", id="a")])
        >>> replay_cost(session, None, Tokens())["calls"]
        1.0
    """
    messages = session.messages
    history: list[BaseMessage] = []
    previous: list[BaseMessage] = []
    seen = 0
    cost = 0.0
    total = 0
    calls = 0
    for k in call_points(messages):
        history.extend(messages[seen:k])
        seen = k
        if manage is not None:
            history = manage(history, calls)
        c, n = prefix_cost(previous, history, tokens, cached_price, fresh_price)
        cost += c
        total += n
        calls += 1
        previous = list(history)
    return {"cost": cost, "input_tokens": float(total), "calls": float(calls)}


def harness_manager(
    planner: Planner, threshold: float, boundary: str, thread_id: str
) -> tuple[Callable[[list[BaseMessage], int], list[BaseMessage]], LifecycleHarness]:
    """A manager that runs :class:`LifecycleHarness` on the history before each call.

    Example:
        >>> from langchain_pacms.lifecycle import HeuristicPlanner
        >>> manage, harness = harness_manager(HeuristicPlanner(), 0.3, "tool", "t")
        >>> manage([], 0), harness.threshold
        ([], 0.3)
    """
    harness = LifecycleHarness(planner, threshold=threshold, boundary=boundary)  # type: ignore[arg-type]
    known: dict[str, Mapping[str, str]] = {}

    def manage(history: list[BaseMessage], _call: int) -> list[BaseMessage]:
        if not history:
            return history
        commit = harness.step(history, thread_id=thread_id, known_ids=known.get("ids"))
        if commit is None:
            return history
        known["ids"] = commit.known_ids
        return list(commit.messages)

    return manage, harness


def baseline_manager(name: str) -> Callable[[list[BaseMessage], int], list[BaseMessage]]:
    """A manager that applies a baseline to the full trace history before each call.

    Example:
        >>> baseline_manager("tool_prune_keep3")([], 0)
        []
    """
    policy = baseline_policy(name)
    return lambda history, _call: policy(history).view
