"""Budgeted greedy maximisation of the coverage objective.

:func:`lazy_greedy` is cost-aware lazy greedy (CELF): every candidate sits in a heap keyed by a
stale upper bound of its gain per token; the top is re-evaluated and accepted only when it stays on
top. Submodularity makes stale gains valid upper bounds, so it picks exactly what
:func:`plain_greedy` (re-evaluate everything every round) picks, with far fewer evaluations.

:func:`budgeted_greedy` returns the better of the cost-benefit greedy and the best single item
(each on top of the mandatory set), which gives the ``(1 - 1/e) / 2`` guarantee for monotone
submodular maximisation under a knapsack constraint.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.objective import CoverageObjective

__all__ = ["GreedyResult", "budgeted_greedy", "lazy_greedy", "plain_greedy"]


@dataclass(frozen=True)
class GreedyResult:
    """Items picked on top of the start set, in pick order, with their marginal gains."""

    picks: list[int]
    gains: list[float]
    evaluations: int


def _ratio(gain: float, cost: int, exponent: float) -> float:
    return gain / (max(cost, 1) ** exponent)


def lazy_greedy(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    budget: int,
    start: NDArray[np.int64],
    rank: NDArray[np.int64],
    *,
    cost_exponent: float = 1.0,
) -> GreedyResult:
    """Cost-aware lazy greedy from a start set.

    Args:
        objective: The objective to maximise.
        costs: Token cost of every candidate.
        budget: Total budget (the start set's cost is charged first).
        start: Indices already in the set (mandatory items).
        rank: Tie-break rank of every candidate (lower wins ties).
        cost_exponent: Gains are divided by ``cost ** cost_exponent``; 1 is gain per token, 0 is
            plain gain.

    Returns:
        The picks made after ``start``; stops when nothing that fits has a positive gain.
    """
    coverage = objective.coverage_of(start)
    remaining = budget - int(costs[start].sum())
    in_set = np.zeros(costs.shape[0], dtype=bool)
    in_set[start] = True
    initial = objective.gains(coverage)
    heap = [
        (-_ratio(float(initial[j]), int(costs[j]), cost_exponent), int(rank[j]), j)
        for j in np.flatnonzero(~in_set & (costs <= remaining)).tolist()
    ]
    heapq.heapify(heap)
    fresh_at = dict.fromkeys((item[2] for item in heap), 0)
    gain_of = {item[2]: float(initial[item[2]]) for item in heap}
    picks: list[int] = []
    gains: list[float] = []
    evaluations = len(heap)
    while heap:
        _, tie, j = heapq.heappop(heap)
        if costs[j] > remaining:
            continue
        if fresh_at[j] == len(picks):
            if gain_of[j] <= 0.0:
                break
            objective.add(j, coverage)
            remaining -= int(costs[j])
            picks.append(j)
            gains.append(gain_of[j])
            continue
        gain = objective.gain(j, coverage)
        evaluations += 1
        gain_of[j] = gain
        fresh_at[j] = len(picks)
        heapq.heappush(heap, (-_ratio(gain, int(costs[j]), cost_exponent), tie, j))
    return GreedyResult(picks, gains, evaluations)


def plain_greedy(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    budget: int,
    start: NDArray[np.int64],
    rank: NDArray[np.int64],
    *,
    cost_exponent: float = 1.0,
) -> GreedyResult:
    """Reference greedy that re-evaluates every candidate each round (for tests and checks).

    Takes the same arguments and returns the same as :func:`lazy_greedy`.
    """
    coverage = objective.coverage_of(start)
    remaining = budget - int(costs[start].sum())
    available = np.ones(costs.shape[0], dtype=bool)
    available[start] = False
    picks: list[int] = []
    gains: list[float] = []
    evaluations = 0
    while True:
        best: tuple[float, int, int, float] | None = None
        for j in np.flatnonzero(available & (costs <= remaining)).tolist():
            gain = objective.gain(j, coverage)
            evaluations += 1
            key = (-_ratio(gain, int(costs[j]), cost_exponent), int(rank[j]), j, gain)
            if best is None or key < best:
                best = key
        if best is None or best[3] <= 0.0:
            return GreedyResult(picks, gains, evaluations)
        j = best[2]
        objective.add(j, coverage)
        remaining -= int(costs[j])
        available[j] = False
        picks.append(j)
        gains.append(best[3])


def budgeted_greedy(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    budget: int,
    start: NDArray[np.int64],
    rank: NDArray[np.int64],
    *,
    cost_exponent: float = 1.0,
) -> GreedyResult:
    """Lazy greedy plus the best-single-item check, returning the better set.

    When one item alone (with the start set) beats the greedy set, the greedy is continued from
    that item, so the result is never worse than either candidate solution.

    Takes the same arguments and returns the same as :func:`lazy_greedy`.
    """
    run = lazy_greedy(objective, costs, budget, start, rank, cost_exponent=cost_exponent)
    base = objective.value(start)
    remaining = budget - int(costs[start].sum())
    singles = objective.gains(objective.coverage_of(start))
    singles[costs > remaining] = -np.inf
    singles[start] = -np.inf
    if not np.isfinite(singles).any():
        return run
    best = int(np.lexsort((rank, -singles))[0])
    greedy_value = base + sum(run.gains)
    if base + float(singles[best]) <= greedy_value + 1e-12 or best in run.picks:
        return run
    seeded = np.append(start, best).astype(np.int64)
    rest = lazy_greedy(objective, costs, budget, seeded, rank, cost_exponent=cost_exponent)
    return GreedyResult(
        [best, *rest.picks],
        [float(singles[best]), *rest.gains],
        run.evaluations + rest.evaluations + singles.shape[0],
    )
