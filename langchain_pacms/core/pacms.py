"""``pacms`` and ``pacms_paper``: budgeted greedy on the coverage objective, then a fill."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.calibration import (
    POOL_MEAN_COSINE_LIMIT,
    on_pool_scale,
    pool_mean_cosine,
    pool_threshold,
)
from langchain_pacms.core.fill import (
    EXACT_COPY_COSINE,
    distinct_fill,
    diverse_fill,
    relevance_fill,
)
from langchain_pacms.core.greedy import problem_greedy
from langchain_pacms.core.objective import CoverageObjective
from langchain_pacms.core.pick import Pick, check_flag, mandatory_state
from langchain_pacms.core.problem import Problem
from langchain_pacms.core.values import value_coverage

__all__ = [
    "FILLS",
    "PAPER_OPTIONS",
    "auto_relevance_weight",
    "feedback_relevance",
    "pacms",
    "pacms_paper",
]


def auto_relevance_weight(problem: Problem) -> float:
    """Experimental relevance weight: 1 at a budget of 0% of the pool's tokens, 0 from 50% on."""
    total = int(problem.tokens.sum())
    ratio = problem.budget / total if total else 1.0
    return float(np.clip(1.0 - 2.0 * ratio, 0.0, 1.0))


FillWalk = Callable[[Problem, Sequence[int], int], list[int]]  # (problem, members, room) -> adds

FILLS: dict[str, Callable[..., list[int]]] = {
    "relevance": relevance_fill,
    "diverse": diverse_fill,
    "distinct": distinct_fill,
}


def _fill_walk(fill: bool | str | None, threshold: float) -> FillWalk | None:
    """The fill function named by ``fill`` (None for no fill)."""
    if fill is None or fill is False:
        return None
    name = "diverse" if fill is True else fill
    if name not in FILLS:
        raise ValueError(f"fill must be one of {sorted(FILLS)}, True, False or None; got {fill!r}")
    if name == "distinct":
        return functools.partial(distinct_fill, threshold=threshold)
    return FILLS[name]


_EXPERIMENTAL = (
    "pacms option {} is experimental: it was tried on the LongMemEval development "
    "questions and not shipped (bench/notes/longmemeval-notes.md in the repository)"
)


def _relevance_weight(problem: Problem, value: object, auto: bool) -> float:
    """``lam`` for ``pacms``: the given number, or the experimental automatic weight."""
    if auto:
        warnings.warn(
            _EXPERIMENTAL.format("experimental_auto_relevance_weight"), UserWarning, stacklevel=3
        )
        return auto_relevance_weight(problem)
    if value == "auto":
        raise ValueError(
            "relevance_weight='auto' is not a shipped option; pass a number in "
            "[0, 1] (default 0), or experimental_auto_relevance_weight=True"
        )
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"relevance_weight must be a number in [0, 1], got {value!r}")
    return float(value)


def feedback_relevance(problem: Problem, weight: float, items: int = 10) -> NDArray[np.float32]:
    """Pseudo-relevance feedback: ``max(rel(i), weight * max rel * max(0, cos(e_i, c)))``.

    ``c``: the relevance-weighted mean of the ``items`` most relevant candidates' vectors.
    """
    if isinstance(weight, bool) or not 0.0 <= float(weight) <= 1.0:
        raise ValueError(f"relevance_feedback must be a number in [0, 1], got {weight!r}")
    if isinstance(items, bool) or int(items) != items or items < 1:
        raise ValueError(f"feedback_items must be a positive integer, got {items!r}")
    rel = problem.relevance
    if not weight:
        return rel.copy()
    top = problem.relevance_order()[: int(items)]
    centroid = rel[top].astype(np.float64) @ problem.vectors[top].astype(np.float64)
    norm = float(np.linalg.norm(centroid))
    if norm == 0.0:
        return rel.copy()
    near = np.maximum(problem.vectors @ (centroid / norm).astype(np.float32), 0.0)
    lifted = np.maximum(rel, np.float32(float(weight) * float(rel.max())) * near)
    return np.clip(lifted, 0.0, 1.0).astype(np.float32)


def pacms(
    problem: Problem,
    *,
    relevance_weight: float = 0.0,
    similarity_threshold: float = 0.6,
    density: bool = True,
    cost_exponent: float = 0.0,
    guarantee: float = 0.25,
    gain_floor: float = 0.05,
    min_gain: float = 0.0,
    fill: bool | str | None = "distinct",
    fill_threshold: float | None = None,
    relevance_feedback: float = 0.0,
    feedback_items: int = 10,
    calibrate: bool = False,
    values: Sequence[Collection[str]] | None = None,
    experimental_auto_relevance_weight: bool = False,
    experimental_coverage_prior: float = 0.0,
) -> Pick:
    """Budgeted greedy on the coverage objective with a worst-case guarantee, then a fill.

    The options of :class:`~langchain_pacms.integrations.Pacms` (see docs/results/longmemeval.md).

    Args:
        problem: The selection instance.
        relevance_weight: ``lam`` of the objective, in ``[0, 1]``.
        similarity_threshold: Kernel threshold ``tau`` in ``[0, 1)`` on the embedder's scale.
        density: Normalise target weights by near-duplicate density.
        cost_exponent: The greedy ranks by ``gain / tokens ** cost_exponent``.
        guarantee: Fraction of the guaranteed solution the greedy's must reach.
        gain_floor: Stop the greedy below this fraction of the best single score.
        min_gain: Stop the greedy below this absolute score (capped at the best single score).
        fill: ``"distinct"`` (relevance, no near-copies), ``"diverse"`` (MMR, also ``True``),
            ``"relevance"``, or ``None``/``False``.
        fill_threshold: Near-copy cosine of the distinct fill; ``None``: similarity_threshold.
        relevance_feedback: Pseudo-relevance feedback weight in ``[0, 1]`` (0: none).
        feedback_items: Most relevant candidates making the feedback centroid.
        calibrate: Read the settings on the pool's own cosine scale; a pool with mean cosine
            at least :data:`POOL_MEAN_COSINE_LIMIT` is kept in relevance order, without exact
            copies.
        values: The exact values each candidate holds (paths, ids, numbers), one collection
            per candidate: coverage is then over these values
            (:func:`~langchain_pacms.core.values.value_coverage`; the similarity and fill
            options do not apply). Tool loops pass them.
        experimental_auto_relevance_weight: Use :func:`auto_relevance_weight`. Warns.
        experimental_coverage_prior: Prior added to every target's relevance. Warns.

    Returns:
        Picks in greedy order; scores are marginal gains (0 for fill items).
    """
    check_flag("density", density)
    check_flag("calibrate", calibrate)
    if values is not None:
        return value_coverage(problem, values)
    lam = _relevance_weight(problem, relevance_weight, experimental_auto_relevance_weight)
    if experimental_coverage_prior:
        warnings.warn(
            _EXPERIMENTAL.format("experimental_coverage_prior"), UserWarning, stacklevel=2
        )
    if fill_threshold is not None and (
        isinstance(fill_threshold, bool)
        or not isinstance(fill_threshold, (int, float))
        or not 0 <= fill_threshold < 1
    ):
        raise ValueError(
            f"fill_threshold must be None or a number in [0, 1), got {fill_threshold!r}"
        )
    walk = _fill_walk(fill, similarity_threshold if fill_threshold is None else fill_threshold)
    start, room, _ = mandatory_state(problem)
    scores = np.full(problem.n, np.nan)
    calibration: dict[str, Any] = {}
    if calibrate:
        mean = problem.shared(("pool_mean_cosine",), lambda: pool_mean_cosine(problem))
        calibration = {"pool_mean_cosine": mean, "coverage": "meaningful"}
        if mean >= POOL_MEAN_COSINE_LIMIT:
            unique = distinct_fill(problem, start.tolist(), room, threshold=EXACT_COPY_COSINE)
            order = [*start.tolist(), *unique]
            scores[order[start.size :]] = 0.0
            calibration["coverage"] = "meaningless"
            info = {"relevance_weight": lam, "evaluations": 0, **calibration}
            return Pick(np.asarray(order, dtype=np.int64), scores, info=info)
        near_copy = (1.0 + similarity_threshold) / 2 if fill_threshold is None else fill_threshold
        similarity_threshold = pool_threshold(similarity_threshold, mean)
        fill_threshold = pool_threshold(near_copy, mean)
        walk = _fill_walk(fill, fill_threshold)
        calibration["similarity_threshold"] = similarity_threshold
        calibration["fill_threshold"] = fill_threshold
    if problem.n == int(start.size):
        info = {"relevance_weight": lam, "evaluations": 0, **calibration}
        return Pick(start, scores, info=info)
    if walk is not None and walk is not relevance_fill:
        problem.precompute_cosines()  # one product serves these fills and the kernel
    if calibrate:
        problem = on_pool_scale(problem)  # shares the cosines (they do not read relevance)
    if relevance_feedback:
        problem = problem.with_shared_relevance(
            ("relevance_feedback", float(relevance_feedback), int(feedback_items)),
            functools.partial(feedback_relevance, problem, relevance_feedback, feedback_items),
        )
    objective = CoverageObjective(
        problem,
        relevance_weight=lam,
        similarity_threshold=similarity_threshold,
        density=density,
        coverage_prior=experimental_coverage_prior,
    )
    result = problem_greedy(
        problem,
        objective,
        start,
        scores,
        cost_exponent=cost_exponent,
        guarantee=guarantee,
        gain_floor=gain_floor,
        min_gain=min_gain,
        complete=None if walk is None else functools.partial(walk, problem),
    )
    info = {
        "relevance_weight": lam,
        "evaluations": result.evaluations,
        "filled": result.completed,
        **calibration,
    }
    return Pick(np.asarray([*start.tolist(), *result.picks], dtype=np.int64), scores, info=info)


PAPER_OPTIONS: dict[str, Any] = {
    "relevance_weight": 0.0,
    "similarity_threshold": 0.0,
    "density": False,
    "cost_exponent": 1.0,
    "guarantee": 1.0,
    "gain_floor": 0.0,
    "min_gain": 0.0,
    "fill": "relevance",
}


def pacms_paper(problem: Problem, **options: Any) -> Pick:
    """``pacms`` with :data:`PAPER_OPTIONS`: the published objective and cost-benefit greedy."""
    return pacms(problem, **{**PAPER_OPTIONS, **options})
