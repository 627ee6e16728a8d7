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
  not fit. This is an incremental twin of that function (identical picks, proven by a test)
  that ranks only until no candidate left could fit (:class:`MmrRanking`).
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
import inspect
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.fill import distinct_fill, diverse_fill, relevance_fill
from langchain_pacms.core.greedy import budgeted_greedy
from langchain_pacms.core.objective import CoverageObjective
from langchain_pacms.core.problem import Problem
from langchain_pacms.errors import PACMSError

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
    "rejection",
    "solve",
]


class StrategyError(PACMSError, RuntimeError):
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
"""Largest pool for which :class:`MmrRanking` computes all pairwise dot products at once, once
it has ranked a sixteenth of the pool (a walk that goes that deep tends to read most of them)."""

MMR_BLOCK = 256
"""Picks after which :class:`MmrRanking` brings every candidate's redundancy up to date."""

_MMR_CHUNK = 16  # candidates re-scored at once while looking for the next pick
_MMR_ROWS_BYTES = 16 * 2**20  # vectors multiplied at once by a full redundancy update


class MmrRanking:
    """LangChain's maximal-marginal-relevance ranking, computed only as far as it is read.

    Follows LangChain's ``maximal_marginal_relevance`` with ``k = n``: start from the most
    query-similar item, then repeatedly take the item maximising
    ``lambda_mult * sim(q, i) - (1 - lambda_mult) * max_{s in S} sim(i, s)`` (raw cosines, zero
    vectors scoring 0, first index on ties), with the same formulas evaluated in the same dtype
    as LangChain. :meth:`extend` ranks more items on demand, so a walk under a budget stops
    paying once nothing more can fit.

    A candidate's score only falls as items are taken, so its last computed score bounds it
    from above. Every ``block`` picks one matrix product brings every candidate's redundancy up
    to date and orders the candidates by that bound; in between, each step re-scores only the
    candidates, in that order, whose bound reaches the best score found (against the items
    taken since), and takes the best. That holds ``O(n * block)`` similarities. Once a
    sixteenth of a pool of at most ``gram_limit`` items is ranked, the rest is ranked from all
    pairwise dot products, computed in one matrix product: each step updates every
    candidate's redundancy from the row of the item last taken.

    The rankings are LangChain's except where two scores agree to within floating-point
    rounding (for example exact duplicate vectors): BLAS rounds a dot product differently
    depending on the shape of the product it is part of, so which of two such near-equal items
    is taken first depends on how the products were cut. Exact duplicates are then
    interchangeable. A zero (or non-finite) query gives zero relevance everywhere here, where
    LangChain raises. Safe to extend from several threads.

    Args:
        vectors: ``(n, d)`` candidate embeddings.
        query: ``(d,)`` query embedding.
        lambda_mult: Relevance/diversity trade-off in ``[0, 1]``.
        relevance: Optional ``(n,)`` relevance that replaces the cosines to the query (a
            problem's given :attr:`~langchain_pacms.core.Problem.scores`); the redundancy term
            still comes from the vectors.
        block: Picks between two full redundancy updates (at least 1).
        gram_limit: Largest pool for which all pairwise dot products may be computed at once.

    Example:
        >>> ranking = MmrRanking(np.eye(3), np.array([1.0, 0.5, 0.0]))
        >>> ranking.extend(2)
        >>> ranking.order.tolist(), len(ranking)
        ([0, 1], 2)
    """

    def __init__(
        self,
        vectors: NDArray[np.floating[Any]],
        query: NDArray[np.floating[Any]],
        lambda_mult: float = 0.5,
        *,
        relevance: NDArray[np.floating[Any]] | None = None,
        block: int = MMR_BLOCK,
        gram_limit: int = MMR_GRAM_LIMIT,
    ) -> None:
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be an int >= 1, got {block!r}")
        x = np.asarray(vectors)
        q = np.asarray(query)[None, :]
        norms = np.linalg.norm(x, axis=1)
        if relevance is not None:
            to_query = np.asarray(relevance, dtype=np.result_type(x.dtype, q.dtype))
        else:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                to_query = (np.dot(q, x.T) / np.outer(np.linalg.norm(q, axis=1), norms))[0]
            to_query[~np.isfinite(to_query)] = 0.0
        n = x.shape[0]
        self._x, self._norms, self._to_query = x, norms, to_query
        self._lambda, self._block = lambda_mult, block
        self._gram_at = max(1, n // 16) if n <= gram_limit else None  # picks before the gram
        self._gram: NDArray[np.floating[Any]] | None = None
        self._order = np.zeros(n, dtype=np.int64)
        self._scores = np.zeros(n)
        self._count = 0
        self._taken = np.zeros(n, dtype=bool)
        self._redundancy = np.full(n, -np.inf, dtype=to_query.dtype)
        self._fresh = np.zeros(n, dtype=np.int64)  # picks counted in each redundancy
        self._applied = 0  # picks counted in every redundancy
        self._bound = np.full(n, np.inf, dtype=to_query.dtype)  # each score's upper bound
        self._key = self._bound.copy()  # the bounds the queue is sorted by
        self._queue = np.zeros(0, dtype=np.int64)  # open candidates, highest key first
        self._head = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Items ranked so far."""
        return self._count

    @property
    def order(self) -> NDArray[np.int64]:
        """The items ranked so far, best first."""
        return self._order[: self._count]

    @property
    def scores(self) -> NDArray[np.float64]:
        """Each ranked item's MMR score at the step it was taken."""
        return self._scores[: self._count]

    def extend(self, count: int) -> None:
        """Rank items until ``count`` are ranked (or all of them)."""
        with self._lock:
            while self._count < min(count, self._taken.shape[0]):
                if self._count == 0:
                    best = int(np.argmax(self._to_query))
                    value = float(self._to_query[best])
                elif self._gram_at is not None and self._count >= self._gram_at:
                    best, value = self._gram_step()
                else:
                    if self._count - self._applied >= min(self._block, max(1, self._applied)):
                        self._apply()
                    best, value = self._best()
                self._taken[best] = True
                self._order[self._count] = best
                self._scores[self._count] = value
                self._count += 1

    def _values(self, rows: NDArray[np.int64] | slice) -> NDArray[np.floating[Any]]:
        """The MMR scores of ``rows`` against the redundancy each has counted."""
        lam = self._lambda
        return lam * self._to_query[rows] - (1 - lam) * self._redundancy[rows]

    @staticmethod
    def _cosines(
        dots: NDArray[np.floating[Any]],
        row_norms: NDArray[np.floating[Any]],
        col_norms: NDArray[np.floating[Any]],
    ) -> NDArray[np.floating[Any]]:
        """Dot products as cosines, given the norms (0 next to a zero or non-finite vector)."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            sims = dots / (row_norms * col_norms)
        sims[~np.isfinite(sims)] = 0.0
        return sims

    def _similarities(
        self, rows: NDArray[np.int64] | slice, cols: NDArray[np.int64]
    ) -> NDArray[np.floating[Any]]:
        """Cosines of ``rows`` with the items ``cols``."""
        x, norms = self._x, self._norms
        dots = np.dot(x[rows], x[cols].T)
        return self._cosines(dots, norms[rows][:, None], norms[cols][None, :])

    def _gram_step(self) -> tuple[int, float]:
        """The next pick from the rows of all pairwise dot products (computed on first use)."""
        if self._gram is None:
            self._gram = np.dot(self._x, self._x.T)
            self._redundancy.fill(-np.inf)
            self._applied = 0
        for last in self._order[self._applied : self._count].tolist():
            sims = self._cosines(self._gram[last], self._norms, self._norms[last])
            np.maximum(self._redundancy, sims, out=self._redundancy)
        self._applied = self._count
        value = self._values(slice(None))
        value[self._taken] = -np.inf
        best = int(np.argmax(value))
        return best, float(value[best])

    def _apply(self) -> None:
        """Count every pick in every redundancy and order the open candidates by their bound."""
        picks = self._order[self._applied : self._count]
        n = self._taken.shape[0]
        step = max(1, _MMR_ROWS_BYTES // max(1, self._x.itemsize * self._x.shape[1]))
        for start in range(0, n, step):
            stop = min(n, start + step)
            rows: NDArray[np.int64] | slice = slice(start, stop)
            open_rows = np.flatnonzero(~self._taken[rows]) + start
            if 2 * open_rows.size < stop - start:  # mostly taken: only the open rows
                rows = open_rows
            sims = self._similarities(rows, picks)
            self._redundancy[rows] = np.maximum(self._redundancy[rows], sims.max(axis=1))
        self._applied = self._count
        self._fresh[:] = self._count
        open_rows = np.flatnonzero(~self._taken)
        self._bound[open_rows] = self._values(open_rows)
        self._key = self._bound.copy()
        # highest first, lowest index on ties
        self._queue = open_rows[np.argsort(-self._bound[open_rows], kind="stable")]
        self._head = 0

    def _best(self) -> tuple[int, float]:
        """The open candidate with the highest score (lowest index on ties), and its score."""
        queue, taken, key = self._queue, self._taken, self._key
        while taken[queue[self._head]]:
            self._head += 1
        if self._applied == self._count:  # every bound is the exact score
            best = int(queue[self._head])
            return best, float(self._bound[best])
        best, top = -1, -np.inf
        pos = self._head
        while pos < queue.shape[0] and (best < 0 or key[queue[pos]] >= top):
            chunk = queue[pos : pos + _MMR_CHUNK]
            pos += _MMR_CHUNK
            chunk = chunk[~taken[chunk] & (self._bound[chunk] >= top)]
            if not chunk.size:
                continue
            self._refresh(chunk)
            values = self._values(chunk)
            self._bound[chunk] = values
            high = values.max()
            first = int(chunk[values == high].min())
            if high > top or (high == top and first < best):
                best, top = first, high
        return best, float(top)

    def _refresh(self, rows: NDArray[np.int64]) -> None:
        """Count in the redundancy of ``rows`` the picks they have not counted yet."""
        since = int(self._fresh[rows].min())
        if since < self._count:
            sims = self._similarities(rows, self._order[since : self._count])
            self._redundancy[rows] = np.maximum(self._redundancy[rows], sims.max(axis=1))
            self._fresh[rows] = self._count


def mmr_ranking(
    vectors: NDArray[np.floating[Any]],
    query: NDArray[np.floating[Any]],
    lambda_mult: float = 0.5,
    *,
    relevance: NDArray[np.floating[Any]] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Full maximal-marginal-relevance ranking (:class:`MmrRanking` of every item).

    Args:
        vectors: ``(n, d)`` candidate embeddings.
        query: ``(d,)`` query embedding.
        lambda_mult: Relevance/diversity trade-off in ``[0, 1]``.
        relevance: Optional ``(n,)`` relevance that replaces the cosines to the query.

    Returns:
        The ranking and the MMR score of each item at the step it was taken.

    Example:
        >>> order, scores = mmr_ranking(np.eye(3), np.array([1.0, 0.5, 0.0]))
        >>> order.tolist()
        [0, 1, 2]
    """
    ranking = MmrRanking(vectors, query, lambda_mult, relevance=relevance)
    ranking.extend(len(vectors))
    return ranking.order.copy(), ranking.scores.copy()


def mmr(problem: Problem, *, lambda_mult: float = 0.5) -> Pick:
    """LangChain's MMR ranking over all candidates, walked under the budget.

    A problem built with its own relevance (:attr:`~langchain_pacms.core.Problem.scores`)
    ranks by that relevance in place of the cosines to the query.

    The walk takes every ranked candidate that still fits and stops ranking once no candidate
    left to rank could fit (the rest of the ranking would add nothing), so a small budget
    ranks a small part of a large pool. The ranking does not depend on the budget, so problems
    linked by :meth:`~langchain_pacms.core.Problem.with_budget` share one
    :class:`MmrRanking` (a budget sweep extends it as far as its largest budget needs).

    Example:
        >>> import numpy as np
        >>> p = Problem.build(np.eye(3), [1.0, 0.5, 0.0], tokens=[4, 4, 4], budget=8)
        >>> [mmr(p.with_budget(b)).order.tolist() for b in (4, 8)]
        [[0], [0, 1]]
    """
    if not 0.0 <= lambda_mult <= 1.0:
        raise ValueError(f"lambda_mult must be in [0, 1], got {lambda_mult}")
    start, remaining, passed = _mandatory_state(problem)
    ranking = problem.shared(
        ("mmr", float(lambda_mult)),
        lambda: MmrRanking(
            problem.vectors, problem.query, float(lambda_mult), relevance=problem.scores
        ),
    )
    tokens = problem.tokens
    by_cost = np.argsort(tokens, kind="stable")
    cheapest = 0  # into by_cost: the cheapest candidate the walk has not passed yet
    picked: list[int] = []
    values = np.zeros(problem.n)
    step = 0
    while True:
        while cheapest < problem.n and passed[by_cost[cheapest]]:
            cheapest += 1
        if cheapest == problem.n or tokens[by_cost[cheapest]] > remaining:
            break  # nothing left to rank could fit
        ranking.extend(step + 1)
        j = int(ranking.order[step])
        values[j] = ranking.scores[step]
        step += 1
        if passed[j]:
            continue
        passed[j] = True  # kept, or too large for what is left (which only shrinks)
        if tokens[j] <= remaining:
            remaining -= int(tokens[j])
            picked.append(j)
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


POOL_MEAN_COSINE_LIMIT = 0.95
"""Mean cosine between a pool's candidates from which ``pacms`` with ``calibrate=True`` treats
coverage as meaningless (every candidate near every other) and keeps relevance order."""

RELEVANCE_TIE_WEIGHT = 1e-3
"""Weight of the raw relevance in relevance on a pool's own scale (:func:`on_pool_scale`): it
keeps candidates below the pool's mean relevance in their raw order instead of tied at 0."""


def pool_mean_cosine(problem: Problem) -> float:
    """The mean cosine over all pairs of distinct candidates (0 for fewer than two).

    Computed from the sum of the unit rows, in ``O(n d)``.

    Example:
        >>> import numpy as np
        >>> p = Problem.build([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], [1.0, 0.0],
        ...                   tokens=[1, 1, 1], budget=1)
        >>> round(pool_mean_cosine(p), 3)
        0.333
    """
    n = problem.n
    if n < 2:
        return 0.0
    vectors = problem.vectors.astype(np.float64)
    total = vectors.sum(axis=0)
    pairs = float(total @ total) - float(np.einsum("ij,ij->", vectors, vectors))
    return pairs / (n * (n - 1))


def pool_threshold(threshold: float, mean_cosine: float) -> float:
    """A threshold chosen on the dense scale (unrelated texts near 0), read on a pool's scale.

    ``m + threshold * (1 - m)`` with ``m = max(0, mean_cosine)``: the threshold keeps its
    place between the pool's typical pair and an exact copy.

    Example:
        >>> pool_threshold(0.85, 0.0), round(pool_threshold(0.85, 0.8), 3)
        (0.85, 0.97)
    """
    shift = max(float(mean_cosine), 0.0)
    return shift + float(threshold) * (1.0 - shift)


def on_pool_scale(problem: Problem) -> Problem:
    """The problem with relevance read on the pool's own scale, built once per pool.

    ``rel' = (max(0, rel - m) + w * rel) / (1 - m + w)``, ``m`` the pool's mean relevance
    (at most 0.999) and ``w`` :data:`RELEVANCE_TIE_WEIGHT`: the order of the candidates is
    kept, and only how far each stands above a typical one counts. With an embedder whose
    cosines are high across the board every relevance is close to the best one, and coverage
    of neighbours would otherwise outweigh the differences that relevance order rests on.

    Example:
        >>> import numpy as np
        >>> p = Problem.build(np.eye(3), [1.0, 0.0, 0.0], tokens=[1, 1, 1], budget=1,
        ...                   relevance=[0.9, 0.8, 0.7])
        >>> [round(float(r), 3) for r in on_pool_scale(p).relevance]
        [0.502, 0.004, 0.003]
    """

    def build() -> Problem:
        rel = problem.relevance.astype(np.float64)
        shift = min(max(float(rel.mean()), 0.0), 0.999)
        scaled = (np.maximum(0.0, rel - shift) + RELEVANCE_TIE_WEIGHT * rel) / (
            1.0 - shift + RELEVANCE_TIE_WEIGHT
        )
        return problem.with_relevance(scaled)

    base = problem.shared(("pool_scale",), build)
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
    calibrate: bool = False,
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
        calibrate: Read every setting on the pool's own cosine scale (``ContextSelector``
            sets it for an embedder that declares no profile). When the mean cosine between
            candidates is at least :data:`POOL_MEAN_COSINE_LIMIT`, coverage cannot tell them
            apart: the picks are in relevance order (as ``topk``) and ``info["coverage"]``
            says ``"meaningless"``. Otherwise ``similarity_threshold`` and the fill's
            near-copy threshold (``fill_threshold``, by default halfway between
            ``similarity_threshold`` and 1) are moved onto the pool's scale
            (:func:`pool_threshold`), and relevance is read above the pool's mean relevance
            (:func:`on_pool_scale`). ``info`` gives ``pool_mean_cosine``, ``coverage`` and
            the thresholds used.
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
    calibration: dict[str, Any] = {}
    if calibrate:
        mean = problem.shared(("pool_mean_cosine",), lambda: pool_mean_cosine(problem))
        calibration = {"pool_mean_cosine": mean, "coverage": "meaningful"}
        if mean >= POOL_MEAN_COSINE_LIMIT:
            room = problem.budget - int(problem.tokens[start].sum())
            order = [*start.tolist(), *relevance_fill(problem, start.tolist(), room)]
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
        # The diversity and distinct fills read cosines among most candidates: one product
        # serves them and the objective's kernel.
        problem.precompute_cosines()
    if calibrate:
        problem = on_pool_scale(problem)  # shares the cosines (they do not read relevance)
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
        **calibration,
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


def _keyword_options(fn: Callable[..., Any]) -> list[str] | None:
    """The keyword options ``fn`` takes after the problem; ``None`` when it takes any."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):  # no signature to read
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def rejection(strategy: str | Strategy, options: Mapping[str, Any]) -> str | None:
    """Why ``strategy`` rejects ``options``, or ``None`` when it takes them.

    An option the strategy's signature does not name is rejected with the options it takes;
    for a built-in strategy the others are tried on a two-item problem, so bad values show up
    now. (On a real pool whose mandatory part exceeds the budget the strategy never runs, so a
    bad value would only show up later.) A strategy of the user's own is never called here: it
    may be costly or keep state.

    Args:
        strategy: A registered name or a strategy callable.
        options: Keyword options for it.

    Returns:
        The reason, or ``None``.

    Raises:
        ValueError: For a name that is not registered (listing the registered ones).

    Example:
        >>> rejection("rag", {"k": 2}) is None
        True
        >>> rejection("rag", {"k": -1})
        'rag needs k >= 1, got -1'
        >>> rejection("rag", {"lambda_mult": 0.5})
        "unknown option 'lambda_mult'; it accepts: k"
    """
    fn = get_strategy(strategy) if isinstance(strategy, str) else strategy
    accepted = _keyword_options(fn)
    unknown = [] if accepted is None else sorted(set(options) - set(accepted))
    if unknown:
        return f"unknown option {unknown[0]!r}; it accepts: {', '.join(accepted or ['nothing'])}"
    if fn not in _BUILTINS.values():
        return None
    probe = Problem.build(np.eye(2), np.array([1.0, 0.0]), tokens=[1, 1], budget=1)
    try:
        solve(probe, strategy, **options)
    except (TypeError, ValueError) as err:
        return str(err)
    return None


def check_options(strategy: str | Strategy, **options: Any) -> None:
    """Raise when ``strategy`` rejects ``options`` (see :func:`rejection`).

    Raises:
        ValueError: Naming the strategy and what it rejected, or for an unknown strategy name.

    Example:
        >>> check_options("rag", k=2)
        >>> check_options("rag", k=-1)
        Traceback (most recent call last):
        ...
        ValueError: strategy 'rag' rejects its options {'k': -1}: rag needs k >= 1, got -1
    """
    reason = rejection(strategy, options)
    if reason is not None:
        label = strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "?")
        raise ValueError(f"strategy {label!r} rejects its options {dict(options)}: {reason}")


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
