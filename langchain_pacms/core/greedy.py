"""Budgeted greedy maximisation of the coverage objective.

:func:`lazy_greedy` is cost-aware lazy greedy (CELF); it picks exactly what
:func:`plain_greedy` picks with far fewer evaluations. :func:`budgeted_greedy` ranks by
``gain / tokens ** cost_exponent`` and keeps that solution while it reaches a fraction
``guarantee`` of the classic knapsack greedy (best of gain-per-token greedy and best single
item), so the result is within ``guarantee * (1 - 1/e) / 2`` of the optimum.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.objective import CoverageObjective

__all__ = ["Completion", "GreedyResult", "budgeted_greedy", "lazy_greedy", "plain_greedy"]

Completion = Callable[[list[int], int], list[int]]
"""``(members, room) -> extra``: candidates to add to ``members`` within ``room`` tokens."""


@dataclass(frozen=True)
class GreedyResult:
    """Items picked on top of the start set, in pick order, with their marginal gains.

    The last ``completed`` picks came from a completion rather than from the greedy.
    """

    picks: list[int]
    gains: list[float]
    evaluations: int
    completed: int = 0


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
    per = _divisors(cost_of, cost_exponent)  # gain / per[j] is _ratio(...)
    # Gains only fall, and the loop ends at the first pick whose score is not positive or is
    # below the floor: a candidate already there can never be picked. It is left out of the
    # heap (with a margin, so that rounding in this vectorised test never drops one).
    hopeful = initial > 0.0
    if floor > 0.0:
        scaled = np.maximum(costs, 1).astype(np.float64) ** cost_exponent
        hopeful &= initial >= floor * scaled * (1.0 - 1e-9)
    fits = ~in_set & (costs <= remaining)
    live = np.flatnonzero(fits & hopeful).tolist()
    # Entries: (-gain / cost**exponent, tie-break rank, index, picks made when evaluated, gain).
    # An index is in the heap at most once, so tuples never compare beyond it.
    heap = [(-(gain_of[j] / per[j]), rank_of[j], j, 0, gain_of[j]) for j in live]
    heapq.heapify(heap)
    picks: list[int] = []
    gains: list[float] = []
    made = 0
    evaluations = int(np.count_nonzero(fits))  # every initial gain was evaluated
    gain = objective.gain
    total = objective.rows.uses_total  # sparse rows need no running sum of the coverage
    # A candidate whose gain no other pick can change is never re-evaluated: its stale entry
    # is exact, so it goes in when it reaches the top, as it would after a re-evaluation.
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
    """Greedy with the best-single-item check and a worst-case guarantee.

    The preferred solution (greedy on ``gain / cost ** cost_exponent``, stopped by the floors,
    finished by ``complete``) is returned unless it is below ``guarantee`` times the classic
    guaranteed solution, which is then returned (finished by ``complete``).

    Args:
        objective: The objective to maximise.
        costs: Token cost of every candidate.
        budget: Total budget (the start set's cost is charged first).
        start: Indices already in the set (mandatory items).
        rank: Tie-break rank of every candidate (lower wins ties).
        cost_exponent: Ranking exponent of the preferred greedy.
        guarantee: Fraction in ``[0, 1]`` of the guaranteed value the preferred solution must
            reach; 0 skips the guaranteed solution (no guarantee).
        gain_floor: Stop the preferred greedy below this fraction in ``[0, 1]`` of the best
            single score.
        min_gain: Stop it below this absolute score ``>= 0`` (capped at the best single score).
        complete: Fills the returned solution (see :data:`Completion`).

    Returns:
        The chosen picks after ``start``, in pick order, with their marginal gains.

    Raises:
        ValueError: For a ``guarantee`` or ``gain_floor`` outside ``[0, 1]``, a negative
            ``min_gain``, or a completion that returns a member or overspends.
    """
    if not 0.0 <= guarantee <= 1.0:
        raise ValueError(f"guarantee must be in [0, 1], got {guarantee}")
    if not 0.0 <= gain_floor <= 1.0:
        raise ValueError(f"gain_floor must be in [0, 1], got {gain_floor}")
    if not min_gain >= 0.0:
        raise ValueError(f"min_gain must be >= 0, got {min_gain}")
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
    if not classic and sum(preferred.gains) >= guarantee * _knapsack_bound(
        singles[fits], costs[fits], remaining
    ):
        return preferred  # already within the guarantee of the optimum: skip the second run
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
