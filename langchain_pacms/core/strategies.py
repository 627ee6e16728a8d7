"""Selection strategies behind one registry and one signature.

A strategy is a callable ``(problem, **options) -> Pick``. It may return its picks in any
order of preference; :func:`solve` charges the mandatory items first, guards the budget and
checks what a strategy returned, so user strategies get the same guarantees as built-in ones.

Built-in strategies:

* ``pacms``: budgeted greedy on the coverage objective (see :mod:`.objective`, :mod:`.greedy`)
  until its gains become negligible, then the leftover budget is filled by a diversity walk
  (see :mod:`.fill`), so no budget is wasted on a saturated objective.
* ``pacms_paper``: ``pacms`` with the published objective and the classic cost-benefit greedy
  (:data:`PAPER_OPTIONS`), kept for comparison.
* ``topk``: by relevance, add every candidate that still fits.
* ``lastk``: newest first, add while it fits (a contiguous recency window, like truncation;
  ``contiguous=False`` skips what does not fit and goes on, as the fail-soft fallback does).
* ``mmr``: the maximal-marginal-relevance ranking of LangChain's
  ``maximal_marginal_relevance`` over all candidates, walked under the budget, skipping what does
  not fit. This is an incremental twin of that function (identical picks, proven by a test).
* ``rag``: the ``k`` most relevant candidates (a classic retriever), then capped by the budget.

Example:
    >>> import numpy as np
    >>> from langchain_pacms.core import Problem, solve
    >>> p = Problem.build(np.eye(3), [1.0, 0.2, 0.0], tokens=[4, 4, 4], budget=8)
    >>> solve(p, "topk").order.tolist()
    [0, 1]
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.fill import distinct_fill, diverse_fill, relevance_fill
from langchain_pacms.core.greedy import budgeted_greedy
from langchain_pacms.core.objective import CoverageObjective
from langchain_pacms.core.problem import Problem

__all__ = [
    "PAPER_OPTIONS",
    "Pick",
    "Strategy",
    "StrategyError",
    "auto_relevance_weight",
    "available_strategies",
    "check_options",
    "feedback_relevance",
    "get_strategy",
    "register_strategy",
    "solve",
]


class StrategyError(RuntimeError):
    """A strategy returned a pick that breaks the selection invariants."""


@dataclass(frozen=True)
class Pick:
    """What a strategy chose.

    Attributes:
        order: Chosen candidate indices in pick order (mandatory items first in :func:`solve`).
        scores: Per-candidate score at pick time (marginal gain for ``pacms``, relevance for
            ``topk``/``rag``, MMR score for ``mmr``, 0 for ``lastk``); NaN where not picked.
        over_budget: True when the mandatory items alone exceed the budget.
        info: Strategy diagnostics (e.g. greedy evaluations, the relevance weight used).
    """

    order: NDArray[np.int64]
    scores: NDArray[np.float64]
    over_budget: bool = False
    info: dict[str, Any] | None = None


class Strategy(Protocol):
    """Signature shared by every strategy."""

    def __call__(self, problem: Problem, **options: Any) -> Pick:
        """Choose candidate indices for ``problem``."""
        ...


_REGISTRY: dict[str, Strategy] = {}


def register_strategy(name: str, strategy: Strategy, *, replace: bool = False) -> None:
    """Register a strategy under ``name``.

    Args:
        name: Registry key, e.g. ``"mine"``.
        strategy: Callable ``(problem, **options) -> Pick``.
        replace: Allow replacing an existing name.

    Raises:
        ValueError: If the name is taken and ``replace`` is false, or the name is empty.
    """
    if not name or not isinstance(name, str):
        raise ValueError("strategy name must be a non-empty string")
    if name in _REGISTRY and not replace:
        raise ValueError(f"strategy {name!r} is already registered (pass replace=True)")
    _REGISTRY[name] = strategy


def get_strategy(name: str) -> Strategy:
    """Look up a registered strategy, with a clear error for unknown names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(available_strategies())
        raise ValueError(f"unknown strategy {name!r}; registered: {known}") from None


def available_strategies() -> list[str]:
    """Names of the registered strategies, sorted."""
    return sorted(_REGISTRY)


def _walk(
    problem: Problem,
    ranking: Iterable[int],
    remaining: int,
    taken: NDArray[np.bool_],
    *,
    stop_at_first_misfit: bool = False,
) -> list[int]:
    """Add ranked candidates that still fit; ``taken`` is updated in place."""
    added: list[int] = []
    for j in ranking:
        if taken[j]:
            continue
        cost = int(problem.tokens[j])
        if cost > remaining:
            if stop_at_first_misfit:
                break
            continue
        taken[j] = True
        remaining -= cost
        added.append(int(j))
    return added


def _scored(problem: Problem, picked: list[int], values: NDArray[np.float64]) -> Pick:
    scores = np.full(problem.n, np.nan)
    scores[picked] = values[picked]
    return Pick(np.asarray(picked, dtype=np.int64), scores)


def _mandatory_state(problem: Problem) -> tuple[NDArray[np.int64], int, NDArray[np.bool_]]:
    start = np.flatnonzero(problem.mandatory).astype(np.int64)
    remaining = problem.budget - int(problem.tokens[start].sum())
    return start, remaining, problem.mandatory.copy()


def topk(problem: Problem) -> Pick:
    """Rank by relevance (ties: earlier position) and add every candidate that fits."""
    start, remaining, _ = _mandatory_state(problem)
    picked = relevance_fill(problem, start.tolist(), remaining)
    return _scored(problem, [*start.tolist(), *picked], problem.relevance.astype(np.float64))


def lastk(problem: Problem, *, contiguous: bool = True) -> Pick:
    """Newest first, add while the next one fits (a contiguous window of recent items).

    With ``contiguous=False`` an item larger than what is left is skipped and the walk goes on
    to older ones, so the budget is never left empty just because the newest item is large
    (the selector's fail-soft fallback walks this way).

    Example:
        >>> p = Problem.build(np.eye(3), np.ones(3), tokens=[2, 2, 9], budget=5)
        >>> lastk(p).order.tolist(), lastk(p, contiguous=False).order.tolist()
        ([], [1, 0])
    """
    start, remaining, taken = _mandatory_state(problem)
    order = problem.recency_order().tolist()
    picked = _walk(problem, order, remaining, taken, stop_at_first_misfit=contiguous)
    return _scored(problem, [*start.tolist(), *picked], np.zeros(problem.n))


def rag(problem: Problem, *, k: int = 4) -> Pick:
    """The ``k`` most relevant candidates, as a fixed-k retriever returns them, under the budget."""
    if k < 1:
        raise ValueError(f"rag needs k >= 1, got {k}")
    start, remaining, taken = _mandatory_state(problem)
    ranked = [j for j in problem.relevance_order().tolist() if not taken[j]][:k]
    picked = _walk(problem, ranked, remaining, taken)
    return _scored(problem, [*start.tolist(), *picked], problem.relevance.astype(np.float64))


MMR_GRAM_LIMIT = 12_000
"""Largest pool for which :func:`mmr_ranking` precomputes all pairwise dot products."""


def mmr_ranking(
    vectors: NDArray[np.floating[Any]],
    query: NDArray[np.floating[Any]],
    lambda_mult: float = 0.5,
    *,
    relevance: NDArray[np.floating[Any]] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Full maximal-marginal-relevance ranking, computed incrementally.

    Follows LangChain's ``maximal_marginal_relevance`` with ``k = n``: start from the most
    query-similar item, then repeatedly take the item maximising
    ``lambda_mult * sim(q, i) - (1 - lambda_mult) * max_{s in S} sim(i, s)`` (raw cosines, zero
    vectors scoring 0, first index on ties), with the same formulas evaluated in the same dtype
    as LangChain. Instead of recomputing similarities to the whole selected set each step, it
    keeps a running maximum, so the cost is ``O(n^2 d)`` rather than ``O(n^3 d)``.

    The rankings are identical except where two scores agree to within floating-point rounding
    (for example exact duplicate vectors): BLAS rounds a dot product differently depending on the
    shape of the product it is part of, so which of two such near-equal items LangChain takes
    first depends on how many items it has already selected. Exact duplicates are then
    interchangeable. A zero (or non-finite) query gives zero relevance everywhere here, where
    LangChain raises.

    Args:
        vectors: ``(n, d)`` candidate embeddings.
        query: ``(d,)`` query embedding.
        lambda_mult: Relevance/diversity trade-off in ``[0, 1]``.
        relevance: Optional ``(n,)`` relevance that replaces the cosines to the query (a
            problem's given :attr:`~langchain_pacms.core.Problem.scores`), so that ``mmr``
            ranks by the same relevance as the other strategies; the redundancy term still
            comes from the vectors.

    Returns:
        The ranking and the MMR score of each item at the step it was taken.
    """
    x = np.asarray(vectors)
    n = x.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    q = np.asarray(query)[None, :]
    norms = np.linalg.norm(x, axis=1)
    if relevance is not None:
        to_query = np.asarray(relevance, dtype=np.result_type(x.dtype, q.dtype))
    else:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            to_query = (np.dot(q, x.T) / np.outer(np.linalg.norm(q, axis=1), norms))[0]
        to_query[~np.isfinite(to_query)] = 0.0
    first = int(np.argmax(to_query))
    order = [first]
    scores = [float(to_query[first])]
    redundancy = np.full(n, -np.inf, dtype=to_query.dtype)
    taken = np.zeros(n, dtype=bool)
    taken[first] = True
    last = first
    gram = np.dot(x, x.T) if n <= MMR_GRAM_LIMIT else None
    for _ in range(n - 1):
        dots = gram[last] if gram is not None else np.dot(x, x[last])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            sim = dots / (norms * norms[last])
        sim[~np.isfinite(sim)] = 0.0
        np.maximum(redundancy, sim, out=redundancy)
        value = lambda_mult * to_query - (1 - lambda_mult) * redundancy
        value[taken] = -np.inf
        last = int(np.argmax(value))
        taken[last] = True
        order.append(last)
        scores.append(float(value[last]))
    return np.asarray(order, dtype=np.int64), np.asarray(scores, dtype=np.float64)


def mmr(problem: Problem, *, lambda_mult: float = 0.5) -> Pick:
    """LangChain's MMR ranking over all candidates, walked under the budget.

    A problem built with its own relevance (:attr:`~langchain_pacms.core.Problem.scores`)
    ranks by that relevance in place of the cosines to the query.

    The ranking does not depend on the budget, so problems linked by
    :meth:`~langchain_pacms.core.Problem.with_budget` compute it once (a budget sweep walks one
    ranking under each budget).

    Example:
        >>> import numpy as np
        >>> p = Problem.build(np.eye(3), [1.0, 0.5, 0.0], tokens=[4, 4, 4], budget=8)
        >>> [mmr(p.with_budget(b)).order.tolist() for b in (4, 8)]
        [[0], [0, 1]]
    """
    if not 0.0 <= lambda_mult <= 1.0:
        raise ValueError(f"lambda_mult must be in [0, 1], got {lambda_mult}")
    start, remaining, taken = _mandatory_state(problem)
    ranking, step_scores = problem.shared(
        ("mmr", float(lambda_mult)),
        lambda: mmr_ranking(problem.vectors, problem.query, lambda_mult, relevance=problem.scores),
    )
    picked = _walk(problem, ranking.tolist(), remaining, taken)
    values = np.zeros(problem.n)
    values[ranking] = step_scores
    return _scored(problem, [*start.tolist(), *picked], values)


def auto_relevance_weight(problem: Problem) -> float:
    """Experimental: a relevance weight that grows as the budget gets tight.

    Used by ``pacms`` only under ``experimental_auto_relevance_weight=True``. It was tried on the
    LongMemEval development questions and not shipped: it lowered recall there (see
    ``docs/results/longmemeval-notes.md``). The weight falls linearly from 1 at a budget of 0% of
    the pool to 0 at 50% and beyond.

    Example:
        >>> import numpy as np
        >>> p = Problem.build(np.eye(2), [1.0, 0.5], tokens=[10, 10], budget=5)
        >>> auto_relevance_weight(p)
        0.5
    """
    total = int(problem.tokens.sum())
    ratio = problem.budget / total if total else 1.0
    return float(np.clip(1.0 - 2.0 * ratio, 0.0, 1.0))


FillWalk = Callable[[Problem, Sequence[int], int], list[int]]
"""``walk(problem, members, room)``: what to add to ``members`` within ``room`` tokens."""

FILLS: dict[str, Callable[..., list[int]]] = {
    "relevance": relevance_fill,
    "diverse": diverse_fill,
    "distinct": distinct_fill,
}
"""Named ways for ``pacms`` to spend the budget its greedy leaves (see :mod:`.fill`);
``distinct`` is given the kernel threshold as ``threshold``."""


def _fill_walk(fill: bool | str | None, threshold: float) -> FillWalk | None:
    """The fill function named by ``fill`` (None for no fill), with a clear error otherwise."""
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
    "questions and not shipped (docs/results/longmemeval-notes.md)"
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
    """Relevance raised by pseudo-relevance feedback from the most relevant candidates.

    ``rel'(i) = max(rel(i), weight * max_j rel(j) * max(0, cos(e_i, c)))``, where ``c`` is the
    relevance-weighted mean of the ``items`` most relevant candidates' vectors. Candidates
    that resemble the best matches gain relevance even when they share little with the query
    itself; the best matches keep theirs.

    Args:
        problem: The selection instance.
        weight: ``beta`` in ``[0, 1]``.
        items: How many candidates make the centroid (at least 1).

    Returns:
        ``(n,)`` float32 relevance in ``[0, 1]``.

    Raises:
        ValueError: For a weight outside ``[0, 1]`` or fewer than one item.

    Example:
        >>> import numpy as np
        >>> p = Problem.build([[1, 0, 0], [0.6, 0.8, 0], [0, 0.6, 0.8]], [1.0, 0.0, 0.0],
        ...                   tokens=[1, 1, 1], budget=1)
        >>> [round(float(r), 3) for r in feedback_relevance(p, 0.5, items=2)]
        [1.0, 0.6, 0.1]
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


def _with_feedback(problem: Problem, weight: float, items: int) -> Problem:
    """The problem with :func:`feedback_relevance`, built once per pool (budgets share it)."""
    base = problem.shared(
        ("relevance_feedback", float(weight), int(items)),
        lambda: problem.with_relevance(feedback_relevance(problem, weight, items)),
    )
    return base.with_costs(
        tokens=problem.tokens,
        budget=problem.budget,
        mandatory=problem.mandatory,
        positions=problem.positions,
    )


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
    experimental_auto_relevance_weight: bool = False,
    experimental_coverage_prior: float = 0.0,
) -> Pick:
    """Budgeted greedy on the coverage objective, with a worst-case guarantee.

    The defaults were chosen on LongMemEval development splits (see
    ``docs/results/longmemeval.md``): near-duplicate coverage (``similarity_threshold``: 0.6
    here, the built-in embedder's profile value before its relevance came from sparse rows;
    ``ContextSelector`` passes its embedder's, 0.85 for both built-in profiles),
    density normalisation, ranking by plain gain while keeping a quarter of the classic
    ``(1 - 1/e) / 2`` guarantee (so ``G >= (1 - 1/e) / 8 * OPT`` always holds), and, once no
    candidate adds 5 % of the best one's gain (or ``min_gain``, which ``ContextSelector`` takes
    from its embedder), a fill in relevance order that passes over near-copies of what is kept.
    :data:`PAPER_OPTIONS` reproduces the published objective and algorithm (registered as
    ``pacms_paper``).

    Args:
        problem: The selection instance.
        relevance_weight: ``lam`` of the objective, a number in ``[0, 1]``.
        similarity_threshold: Kernel threshold ``tau`` in ``[0, 1)`` (0: plain positive cosine).
            It is on the embedder's cosine scale; 0.6 suits the built-in lexical embedder, and
            ``ContextSelector`` passes the value that suits its own embedder.
        density: Normalise target weights by near-duplicate density.
        cost_exponent: Preferred greedy ranks by ``gain / tokens ** cost_exponent``.
        guarantee: Keep the preferred solution only while it reaches this fraction of the
            guaranteed (cost-benefit or best-single) solution; see :func:`budgeted_greedy`.
        gain_floor: The greedy stops once the best remaining score is below this fraction of
            the best single score (0: only when nothing positive fits).
        min_gain: The greedy also stops once the best remaining score is below this absolute
            value (capped at the best single score). It is on the embedder's relevance scale,
            like ``similarity_threshold``; ``ContextSelector`` passes its embedder's value.
        fill: How to spend what the greedy leaves: ``"distinct"`` (the default: relevance
            order, passing over near-copies of what is kept,
            :func:`~langchain_pacms.core.fill.distinct_fill`), ``"diverse"`` (maximal marginal
            relevance against what is kept, :func:`~langchain_pacms.core.fill.diverse_fill`;
            the default until the relevance walk measured better), ``"relevance"``, or
            ``None``/``False`` for no fill; ``True`` means ``"diverse"``.
        fill_threshold: The cosine from which the distinct fill treats a candidate as a
            near-copy of one kept, in ``[0, 1)``; ``None`` (the default):
            ``similarity_threshold``. A kernel looser than near-copies (a low
            ``similarity_threshold``) can keep the fill's own threshold at near-copies.
        relevance_feedback: Weight ``beta`` in ``[0, 1]`` of pseudo-relevance feedback (0:
            none): each candidate's relevance is raised to ``beta * max(rel) * cos(e_i, c)``
            where that is higher, ``c`` being the relevance-weighted centroid of the
            ``feedback_items`` most relevant candidates (see :func:`feedback_relevance`). It
            reaches evidence phrased unlike the query but like the best matches; a candidate's
            relevance is never lowered.
        feedback_items: How many of the most relevant candidates make the centroid.
        experimental_auto_relevance_weight: Experimental, tried and not shipped: replace
            ``relevance_weight`` by :func:`auto_relevance_weight` (it lowered recall on the
            development questions). Warns when enabled.
        experimental_coverage_prior: Experimental, tried and not shipped: a uniform prior added
            to every target's relevance (see
            :class:`~langchain_pacms.core.objective.CoverageObjective`). Warns when non-zero.

    Returns:
        Picks in greedy order; scores are marginal gains (0 for fill items).

    Example:
        >>> import numpy as np
        >>> p = Problem.build(np.eye(3), [1.0, 0.5, 0.0], tokens=[4, 4, 4], budget=8)
        >>> pacms(p).order.tolist()
        [0, 1]
    """
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
    start = np.flatnonzero(problem.mandatory).astype(np.int64)
    scores = np.full(problem.n, np.nan)
    if problem.n == int(start.size):
        return Pick(start, scores, info={"relevance_weight": lam, "evaluations": 0})
    if walk is not None and walk is not relevance_fill:
        # The diversity and distinct fills read cosines among most candidates: one product
        # serves them and the objective's kernel.
        problem.precompute_cosines()
    if relevance_feedback:
        problem = _with_feedback(problem, relevance_feedback, feedback_items)
    objective = CoverageObjective(
        problem,
        relevance_weight=lam,
        similarity_threshold=similarity_threshold,
        density=density,
        coverage_prior=experimental_coverage_prior,
    )
    rank = np.empty(problem.n, dtype=np.int64)
    rank[problem.relevance_order()] = np.arange(problem.n)
    result = budgeted_greedy(
        objective,
        problem.tokens,
        problem.budget,
        start,
        rank,
        cost_exponent=cost_exponent,
        guarantee=guarantee,
        gain_floor=gain_floor,
        min_gain=min_gain,
        complete=None if walk is None else (lambda members, room: walk(problem, members, room)),
    )
    greedy = len(result.picks) - result.completed
    scores[result.picks[:greedy]] = result.gains[:greedy]
    scores[result.picks[greedy:]] = 0.0
    info = {
        "relevance_weight": lam,
        "evaluations": result.evaluations,
        "filled": result.completed,
    }
    return Pick(np.asarray([*start.tolist(), *result.picks], dtype=np.int64), scores, info=info)


def solve(problem: Problem, strategy: str | Strategy = "pacms", **options: Any) -> Pick:
    """Run a strategy with the shared guarantees.

    If the mandatory items alone exceed the budget, exactly they are kept and the pick says
    ``over_budget``. Otherwise the strategy runs and its answer is checked: indices in range, no
    repeats, mandatory items included, tokens within budget.

    Args:
        problem: The selection instance.
        strategy: A registered name or a strategy callable.
        **options: Passed to the strategy.

    Returns:
        The checked pick.

    Raises:
        ValueError: For an unknown strategy name or bad options.
        StrategyError: If the strategy broke an invariant.
    """
    fn = get_strategy(strategy) if isinstance(strategy, str) else strategy
    mandatory = np.flatnonzero(problem.mandatory).astype(np.int64)
    if int(problem.tokens[mandatory].sum()) > problem.budget:
        return Pick(mandatory, np.full(problem.n, np.nan), over_budget=True)
    pick = fn(problem, **options)
    if not isinstance(pick, Pick):
        raise StrategyError(f"strategy returned {type(pick).__name__}, expected a Pick")
    raw = np.asarray(pick.order)
    if raw.ndim != 1:
        raise StrategyError(f"strategy returned order of shape {raw.shape}, expected 1-D")
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise StrategyError(f"strategy returned {raw.dtype} indices, expected integer indices")
    order = raw.astype(np.int64)
    scores = np.asarray(pick.scores, dtype=np.float64)
    if scores.shape != (problem.n,):
        raise StrategyError(
            f"strategy returned scores of shape {scores.shape}, expected ({problem.n},)"
        )
    if order.size and (order.min() < 0 or order.max() >= problem.n):
        raise StrategyError("strategy returned an index out of range")
    if np.unique(order).size != order.size:
        raise StrategyError("strategy returned an index twice")
    if not np.isin(mandatory, order).all():
        raise StrategyError("strategy dropped a mandatory item")
    if int(problem.tokens[order].sum()) > problem.budget:
        raise StrategyError("strategy exceeded the token budget")
    rest = order[~np.isin(order, mandatory)]
    return Pick(np.concatenate([mandatory, rest]), scores, False, pick.info)


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
"""``pacms`` options that give the published objective and the classic cost-benefit greedy."""


def pacms_paper(problem: Problem, **options: Any) -> Pick:
    """``pacms`` with :data:`PAPER_OPTIONS` (explicit options still override them)."""
    return pacms(problem, **{**PAPER_OPTIONS, **options})


def check_options(strategy: str | Strategy, **options: Any) -> None:
    """Run ``strategy`` with ``options`` on a two-item problem, so bad option values fail now.

    (On a real pool whose mandatory part exceeds the budget the strategy never runs, so a bad
    value would only show up later.)

    Raises:
        ValueError: Naming the strategy and what it rejected.

    Example:
        >>> check_options("rag", k=2)
        >>> check_options("rag", k=-1)
        Traceback (most recent call last):
        ...
        ValueError: strategy 'rag' rejects its options {'k': -1}: rag needs k >= 1, got -1
    """
    probe = Problem.build(np.eye(2), np.array([1.0, 0.0]), tokens=[1, 1], budget=1)
    try:
        solve(probe, strategy, **options)
    except (TypeError, ValueError) as err:
        label = strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "?")
        raise ValueError(f"strategy {label!r} rejects its options {dict(options)}: {err}") from err


_BUILTINS: dict[str, Callable[..., Pick]] = {
    "pacms": pacms,
    "pacms_paper": pacms_paper,
    "topk": topk,
    "lastk": lastk,
    "mmr": mmr,
    "rag": rag,
}
for _name, _fn in _BUILTINS.items():
    register_strategy(_name, _fn)
