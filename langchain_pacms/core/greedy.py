"""Budgeted greedy maximisation of the coverage objective: lazy (CELF), plain and guaranteed."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.objective import CoverageObjective
from langchain_pacms.core.problem import Problem

__all__ = [
    "COST_EXPONENT_RANGE",
    "Completion",
    "GreedyResult",
    "budgeted_greedy",
    "lazy_greedy",
    "plain_greedy",
    "problem_greedy",
]

Completion = Callable[[list[int], int], list[int]]  # (members, room) -> what to add within room
COST_EXPONENT_RANGE = (-4.0, 4.0)  # tokens ** cost_exponent stays a finite float
_SLACK = 1e-4  # relative margin of the online bound over float32 rounding of the gains


@dataclass(frozen=True)
class GreedyResult:
    """Picks after the start set with their marginal gains; the last ``completed`` are a fill's."""

    picks: list[int]
    gains: list[float]
    evaluations: int
    completed: int = 0


def lazy_greedy(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    budget: int,
    start: NDArray[np.int64],
    rank: NDArray[np.int64],
    *,
    cost_exponent: float = 1.0,
) -> GreedyResult:
    """Cost-aware lazy greedy (CELF) on ``gain / cost ** cost_exponent``, ties to lower rank."""
    coverage = objective.coverage_of(start)
    return _lazy(objective, costs, budget, start, rank, cost_exponent, coverage, None, 0.0)


def _lazy(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    budget: int,
    start: NDArray[np.int64],
    rank: NDArray[np.int64],
    cost_exponent: float,
    coverage: NDArray[np.float32],
    initial: NDArray[np.float64] | None,
    floor: float,
) -> GreedyResult:
    """CELF loop; stops when the best fitting score is not positive or is below ``floor``."""
    remaining = budget - int(costs[start].sum())
    in_set = np.zeros(costs.shape[0], dtype=bool)
    in_set[start] = True
    if initial is None:
        initial = objective.gains(coverage)
    cost_of = costs.tolist()
    gain_of = initial.tolist()
    rank_of = rank.tolist()
    per = _divisors(cost_of, cost_exponent)
    # Gains only fall: a candidate already below the floor (with a margin for rounding) can
    # never be picked, so it is left out of the heap.
    hopeful = initial > 0.0
    if floor > 0.0:
        scaled = np.maximum(costs, 1).astype(np.float64) ** cost_exponent
        hopeful &= initial >= floor * scaled * (1.0 - 1e-9)
    fits = ~in_set & (costs <= remaining)
    live = np.flatnonzero(fits & hopeful).tolist()
    # (-gain / cost**exponent, rank, index, picks made when evaluated, gain); indices unique.
    heap = [(-(gain_of[j] / per[j]), rank_of[j], j, 0, gain_of[j]) for j in live]
    heapq.heapify(heap)
    picks: list[int] = []
    gains: list[float] = []
    made = 0
    evaluations = int(np.count_nonzero(fits))  # every initial gain was evaluated
    gain = objective.gain
    total = objective.rows.uses_total  # sparse rows need no running sum of the coverage
    # A candidate whose gain no other pick can change keeps its (exact) stale entry.
    still = objective.rows.steady()
    steady = [False] * len(cost_of) if still is None else still.tolist()
    covered = objective.covered(coverage) if total else 0.0
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        _, tie, j, stamp, value = pop(heap)
        cost = cost_of[j]
        if cost > remaining:
            continue
        if stamp == made or steady[j]:
            if value <= 0.0 or value / per[j] < floor:
                break
            objective.add(j, coverage)
            if total:
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


def _divisors(costs: list[int], exponent: float) -> list[float]:
    """``max(c, 1) ** exponent`` for every cost (the common exponents without a power)."""
    if exponent == 0.0:
        return [1.0] * len(costs)
    if exponent == 1.0:
        return [float(max(c, 1)) for c in costs]
    return [max(c, 1) ** exponent for c in costs]


def plain_greedy(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    budget: int,
    start: NDArray[np.int64],
    rank: NDArray[np.int64],
    *,
    cost_exponent: float = 1.0,
) -> GreedyResult:
    """Reference greedy re-evaluating every candidate each round, as :func:`lazy_greedy` picks."""
    coverage = objective.coverage_of(start)
    remaining = budget - int(costs[start].sum())
    available = np.ones(costs.shape[0], dtype=bool)
    available[start] = False
    per = _divisors(costs.tolist(), cost_exponent)
    picks: list[int] = []
    gains: list[float] = []
    evaluations = 0
    while True:
        best: tuple[float, int, int, float] | None = None
        for j in np.flatnonzero(available & (costs <= remaining)).tolist():
            gain = objective.gain(j, coverage)
            evaluations += 1
            key = (-(gain / per[j]), int(rank[j]), j, gain)
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


def _knapsack_bound(gains: NDArray[np.float64], costs: NDArray[np.int64], room: int) -> float:
    """Fractional-knapsack value of single-item gains: an upper bound on the optimal gain."""
    positive = gains > 0
    gains, costs = gains[positive], costs[positive]
    free = costs == 0
    bound = float(gains[free].sum())
    gains, costs = gains[~free], costs[~free].astype(np.float64)
    order = np.argsort(-(gains / costs), kind="stable")
    gains, costs = gains[order], costs[order]
    filled = np.cumsum(costs)
    whole = int(np.searchsorted(filled, room, side="right"))
    bound += float(gains[:whole].sum())
    if whole < gains.shape[0]:
        left = room - (float(filled[whole - 1]) if whole else 0.0)
        bound += float(gains[whole]) * left / float(costs[whole])
    return bound


def _online_bound(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    room: int,
    members: NDArray[np.int64],
    fits: NDArray[np.bool_],
) -> float:
    """What any set within ``room`` adds over ``members``: at most its members' marginal gains.

    The fractional knapsack of the marginal gains after ``members`` (the objective is monotone
    submodular), so ``F(members) - F(start)`` plus this bounds the optimal gain from the start.
    """
    marginal = objective.gains(objective.coverage_of(members))
    marginal[members] = 0.0
    return _knapsack_bound(marginal[fits], costs[fits], room)


def _complete(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    room: int,
    start: NDArray[np.int64],
    result: GreedyResult,
    complete: Completion | None,
) -> GreedyResult:
    """Append a completion's picks to ``result``, scored by their marginal gains."""
    if complete is None:
        return result
    members = [*start.tolist(), *result.picks]
    left = room - int(costs[result.picks].sum())
    extra = [int(j) for j in complete(members, left)]
    if int(costs[extra].sum()) > left or set(extra) & set(members):
        raise ValueError("completion returned a member or went over the budget")
    coverage = objective.coverage_of(members)
    gains = objective.gains_along(extra, coverage, objective.covered(coverage))
    return GreedyResult(
        [*result.picks, *extra], [*result.gains, *gains], result.evaluations, len(extra)
    )


def budgeted_greedy(
    objective: CoverageObjective,
    costs: NDArray[np.int64],
    budget: int,
    start: NDArray[np.int64],
    rank: NDArray[np.int64],
    *,
    cost_exponent: float = 1.0,
    guarantee: float = 1.0,
    gain_floor: float = 0.0,
    min_gain: float = 0.0,
    complete: Completion | None = None,
) -> GreedyResult:
    """Greedy stopped by the floors, kept unless below ``guarantee`` times the classic greedy.

    Classic: the better of gain-per-token greedy and best item, within ``(1 - 1/e) / 2``.
    """
    if not 0.0 <= guarantee <= 1.0:
        raise ValueError(f"guarantee must be in [0, 1], got {guarantee}")
    if not 0.0 <= gain_floor <= 1.0:
        raise ValueError(f"gain_floor must be in [0, 1], got {gain_floor}")
    if not min_gain >= 0.0:
        raise ValueError(f"min_gain must be >= 0, got {min_gain}")
    low, high = COST_EXPONENT_RANGE
    if isinstance(cost_exponent, bool) or not low <= cost_exponent <= high:
        raise ValueError(f"cost_exponent must be in [{low:g}, {high:g}], got {cost_exponent}")
    cost_exponent = float(cost_exponent)  # an int array to a negative int power raises
    base_coverage = objective.coverage_of(start)
    singles = objective.gains(base_coverage)
    remaining = budget - int(costs[start].sum())
    fits = costs <= remaining
    fits[start] = False
    floor = 0.0
    if (gain_floor or min_gain) and fits.any():
        best = float((singles[fits] / np.maximum(costs[fits], 1) ** cost_exponent).max())
        floor = min(best, max(gain_floor * best, min_gain))

    def run(exponent: float, stop: float) -> GreedyResult:
        return _lazy(
            objective, costs, budget, start, rank, exponent, base_coverage.copy(), singles, stop
        )

    preferred = _complete(objective, costs, remaining, start, run(cost_exponent, floor), complete)
    if guarantee == 0.0:
        return preferred
    classic = cost_exponent == 1.0 and floor == 0.0
    if not classic:
        # already within the guarantee of the optimum (by the single-item bound, else the
        # online one after the first run): skip the second run
        gained = sum(preferred.gains)
        if gained >= guarantee * _knapsack_bound(singles[fits], costs[fits], remaining):
            return preferred
        members = np.concatenate([start, np.asarray(preferred.picks, dtype=np.int64)])
        bound = gained + _online_bound(objective, costs, remaining, members, fits)
        if gained >= guarantee * bound * (1.0 + _SLACK):
            return preferred
    guaranteed = preferred if classic else run(1.0, 0.0)
    evaluations = preferred.evaluations + (
        guaranteed.evaluations if guaranteed is not preferred else 0
    )
    single = np.where(fits, singles, -np.inf)
    if fits.any():
        best = int(np.lexsort((rank, -single))[0])
        if float(single[best]) > sum(guaranteed.gains) + 1e-12 and best not in guaranteed.picks:
            seeded = np.append(start, best).astype(np.int64)
            rest = lazy_greedy(objective, costs, budget, seeded, rank, cost_exponent=1.0)
            evaluations += rest.evaluations
            guaranteed = GreedyResult([best, *rest.picks], [float(single[best]), *rest.gains], 0)
    chosen = preferred
    if sum(preferred.gains) < guarantee * sum(guaranteed.gains) - 1e-12:
        # The guaranteed set alone carries the bound; it is completed only once chosen.
        chosen = _complete(objective, costs, remaining, start, guaranteed, complete)
    return GreedyResult(chosen.picks, chosen.gains, evaluations, chosen.completed)


def problem_greedy(
    problem: Problem,
    objective: CoverageObjective,
    start: NDArray[np.int64],
    scores: NDArray[np.float64],
    *,
    complete: Completion | None,
    **options: float,
) -> GreedyResult:
    """:func:`budgeted_greedy` on ``problem`` (ties to higher relevance), its gains in ``scores``.

    ``scores`` gets each greedy pick's marginal gain and 0 for a completion's picks.
    """
    rank = np.empty(problem.n, dtype=np.int64)
    rank[problem.relevance_order()] = np.arange(problem.n)
    result = budgeted_greedy(
        objective, problem.tokens, problem.budget, start, rank, complete=complete, **options
    )
    greedy = len(result.picks) - result.completed
    scores[result.picks[:greedy]] = result.gains[:greedy]
    scores[result.picks[greedy:]] = 0.0
    return result
