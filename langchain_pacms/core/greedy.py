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
    return _lazy(objective, costs, budget, start, rank, cost_exponent, coverage, None)


def _lazy(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    budget: int,
    start: NDArray[np.int64],
    rank: NDArray[np.int64],
    cost_exponent: float,
    coverage: NDArray[np.float32],
    initial: NDArray[np.float64] | None,
) -> GreedyResult:
    """CELF loop; ``coverage`` (of ``start``) is updated in place, ``initial`` may be reused."""
    remaining = budget - int(costs[start].sum())
    in_set = np.zeros(costs.shape[0], dtype=bool)
    in_set[start] = True
    if initial is None:
        initial = objective.gains(coverage)
    cost_of = costs.tolist()
    gain_of = initial.tolist()
    rank_of = rank.tolist()
    per = [max(c, 1) ** cost_exponent for c in cost_of]  # gain / per[j] is _ratio(...)
    live = np.flatnonzero(~in_set & (costs <= remaining)).tolist()
    # Entries: (-gain / cost**exponent, tie-break rank, index, picks made when evaluated, gain).
    # An index is in the heap at most once, so tuples never compare beyond it.
    heap = [(-(gain_of[j] / per[j]), rank_of[j], j, 0, gain_of[j]) for j in live]
    heapq.heapify(heap)
    picks: list[int] = []
    gains: list[float] = []
    made = 0
    evaluations = len(heap)
    gain = objective.gain
    covered = objective.covered(coverage)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        _, tie, j, stamp, value = pop(heap)
        cost = cost_of[j]
        if cost > remaining:
            continue
        if stamp == made:
            if value <= 0.0:
                break
            objective.add(j, coverage)
            covered = objective.covered(coverage)
            remaining -= cost
            picks.append(j)
            gains.append(value)
            made += 1
            continue
        value = gain(j, coverage, covered)
        evaluations += 1
        push(heap, (-(value / per[j]), tie, j, made, value))
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
    base_coverage = objective.coverage_of(start)
    singles = objective.gains(base_coverage)
    run = _lazy(
        objective, costs, budget, start, rank, cost_exponent, base_coverage.copy(), singles
    )
    base = objective.value(start)
    remaining = budget - int(costs[start].sum())
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
