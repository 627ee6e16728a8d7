"""The selection problem as arrays (:class:`Problem`): what every strategy receives."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from langchain_pacms.core.cosines import (
    NearPairs,
    extended_cosines,
    grown_pairs,
    rows_stable,
    unit_rows,
)

__all__ = ["COSINE_MATRIX_LIMIT", "SIMILARITY_CEILING", "Problem"]

COSINE_MATRIX_LIMIT = 4096  # largest pool whose matrix of all pairwise cosines is kept
SIMILARITY_CEILING = 64 * 2**20  # default Problem.similarity_ceiling in bytes
_T = TypeVar("_T")


def _costs(
    tokens: ArrayLike,
    budget: int,
    mandatory: ArrayLike | None,
    positions: ArrayLike | None,
    n: int | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.bool_], NDArray[np.int64]]:
    """Validated copies of a problem's token costs, mandatory mask and positions (``n`` each)."""
    tok = np.asarray(tokens)
    if tok.ndim != 1:
        raise ValueError("tokens must be a 1-D sequence of integers")
    count = int(tok.shape[0])
    if count and not np.issubdtype(tok.dtype, np.integer):
        raise ValueError("tokens must be integers")
    tok = tok.astype(np.int64)
    if (tok < 0).any():
        raise ValueError("token counts must be >= 0")
    if isinstance(budget, bool) or int(budget) != budget or budget <= 0:
        raise ValueError(f"budget must be a positive integer, got {budget!r}")
    mand = np.zeros(count, bool) if mandatory is None else np.array(mandatory, dtype=bool)
    pos = np.arange(count) if positions is None else np.array(positions, dtype=np.int64)
    if mand.shape != (count,) or pos.shape != (count,):
        raise ValueError("mandatory and positions must have one entry per candidate")
    if n is not None and count != n:
        raise ValueError(f"tokens must have one entry per candidate ({n}), got {count}")
    return tok, mand, pos


def _floats(values: ArrayLike) -> NDArray[np.floating[Any]]:
    """``values`` as a float array: float32 as it is, anything else as float64."""
    arr = np.asarray(values)
    return arr if arr.dtype == np.float32 else arr.astype(np.float64, copy=False)


def _scores(relevance: ArrayLike | None, n: int) -> NDArray[np.float32] | None:
    """Validated relevance scores clipped to ``[0, 1]``, or ``None`` when none are given."""
    if relevance is None:
        return None
    scores = np.array(relevance, dtype=np.float32).reshape(-1)
    if scores.shape != (n,) or not np.isfinite(scores).all():
        raise ValueError(f"relevance must hold {n} finite numbers, one per candidate")
    np.clip(scores, 0.0, 1.0, out=scores)
    return scores


@dataclass(frozen=True, eq=False)
class Problem:
    """One budgeted selection instance, immutable; budget-independent work is shared.

    Attributes:
        vectors: ``(n, d)`` float32 unit rows (zero rows allowed).
        query: ``(d,)`` float32 unit vector (or zero).
        tokens: ``(n,)`` int64 token cost of each candidate (>= 0).
        budget: Token budget (> 0).
        mandatory: ``(n,)`` bool mask of items that are always kept.
        positions: ``(n,)`` int64 chronological positions (larger is newer).
        similarity_ceiling: Most bytes of pairwise similarities held at once (not the picks).
        scores: ``(n,)`` float32 relevance in ``[0, 1]`` given with the problem, or ``None``.

    Example:
        >>> p = Problem.build(np.eye(3), np.array([1.0, 0.0, 0.0]), tokens=[5, 5, 5], budget=10)
        >>> p.n, p.budget, p.relevance.tolist()
        (3, 10, [1.0, 0.0, 0.0])
    """

    vectors: NDArray[np.float32]
    query: NDArray[np.float32]
    tokens: NDArray[np.int64]
    budget: int
    mandatory: NDArray[np.bool_]
    positions: NDArray[np.int64]
    similarity_ceiling: int = SIMILARITY_CEILING
    scores: NDArray[np.float32] | None = None
    # Budget-independent results, shared by the problems that with_budget links.
    _memo: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def build(
        cls,
        vectors: ArrayLike,
        query: ArrayLike,
        *,
        tokens: ArrayLike,
        budget: int,
        mandatory: ArrayLike | None = None,
        positions: ArrayLike | None = None,
        similarity_ceiling: int = SIMILARITY_CEILING,
        relevance: ArrayLike | None = None,
    ) -> Problem:
        """Validate raw inputs and build a problem (inputs are copied, never mutated).

        Args:
            vectors: ``(n, d)`` candidate embeddings, any scale.
            query: ``(d,)`` query embedding.
            tokens: Token cost per candidate.
            budget: Positive token budget.
            mandatory: Mask of always-kept candidates (default: none).
            positions: Chronological positions (default: ``0..n-1``).
            similarity_ceiling: Most bytes of pairwise similarities held at once.
            relevance: Used instead of the query cosines, clipped to ``[0, 1]``.

        Raises:
            ValueError: On bad shapes, negative costs, a non-positive budget or ceiling, or
                non-finite relevance.

        Example:
            >>> p = Problem.build(np.eye(2), [1, 0], tokens=[1, 1], budget=1, relevance=[0.25, 2])
            >>> p.relevance.tolist(), p.relevance_order().tolist()
            ([0.25, 1.0], [1, 0])
        """
        if (
            isinstance(similarity_ceiling, bool)
            or not isinstance(similarity_ceiling, int)
            or similarity_ceiling <= 0
        ):
            raise ValueError(
                f"similarity_ceiling must be a positive int (bytes), got {similarity_ceiling!r}"
            )
        tok, mand, pos = _costs(tokens, budget, mandatory, positions)
        n = tok.shape[0]
        q = _floats(query)
        if q.ndim != 1:
            raise ValueError(f"query must be a 1-D vector, got shape {q.shape}")
        v = _floats(vectors)
        if n == 0:
            v = v.reshape(0, q.shape[0])
        if v.ndim != 2 or v.shape[0] != n or v.shape[1] != q.shape[0]:
            raise ValueError(
                f"vectors must have shape ({n}, {q.shape[0]}) to match tokens and query, "
                f"got {v.shape}"
            )
        return cls(
            vectors=unit_rows(v),
            query=unit_rows(q),
            tokens=tok,
            budget=int(budget),
            mandatory=mand,
            positions=pos,
            similarity_ceiling=similarity_ceiling,
            scores=_scores(relevance, n),
        )

    def grown(
        self,
        vectors: ArrayLike,
        query: ArrayLike,
        *,
        tokens: ArrayLike,
        budget: int,
        mandatory: ArrayLike | None = None,
        positions: ArrayLike | None = None,
        relevance: ArrayLike | None = None,
    ) -> Problem:
        """This problem's candidates followed by ``vectors``, under another query and costs.

        As :meth:`build` on all the vectors, but extends a kept cosine matrix if bits allow.

        Args:
            vectors: ``(k, d)`` embeddings of the new candidates (``k >= 0``), any scale.
            query: ``(d,)`` query embedding.
            tokens: Token cost of all ``n + k`` candidates.
            budget: Positive token budget.
            mandatory: Mask of always-kept candidates (``n + k``).
            positions: Chronological positions (default: ``0..n+k-1``).
            relevance: Relevance of every candidate, as in :meth:`build`.

        Raises:
            ValueError: As :meth:`build`, or when the new vectors' dimension differs.

        Example:
            >>> p = Problem.build(np.eye(3)[:2], [1.0, 0.0, 0.0], tokens=[1, 1], budget=1)
            >>> q = p.grown([[0.0, 0.0, 2.0]], [0.0, 0.0, 1.0], tokens=[1, 1, 1], budget=2)
            >>> q.n, q.vectors[2].tolist(), q.relevance.tolist()
            (3, [0.0, 0.0, 1.0], [0.0, 0.0, 1.0])
        """
        new = _floats(vectors)
        dim = self.vectors.shape[1]
        if new.size == 0:
            new = new.reshape(0, dim)
        if new.ndim != 2 or new.shape[1] != dim:
            raise ValueError(f"new vectors must have shape (k, {dim}), got {new.shape}")
        q = _floats(query)
        if q.shape != (dim,):
            raise ValueError(f"query must have shape ({dim},), got {q.shape}")
        n = self.n + new.shape[0]
        tok, mand, pos = _costs(tokens, budget, mandatory, positions, n)
        unit = np.concatenate([self.vectors, unit_rows(new)]) if new.shape[0] else self.vectors
        problem = Problem(
            vectors=unit,
            query=unit_rows(q),
            tokens=tok,
            budget=int(budget),
            mandatory=mand,
            positions=pos,
            similarity_ceiling=self.similarity_ceiling,
            scores=_scores(relevance, n),
        )
        old = self.cosine_matrix
        extended = None
        if old is not None and problem.fits_cosine_matrix() and rows_stable(dim):
            limit = min(COSINE_MATRIX_LIMIT, math.isqrt(self.similarity_ceiling // 4))
            extended = extended_cosines(old, unit, self._memo.get("cosine_store"), limit)
        if extended is not None:
            matrix, store = extended
            problem._memo.update(cosines=matrix, cosine_store=store)
            for key, pairs in self._memo.items():
                if isinstance(key, tuple) and key[0] == "near":
                    problem._memo[key] = grown_pairs(pairs, matrix, self.n, key[1])
        return problem

    def with_costs(
        self,
        *,
        tokens: ArrayLike,
        budget: int,
        mandatory: ArrayLike | None = None,
        positions: ArrayLike | None = None,
    ) -> Problem:
        """The same vectors and query with other costs, sharing :meth:`shared` results.

        Args:
            tokens: Token cost per candidate.
            budget: Positive token budget.
            mandatory: Mask of always-kept candidates (default: none).
            positions: Chronological positions (default: ``0..n-1``).

        Raises:
            ValueError: As :meth:`build`, or when the number of candidates differs.

        Example:
            >>> p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1)
            >>> q = p.with_costs(tokens=[3, 1], budget=3, mandatory=[False, True])
            >>> q.vectors is p.vectors, q.tokens.tolist(), q.mandatory.tolist()
            (True, [3, 1], [False, True])
        """
        tok, mand, pos = _costs(tokens, budget, mandatory, positions, self.n)
        other = replace(self, tokens=tok, budget=int(budget), mandatory=mand, positions=pos)
        object.__setattr__(other, "_memo", self._memo)
        return other

    def with_budget(self, budget: int) -> Problem:
        """The same candidates under another budget, sharing budget-independent work.

        Args:
            budget: The new positive token budget.

        Raises:
            ValueError: If ``budget`` is not a positive integer.

        Example:
            >>> p = Problem.build(np.eye(3), np.ones(3), tokens=[5, 5, 5], budget=5)
            >>> [p.with_budget(b).budget for b in (5, 10, 15)]
            [5, 10, 15]
        """
        if isinstance(budget, bool) or int(budget) != budget or budget <= 0:
            raise ValueError(f"budget must be a positive integer, got {budget!r}")
        other = replace(self, budget=int(budget))
        object.__setattr__(other, "_memo", self._memo)
        return other

    def with_relevance(self, relevance: ArrayLike) -> Problem:
        """The same candidates, costs and budget with other relevance (sharing only cosines).

        Args:
            relevance: ``(n,)`` scores in ``[0, 1]``, as :attr:`scores`.

        Raises:
            ValueError: If the scores are not ``n`` finite values.

        Example:
            >>> p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1)
            >>> p.with_relevance([0.25, 0.5]).relevance.tolist()
            [0.25, 0.5]
        """
        scores = np.array(relevance, dtype=np.float32).reshape(-1)
        if scores.shape != (self.n,) or not np.isfinite(scores).all():
            raise ValueError(f"relevance must be {self.n} finite values, got shape {scores.shape}")
        np.clip(scores, 0.0, 1.0, out=scores)
        scores.flags.writeable = False
        other = replace(self, scores=scores)
        if self.cosine_matrix is not None:
            other._memo["cosines"] = self.cosine_matrix
        return other

    def with_shared_relevance(self, key: Hashable, relevance: Callable[[], ArrayLike]) -> Problem:
        """This problem with ``relevance()`` instead, built once per pool (``key`` names it)."""
        base = self.shared(key, lambda: self.with_relevance(relevance()))
        return base.with_costs(
            tokens=self.tokens,
            budget=self.budget,
            mandatory=self.mandatory,
            positions=self.positions,
        )

    def shared(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """``build()``, computed once for this problem and those linked by :meth:`with_budget`.

        Only for results independent of the budget, mandatory mask and positions.

        Args:
            key: Names everything else the result depends on.
            build: Computes the result.
        """
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    @property
    def n(self) -> int:
        """Number of candidates."""
        return int(self.tokens.shape[0])

    @cached_property
    def relevance(self) -> NDArray[np.float32]:
        """``rel(i) = max(0, cos(e_i, e_q))`` for every candidate, or the given :attr:`scores`."""
        if self.scores is not None:
            return self.scores
        return np.maximum(self.vectors @ self.query, 0.0).astype(np.float32)

    def fits_cosine_matrix(self) -> bool:
        """Whether the matrix of all pairwise cosines may be kept (:meth:`precompute_cosines`)."""
        return self.n <= COSINE_MATRIX_LIMIT and 4 * self.n * self.n <= self.similarity_ceiling

    def precompute_cosines(self) -> bool:
        """Keep the matrix of all pairwise cosines if it fits; return whether it is available."""
        if not self.fits_cosine_matrix():
            return False

        def build() -> NDArray[np.float32]:
            matrix = self.vectors @ self.vectors.T
            matrix.flags.writeable = False
            return matrix

        self.shared("cosines", build)
        return True

    @property
    def cosine_matrix(self) -> NDArray[np.float32] | None:
        """The read-only matrix of all pairwise cosines if :meth:`precompute_cosines` kept it."""
        return self._memo.get("cosines")

    def near_pairs(self, threshold: float) -> NearPairs | None:
        """The pairs of the kept cosine matrix at or above ``threshold`` (``None``: no matrix).

        Args:
            threshold: The cosine at or above which a pair is listed.

        Example:
            >>> p = Problem.build([[1, 0], [1, 0.1], [0, 1]], [1, 0], tokens=[1, 1, 1], budget=1)
            >>> p.precompute_cosines(), p.near_pairs(0.9).cols.tolist()
            (True, [0, 1, 0, 1, 2])
        """
        matrix = self.cosine_matrix
        if matrix is None:
            return None
        tau = np.float32(threshold)
        return self.shared(("near", float(tau)), lambda: NearPairs.of(matrix >= tau))

    def cosine_columns(self, cols: NDArray[np.int64]) -> NDArray[np.float32]:
        """Cosines of every candidate to ``cols``, a new C-contiguous ``(n, len(cols))`` array.

        Args:
            cols: Column candidates.

        Example:
            >>> p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1)
            >>> p.cosine_columns(np.array([0])).tolist()
            [[1.0], [0.0]]
        """
        cols = np.asarray(cols, dtype=np.int64)
        matrix = self.cosine_matrix
        if matrix is not None:
            return np.take(matrix, cols, axis=1)
        return self.vectors @ self.vectors[cols].T

    def cosine_blocks(self, cols: NDArray[np.int64]) -> Iterator[tuple[int, NDArray[np.float32]]]:
        """Row blocks of :meth:`cosine_columns`, each within :attr:`similarity_ceiling`.

        Args:
            cols: Column candidates.

        Yields:
            The first row's index and the block, in row order.

        Example:
            >>> p = Problem.build(np.eye(3), [1, 0, 0], tokens=[1, 1, 1], budget=1,
            ...                   similarity_ceiling=8)
            >>> [(start, block.tolist()) for start, block in p.cosine_blocks(np.array([0]))]
            [(0, [[1.0], [0.0]]), (2, [[0.0]])]
        """
        cols = np.asarray(cols, dtype=np.int64)
        rows = max(1, self.similarity_ceiling // (4 * max(1, cols.shape[0])))
        matrix = self.cosine_matrix
        if matrix is not None:
            for start in range(0, self.n, rows):
                yield start, np.take(matrix[start : start + rows], cols, axis=1)
            return
        right = self.vectors[cols]
        for start in range(0, self.n, rows):
            yield start, self.vectors[start : start + rows] @ right.T

    def recency_order(self) -> NDArray[np.int64]:
        """Indices from newest to oldest (ties: later index first)."""
        return np.lexsort((-np.arange(self.n), -self.positions)).astype(np.int64)

    def relevance_order(self) -> NDArray[np.int64]:
        """Indices by decreasing relevance; ties break by earlier position, then index."""
        return np.lexsort((np.arange(self.n), self.positions, -self.relevance)).astype(np.int64)
