"""The selection problem as arrays: what every strategy receives.

A :class:`Problem` holds unit-normalised candidate vectors, the query vector, token costs, the
budget, the mandatory mask and chronological positions. It is built once per selection and is
immutable afterwards; derived arrays (relevance, similarity) are computed lazily and cached.
:meth:`Problem.with_budget` gives the same candidates under another budget and lets strategies
share the work that does not depend on the budget (the cosine matrix and the coverage kernel of
``pacms``) between the two, so a sweep over budgets builds it once.

Example:
    >>> import numpy as np
    >>> p = Problem.build(np.eye(3), np.array([1.0, 0.0, 0.0]), tokens=[5, 5, 5], budget=10)
    >>> p.relevance.tolist()
    [1.0, 0.0, 0.0]
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "COSINE_MATRIX_LIMIT",
    "SIMILARITY_CEILING",
    "NearPairs",
    "Problem",
    "rows_stable",
    "unit_rows",
]

COSINE_MATRIX_LIMIT = 4096
"""Largest pool for which :meth:`Problem.precompute_cosines` keeps the matrix of all pairwise
cosines (64 MiB at this size); larger pools compute each block from the vectors."""

SIMILARITY_CEILING = 64 * 2**20
"""Default :attr:`Problem.similarity_ceiling`: 64 MiB, the size of the largest cosine matrix kept
(:data:`COSINE_MATRIX_LIMIT` rows)."""

_T = TypeVar("_T")


def unit_rows(matrix: ArrayLike) -> NDArray[np.float32]:
    """Return ``matrix`` as float32 rows of unit length.

    Rows that are all zero or contain a non-finite value become zero rows, so they have zero
    similarity to everything (treated as irrelevant) instead of producing NaN. Each row is
    divided by its norm in float64 and rounded to float32 once; a float32 input is read as it
    is (no float64 copy of the matrix).

    Args:
        matrix: A 1-D vector or a 2-D array of row vectors.

    Returns:
        A new float32 array of the same shape.

    Example:
        >>> unit_rows([[3.0, 4.0], [0.0, 0.0], [float("nan"), 1.0]]).tolist()
        [[0.6000000238418579, 0.800000011920929], [0.0, 0.0], [0.0, 0.0]]
    """
    arr = np.asarray(matrix)
    if arr.dtype != np.float32:
        arr = arr.astype(np.float64, copy=False)
    one_d = arr.ndim == 1
    if one_d:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"expected a 1-D or 2-D array of vectors, got shape {arr.shape}")
    with np.errstate(invalid="ignore", over="ignore"):
        # A non-finite entry makes the row's norm non-finite (NaN or inf): that flags the row.
        norms = np.sqrt(np.einsum("ij,ij->i", arr, arr, dtype=np.float64))
        bad = ~np.isfinite(norms)
        out = np.empty(arr.shape, dtype=np.float32)
        np.divide(
            arr, np.where(bad | (norms == 0), 1.0, norms)[:, None], out=out, casting="same_kind"
        )
    out[bad] = 0.0
    return out[0] if one_d else out


def _costs(
    tokens: ArrayLike, budget: int, mandatory: ArrayLike | None, positions: ArrayLike | None
) -> tuple[NDArray[np.int64], NDArray[np.bool_], NDArray[np.int64]]:
    """Validated copies of a problem's token costs, mandatory mask and positions."""
    tok = np.asarray(tokens)
    n = int(tok.shape[0]) if tok.ndim == 1 else -1
    if n < 0:
        raise ValueError("tokens must be a 1-D sequence of integers")
    if n and not np.issubdtype(tok.dtype, np.integer):
        raise ValueError("tokens must be integers")
    tok = tok.astype(np.int64)
    if (tok < 0).any():
        raise ValueError("token counts must be >= 0")
    if isinstance(budget, bool) or int(budget) != budget or budget <= 0:
        raise ValueError(f"budget must be a positive integer, got {budget!r}")
    mand = np.zeros(n, bool) if mandatory is None else np.array(mandatory, dtype=bool)
    pos = np.arange(n) if positions is None else np.array(positions, dtype=np.int64)
    if mand.shape != (n,) or pos.shape != (n,):
        raise ValueError("mandatory and positions must have one entry per candidate")
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


# Rows of the stability probe, and how many of them are appended (both off any kernel's unroll).
_PROBE_ROWS, _PROBE_GROWN = 517, 11


@cache
def rows_stable(dim: int) -> bool:
    """Whether this BLAS gives a cosine the same bits whatever product it is computed in.

    A grown pool's cosines can be carried over from the last call (old rows) and a product of
    the new rows with every row only when each entry comes out as a fresh ``E @ E.T`` of the
    whole pool would give it. Some kernels accumulate a dot product in an order that depends
    on the shape of the product (OpenBLAS's Haswell kernel: about 1% of the entries of a
    2,000-row ``E @ E.T`` change in their last bit when 5 rows are appended), others do not
    (its SkylakeX kernel). This checks it once per dimension on seeded unit rows: the product
    of the first rows, the product of the appended rows with all of them, and the product of
    all, compared bit for bit.

    Args:
        dim: The vectors' dimension.

    Returns:
        ``True`` when the pieces equal the whole product exactly.
    """
    rows = unit_rows(np.random.default_rng(0).standard_normal((_PROBE_ROWS, dim)))
    head = _PROBE_ROWS - _PROBE_GROWN
    whole = rows @ rows.T
    return bool(
        np.array_equal(rows[:head] @ rows[:head].T, whole[:head, :head])
        and np.array_equal(rows[head:] @ rows.T, whole[head:])
    )


@dataclass(frozen=True, eq=False)
class Problem:
    """One budgeted selection instance.

    Attributes:
        vectors: ``(n, d)`` float32 unit rows (zero rows allowed).
        query: ``(d,)`` float32 unit vector (or zero).
        tokens: ``(n,)`` int64 token cost of each candidate (>= 0).
        budget: Token budget (> 0).
        mandatory: ``(n,)`` bool mask of items that are always kept.
        positions: ``(n,)`` int64 chronological positions (larger is newer).
        similarity_ceiling: Most bytes of pairwise similarities held at once: the cosine
            matrix is kept, and the coverage kernel of ``pacms`` may be stored dense, only
            within it; otherwise similarities are computed in row blocks of at most this size
            and the kernel keeps only its non-zero entries (cosines above the near-duplicate
            threshold). It changes how much memory a selection takes, not its picks (up to
            rounding: see :class:`~langchain_pacms.core.objective.CoverageObjective`).
        scores: ``(n,)`` float32 relevance in ``[0, 1]`` given with the problem (an
            embedder's exact pool relevance), or ``None`` to derive it from the vectors (see
            :attr:`relevance`).
    """

    vectors: NDArray[np.float32]
    query: NDArray[np.float32]
    tokens: NDArray[np.int64]
    budget: int
    mandatory: NDArray[np.bool_]
    positions: NDArray[np.int64]
    similarity_ceiling: int = SIMILARITY_CEILING
    scores: NDArray[np.float32] | None = None
    # Budget-independent results, kept for the problem's lifetime and shared by the problems
    # that with_budget links.
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
            budget: Token budget; must be positive.
            mandatory: Optional boolean mask of always-kept candidates.
            positions: Optional chronological positions; defaults to ``0..n-1``.
            similarity_ceiling: Most bytes of pairwise similarities held at once (see the
                class attributes); default :data:`SIMILARITY_CEILING`.
            relevance: Optional relevance of each candidate to the query, used instead of
                the cosines of the vectors (values are clipped to ``[0, 1]``); the vectors
                still give every similarity between candidates.

        Returns:
            The validated problem.

        Raises:
            ValueError: On mismatched shapes, negative costs, a non-positive budget, a
                non-positive ceiling or non-finite relevance.

        Example:
            >>> p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1,
            ...                   relevance=[0.25, 1.5])
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

        The problem of an agent's next call, whose pool is the last one plus a few new items:
        equal to :meth:`build` on all the vectors (the old rows are already unit rows, and a
        row is normalised on its own), but the kept cosine matrix is carried over, and only
        the new rows' cosines are computed, when they come out with the bits a product of the
        whole pool would give: :func:`rows_stable` says so for this BLAS, and the same product
        computes a few old rows again, which must equal the kept ones. Otherwise the new
        problem computes its cosines afresh, as a built one does. The near-duplicate pairs
        listed by :meth:`near_pairs` are extended with the matrix. The query, costs, budget,
        mandatory mask, positions and relevance are the new call's own (validated as
        :meth:`build` validates them); nothing that depends on them is carried over.

        Args:
            vectors: ``(k, d)`` embeddings of the new candidates (``k >= 0``), any scale.
            query: ``(d,)`` query embedding.
            tokens: Token cost of every candidate, old and new (``n + k`` of them).
            budget: Token budget; must be positive.
            mandatory: Optional boolean mask of always-kept candidates (``n + k``).
            positions: Optional chronological positions; defaults to ``0..n+k-1``.
            relevance: Optional relevance of every candidate, as in :meth:`build`.

        Returns:
            The problem over ``n + k`` candidates.

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
        tok, mand, pos = _costs(tokens, budget, mandatory, positions)
        n = self.n + new.shape[0]
        if tok.shape[0] != n:
            raise ValueError(f"tokens must have one entry per candidate ({n}), got {tok.shape[0]}")
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
            extended = _extended(old, unit, self._memo.get("cosine_store"), self.similarity_ceiling)
        if extended is not None:
            matrix, store = extended
            problem._memo.update(cosines=matrix, cosine_store=store)
            for key, pairs in self._memo.items():
                if isinstance(key, tuple) and key[0] == "near":
                    problem._memo[key] = _grown_pairs(pairs, matrix, self.n, key[1])
        return problem

    def with_costs(
        self,
        *,
        tokens: ArrayLike,
        budget: int,
        mandatory: ArrayLike | None = None,
        positions: ArrayLike | None = None,
    ) -> Problem:
        """The same vectors and query with other costs, budget, mandatory mask and positions.

        Like :meth:`with_budget`, the problems share their memo (see :meth:`shared`): a later
        selection over the same texts and query (an agent's repeated call) reuses the cosines
        and the coverage kernel instead of computing them again. The arguments are validated
        as :meth:`build` validates them.

        Args:
            tokens: Token cost per candidate (one per row of :attr:`vectors`).
            budget: Token budget; must be positive.
            mandatory: Optional boolean mask of always-kept candidates.
            positions: Optional chronological positions; defaults to ``0..n-1``.

        Returns:
            The problem.

        Raises:
            ValueError: As :meth:`build`, or when the number of candidates differs.

        Example:
            >>> p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1)
            >>> q = p.with_costs(tokens=[3, 1], budget=3, mandatory=[False, True])
            >>> q.vectors is p.vectors, q.tokens.tolist(), q.mandatory.tolist()
            (True, [3, 1], [False, True])
        """
        tok, mand, pos = _costs(tokens, budget, mandatory, positions)
        if tok.shape[0] != self.n:
            raise ValueError(
                f"tokens must have one entry per candidate ({self.n}), got {tok.shape[0]}"
            )
        other = replace(self, tokens=tok, budget=int(budget), mandatory=mand, positions=pos)
        object.__setattr__(other, "_memo", self._memo)
        return other

    def with_budget(self, budget: int) -> Problem:
        """The same candidates under another budget, sharing budget-independent work.

        The two problems, and every further problem made this way from either, share one memo:
        what a strategy derives from the candidates alone (see :meth:`shared`) is computed once
        for all of them.

        Args:
            budget: The new token budget; must be positive.

        Returns:
            A problem equal to this one except for ``budget``.

        Raises:
            ValueError: If ``budget`` is not a positive integer.

        Example:
            >>> import numpy as np
            >>> p = Problem.build(np.eye(3), np.ones(3), tokens=[5, 5, 5], budget=5)
            >>> [p.with_budget(b).budget for b in (5, 10, 15)]
            [5, 10, 15]
        """
        if isinstance(budget, bool) or int(budget) != budget or budget <= 0:
            raise ValueError(f"budget must be a positive integer, got {budget!r}")
        other = replace(self, budget=int(budget))
        # The memo is a cache, like the cached properties: sharing it leaves the problem equal.
        object.__setattr__(other, "_memo", self._memo)
        return other

    def with_relevance(self, relevance: ArrayLike) -> Problem:
        """The same candidates, costs and budget with other relevance scores.

        The kept cosine matrix (which does not depend on relevance) is shared; other shared
        results, such as a coverage kernel weighted by relevance, are not.

        Args:
            relevance: ``(n,)`` scores in ``[0, 1]``, as :attr:`scores`.

        Returns:
            The problem.

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

    def shared(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """``build()``, computed once for this problem and those linked by :meth:`with_budget`.

        Only for results that depend on the candidates and the query, never on the budget, the
        mandatory mask or the positions; ``key`` must name everything else they depend on. The
        result is kept as long as one of the linked problems is alive.

        Args:
            key: Identifies the result among the problems' shared results.
            build: Computes the result.

        Returns:
            The (possibly shared) result.
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
        """Compute the matrix of all pairwise cosines once, so later blocks are read from it.

        Worth it when most pairs will be needed anyway: ``pacms`` with the distinct or the
        diversity fill calls it, so its objective and its fill share one product (see
        :attr:`cosine_matrix` and :meth:`near_pairs`).
        The matrix is kept with the problem (and shared by the problems :meth:`with_budget`
        links); pools larger than :data:`COSINE_MATRIX_LIMIT`, or whose matrix would not fit in
        :attr:`similarity_ceiling`, are left alone.

        Returns:
            Whether the matrix is now available.
        """
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
        """The pairs of the kept cosine matrix at or above ``threshold``, row by row.

        ``None`` without a kept matrix (see :meth:`precompute_cosines`). Computed once per
        threshold (compared in float32, as the matrix is) and shared like the matrix; a
        :meth:`grown` problem extends them with its new rows and columns.

        Args:
            threshold: The cosine at or above which a pair is listed.

        Returns:
            The pairs, or ``None``.

        Example:
            >>> p = Problem.build([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]], [1.0, 0.0],
            ...                   tokens=[1, 1, 1], budget=1)
            >>> p.precompute_cosines()
            True
            >>> pairs = p.near_pairs(0.9)
            >>> pairs.indptr.tolist(), pairs.cols.tolist()
            ([0, 2, 4, 5], [0, 1, 0, 1, 2])
        """
        matrix = self.cosine_matrix
        if matrix is None:
            return None
        tau = np.float32(threshold)
        return self.shared(("near", float(tau)), lambda: NearPairs.of(matrix >= tau))

    def cosine_columns(self, cols: NDArray[np.int64]) -> NDArray[np.float32]:
        """Cosines of every candidate to candidates ``cols``, as a new ``(n, len(cols))`` array.

        Read from :attr:`cosine_matrix` when it exists, computed from the vectors otherwise;
        the values are those of ``vectors @ vectors[cols].T``. Both ways give a C-contiguous
        array, so a row is one contiguous block and sums over the array add in the same order.

        Args:
            cols: Column candidates.

        Returns:
            A writable, C-contiguous float32 array.

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

        Yields ``(start, block)`` where ``block`` holds the cosines of candidates
        ``start, start + 1, ...`` to candidates ``cols``: a new, writable, C-contiguous float32
        array of at most :attr:`similarity_ceiling` bytes (at least one row).

        Args:
            cols: Column candidates.

        Yields:
            The first row's index and the block, in row order.

        Example:
            >>> p = Problem.build(np.eye(3), [1.0, 0.0, 0.0], tokens=[1, 1, 1], budget=1,
            ...                   similarity_ceiling=8)
            >>> [(start, block.tolist()) for start, block in p.cosine_blocks(np.array([0]))]
            [(0, [[1.0], [0.0]]), (2, [[0.0]])]
        """
        cols = np.asarray(cols, dtype=np.int64)
        rows = max(1, self.similarity_ceiling // (4 * max(1, cols.shape[0])))
        matrix = self.cosine_matrix
        right = None if matrix is not None else self.vectors[cols]
        for start in range(0, self.n, rows):
            if right is None:
                assert matrix is not None
                yield start, np.take(matrix[start : start + rows], cols, axis=1)
            else:
                yield start, self.vectors[start : start + rows] @ right.T

    def recency_order(self) -> NDArray[np.int64]:
        """Indices from newest to oldest (ties: later index first)."""
        return np.lexsort((-np.arange(self.n), -self.positions)).astype(np.int64)

    def relevance_order(self) -> NDArray[np.int64]:
        """Indices by decreasing relevance; ties break by earlier position, then index."""
        return np.lexsort((np.arange(self.n), self.positions, -self.relevance)).astype(np.int64)


@dataclass(eq=False)
class _CosineStore:
    """A buffer that holds a cosine matrix in its top-left ``used`` rows and columns.

    Problems grown one from another share it: each one's matrix is a read-only view of its
    first rows and columns, and a problem grown from the newest one writes its new rows and
    columns into the free part, so the old rows are never copied again.
    """

    buffer: NDArray[np.float32]
    used: int


_STORE_LOCK = threading.Lock()
# Old rows computed again with a grown pool's new rows, to check the product's bits.
_CHECK_ROWS = 32


def _extended(
    old: NDArray[np.float32],
    unit: NDArray[np.float32],
    store: _CosineStore | None,
    ceiling: int,
) -> tuple[NDArray[np.float32], _CosineStore] | None:
    """The cosine matrix of ``unit`` from the one of its first rows: only new rows computed.

    The new rows are computed in one product together with the last :data:`_CHECK_ROWS` old
    rows, whose cosines must come out exactly as ``old`` holds them; otherwise (the BLAS took
    another path for this shape, such as a small-matrix kernel) this gives ``None`` and the
    matrix is computed afresh. The new rows and columns go into ``store`` when ``old`` is its
    newest matrix and they fit; otherwise into a new buffer with room for about an eighth more
    rows (within ``ceiling`` and :data:`COSINE_MATRIX_LIMIT`), where ``old`` is copied once.
    """
    n0, n = old.shape[0], unit.shape[0]
    rows = None
    if n > n0:
        lo = max(0, n0 - _CHECK_ROWS)
        rows = unit[lo:] @ unit.T
        if not np.array_equal(rows[: n0 - lo, :n0], old[lo:]):
            return None
        rows = rows[n0 - lo :]
    with _STORE_LOCK:  # a store is extended by one problem only: the others copy
        if store is None or store.used != n0 or store.buffer.shape[0] < n:
            room = max(64, n // 8)
            cap = max(n, min(n + room, COSINE_MATRIX_LIMIT, math.isqrt(ceiling // 4)))
            store = _CosineStore(np.empty((cap, cap), dtype=np.float32), n0)
            store.buffer[:n0, :n0] = old
        store.used = n
    buffer = store.buffer
    if rows is not None:
        buffer[n0:n, :n] = rows
        buffer[:n0, n0:n] = rows[:, :n0].T
    matrix = buffer[:n, :n]
    matrix.flags.writeable = False
    return matrix, store


@dataclass(frozen=True, eq=False)
class NearPairs:
    """The pairs ``(i, j)`` of a cosine matrix at or above a threshold, in row-major order.

    Attributes:
        indptr: ``(n + 1,)`` row ``i``'s pairs are ``cols[indptr[i]:indptr[i + 1]]``.
        rows: ``(nnz,)`` the row of every pair (kept: the kernel and the fill read it).
        cols: ``(nnz,)`` the column of every pair, ascending within a row.
    """

    indptr: NDArray[np.int64]
    rows: NDArray[np.int64]
    cols: NDArray[np.int64]

    @classmethod
    def of(cls, mask: NDArray[np.bool_]) -> NearPairs:
        """The pairs where ``mask`` (an ``(n, n)`` boolean matrix) is true."""
        n = mask.shape[0]
        rows, cols = np.divmod(np.flatnonzero(mask), max(n, 1))
        return cls.from_rows(rows, cols, n)

    @classmethod
    def from_rows(cls, rows: NDArray[np.int64], cols: NDArray[np.int64], n: int) -> NearPairs:
        """Pairs given row-major as their rows and columns."""
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        return cls(indptr, rows.astype(np.int64, copy=False), cols.astype(np.int64, copy=False))


def _grown_pairs(
    pairs: NearPairs, matrix: NDArray[np.float32], n0: int, threshold: float
) -> NearPairs:
    """``pairs`` of the first ``n0`` rows and columns, with the grown matrix's new ones."""
    n = matrix.shape[0]
    tau = np.float32(threshold)
    new_rows, new_cols = np.divmod(np.flatnonzero(matrix[n0:] >= tau), max(n, 1))
    new_rows += n0
    old = new_cols < n0  # (new row, old column): also (old column, new row) by symmetry
    rows = np.concatenate([pairs.rows, new_cols[old], new_rows])
    cols = np.concatenate([pairs.cols, new_rows[old], new_cols])
    order = np.argsort(rows * n + cols, kind="stable")
    return NearPairs.from_rows(rows[order], cols[order], n)
