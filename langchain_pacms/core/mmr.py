"""``mmr``: LangChain's maximal-marginal-relevance ranking, walked under the budget."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.pick import Pick, mandatory_state, scored
from langchain_pacms.core.problem import Problem

__all__ = ["MMR_BLOCK", "MMR_GRAM_LIMIT", "MmrRanking", "mmr", "mmr_ranking"]


MMR_GRAM_LIMIT = 12_000  # largest pool whose pairwise dot products MmrRanking computes at once
MMR_BLOCK = 256  # picks after which MmrRanking brings every candidate's redundancy up to date
_MMR_CHUNK = 16  # candidates re-scored at once while looking for the next pick
_MMR_ROWS_BYTES = 16 * 2**20  # vectors multiplied at once by a full redundancy update


class MmrRanking:
    """LangChain's ``maximal_marginal_relevance`` (``k = n``), ranked as far as :meth:`extend` asks.

    Equal up to rounding ties; a zero query gives zero relevance. Thread-safe.
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
    """The full ranking (:class:`MmrRanking` of every item) and each item's score when taken."""
    ranking = MmrRanking(vectors, query, lambda_mult, relevance=relevance)
    ranking.extend(len(vectors))
    return ranking.order.copy(), ranking.scores.copy()


def mmr(problem: Problem, *, lambda_mult: float = 0.5) -> Pick:
    """LangChain's MMR ranking (shared across budgets), walked while anything left could fit."""
    if not 0.0 <= lambda_mult <= 1.0:
        raise ValueError(f"lambda_mult must be in [0, 1], got {lambda_mult}")
    start, remaining, passed = mandatory_state(problem)
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
    return scored(problem, [*start.tolist(), *picked], values)
