"""A pool's vectors: embedded under a deadline, checked, reweighted, reused from the last pool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from langchain_core.embeddings import Embeddings
from numpy.typing import NDArray

from langchain_pacms._steps import in_step_thread
from langchain_pacms._timeout import call_with_timeout, timeout_error
from langchain_pacms.blas import blas_threads as limit_blas_threads
from langchain_pacms.core import Problem
from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.embeddings.profile import EmbedderProfile, idf_reweight
from langchain_pacms.embeddings.sparse import WORDS, PoolRelevance
from langchain_pacms.selector.selection import Candidate, EmbeddingError

__all__ = [
    "Lent",
    "Pool",
    "PoolEmbedder",
    "checked_vectors",
    "has_words",
    "lift",
    "pool_flags",
    "pool_problem",
    "reused_problem",
]


@dataclass(frozen=True)
class Pool:
    """One pool's vectors (checked and reweighted), and its problem once built.

    Sparse pools keep ``raw`` rows on ``features`` for the next pool; a dense pool grown from
    the last one keeps that pool's problem as ``base``.
    """

    texts: tuple[str, ...]
    query: str
    embeddings: Embeddings | None  # the model that embedded them
    vectors: NDArray[np.float32]
    query_vec: NDArray[np.float32]
    problem: Problem | None = None
    raw: NDArray[np.float32] | None = None
    features: NDArray[np.int64] | None = None
    dim: int = 0  # the embedder's dimension
    relevance: NDArray[np.float32] | None = None
    base: Problem | None = None  # the last pool's problem, when this pool is it plus new rows


Lent = tuple[Pool, NDArray[np.int64]]
"""The last pool, and each text's row there (or -1)."""


def has_words(query: str) -> bool:
    """Whether ``query`` has a word: a run of letters or digits, as the built-in embedder reads."""
    return WORDS.search(query) is not None


def checked_vectors(
    vectors: NDArray[np.float32], query_vec: NDArray[np.float32], *, others: bool = False
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """``(vectors, query_vec)``, or :class:`EmbeddingError` if unscorable (``others``: may be 0)."""
    if vectors.size and vectors.shape[1] != query_vec.shape[0]:
        raise EmbeddingError("query and document embeddings differ in dimension")
    bad = ~np.isfinite(vectors).all(axis=1) if vectors.size else np.zeros(0, dtype=bool)
    if bad.any():
        raise EmbeddingError(
            f"{int(bad.sum())} document embedding(s) hold NaN or inf "
            f"(first: row {int(bad.argmax())})"
        )
    if not np.isfinite(query_vec).all():
        raise EmbeddingError("the query embedding holds NaN or inf")
    if not query_vec.any():
        raise EmbeddingError("the query embedding is all zero", zero_query=True)
    if vectors.size and not others and not vectors.any():
        raise EmbeddingError(
            f"all {vectors.shape[0]} document embeddings are all zero", zero_documents=True
        )
    return vectors, query_vec


def _used_features(
    vectors: NDArray[np.float32], query_vec: NDArray[np.float32]
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64] | None]:
    """The vectors and query on the features they use, and those (``None``: most, kept all)."""
    if not vectors.size or vectors.shape[1] != query_vec.shape[0]:
        return vectors, query_vec, None
    used = vectors.any(axis=0)
    used |= query_vec != 0  # NaN and inf are not 0: checks after this still see them
    if 2 * int(used.sum()) > used.size:
        return vectors, query_vec, None
    return np.compress(used, vectors, axis=1), query_vec[used], np.flatnonzero(used)


def _grown(
    last: Pool, where: NDArray[np.int64], fresh: NDArray[np.float32], query_vec: NDArray[np.float32]
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64] | None]:
    """:func:`_used_features` of ``last``'s rows ``where`` (``-1``: the next ``fresh`` row)."""
    assert last.raw is not None and last.features is not None
    dim = last.dim
    if query_vec.shape[0] != dim or (fresh.size and fresh.shape[1] != dim):
        raise EmbeddingError("query and document embeddings differ in dimension")
    old = where >= 0
    old_rows = last.raw[where[old]]
    used = np.zeros(dim, dtype=bool)
    used[last.features[old_rows.any(axis=0)]] = True
    if fresh.size:
        used |= fresh.any(axis=0)
    used |= query_vec != 0
    sparse = 2 * int(used.sum()) <= dim  # still sparse: build only the used columns
    cols = np.flatnonzero(used) if sparse else np.arange(dim)
    at = np.searchsorted(cols, last.features)  # every kept feature of the last pool ...
    known = at < cols.shape[0]
    known[known] = cols[at[known]] == last.features[known]  # ... that this pool uses
    full = np.zeros((where.shape[0], cols.shape[0]), dtype=np.float32)
    block = np.zeros((old_rows.shape[0], cols.shape[0]), dtype=np.float32)
    block[:, at[known]] = old_rows[:, known]
    full[old] = block
    if fresh.size:
        full[~old] = fresh[:, cols]
    return full, query_vec[cols], cols if sparse else None


def pool_flags(cands: Sequence[Candidate]) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """The mandatory mask and the positions of a normalised pool."""
    return (
        np.array([c.mandatory for c in cands], dtype=bool),
        np.array([int(c.position or 0) for c in cands], dtype=np.int64),
    )


def pool_problem(
    cands: Sequence[Candidate], tokens: NDArray[np.int64], budget: int, pool: Pool
) -> Problem:
    """The :class:`~langchain_pacms.core.Problem` of a normalised pool, built afresh."""
    mandatory, positions = pool_flags(cands)
    return Problem.build(
        pool.vectors,
        pool.query_vec,
        tokens=tokens,
        budget=budget,
        mandatory=mandatory,
        positions=positions,
        relevance=pool.relevance,
    )


def reused_problem(
    cands: Sequence[Candidate], tokens: NDArray[np.int64], budget: int, pool: Pool
) -> Problem:
    """The pool's problem under these costs, reusing or growing the last pool's (same picks)."""
    mandatory, positions = pool_flags(cands)
    if pool.problem is not None:
        return pool.problem.with_costs(
            tokens=tokens, budget=budget, mandatory=mandatory, positions=positions
        )
    if pool.base is not None:
        return pool.base.grown(
            pool.vectors[pool.base.n :],
            pool.query_vec,
            tokens=tokens,
            budget=budget,
            mandatory=mandatory,
            positions=positions,
            relevance=pool.relevance,
        )
    return pool_problem(cands, tokens, budget, pool)


def lift(problem: Problem, lifted: NDArray[np.bool_]) -> Problem:
    """``problem`` with the ``lifted`` candidates raised to its highest relevance (memoised)."""
    return problem.with_shared_relevance(
        ("relevant_ids", lifted.tobytes()),
        lambda: np.where(lifted, problem.relevance.max(), problem.relevance),
    )


class PoolEmbedder:
    """Embeds one selector's pools: under a deadline, reusing the rows of the last pool."""

    def __init__(
        self,
        embeddings: CachedEmbeddings,
        profile: EmbedderProfile,
        scorer: PoolRelevance | None = None,
        *,
        timeout: float | None = None,
        blas_threads: int | None = None,
    ) -> None:
        self.embeddings = embeddings
        self.profile = profile
        self.scorer = scorer
        self.timeout = timeout
        self.blas_threads = blas_threads

    def reweight(
        self, vectors: NDArray[np.float32], query: NDArray[np.float32]
    ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """The profile's reweighting of one pool (IDF over the pool, or none)."""
        if self.profile.idf_reweighting and vectors.size:
            with limit_blas_threads(self.blas_threads):
                return idf_reweight(vectors, query)
        return vectors, query

    def relevance(self, texts: Sequence[str], query: str) -> NDArray[np.float32] | None:
        """The scorer's relevance of a pool to the query (``None``: no scorer); checked."""
        scores = None if self.scorer is None else self.scorer.pool_relevance(texts, query)
        if scores is None:
            return None
        scores = np.asarray(scores, dtype=np.float32)
        if scores.shape != (len(texts),) or not np.isfinite(scores).all():
            raise EmbeddingError(
                f"{type(self.scorer).__name__}.pool_relevance gave {scores.shape} values for "
                f"{len(texts)} texts, or non-finite ones"
            )
        return scores

    def same(self, last: Pool | None, texts: Sequence[str], query: str) -> Pool | None:
        """``last`` when ``texts`` and ``query`` are exactly its own (embedded by this cache)."""
        if (
            last is None
            or last.embeddings is not self.embeddings
            or last.query != query
            or len(last.texts) != len(texts)
            or last.texts != tuple(texts)
        ):
            return None
        return last

    def embed(self, texts: list[str], query: str, last: Pool | None) -> Pool:
        """The pool of ``texts`` under ``query``, embedded within :attr:`timeout`."""
        deadline = self._deadline()
        if self.timeout is None or self._cannot_stall:
            return self._embed(texts, query, last, deadline)
        return call_with_timeout(
            lambda: self._embed(texts, query, last, deadline), self.timeout, what="embedding"
        )

    async def aembed(self, texts: list[str], query: str, last: Pool | None) -> Pool:
        """Async twin of :meth:`embed` (embeds with the model's async API)."""
        if self.timeout is None:
            return await self._aembed(texts, query, last, None)
        try:
            return await asyncio.wait_for(
                self._aembed(texts, query, last, self._deadline()), self.timeout
            )
        except asyncio.TimeoutError:  # empty message: say which limit passed
            raise timeout_error("embedding", self.timeout) from None

    @property
    def lexical(self) -> bool:
        """Whether the model is the built-in lexical one (a text without words: all zero)."""
        return isinstance(self.embeddings.embeddings, HashedTfidfEmbeddings)

    @property
    def _cannot_stall(self) -> bool:
        """Whether embedding is the built-in model's in-process work (no thread to time out)."""
        return self.embeddings.store is None and self.lexical

    def _deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        """Seconds left until ``deadline`` (``time.monotonic()``), or ``None`` without one."""
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _embed(
        self, texts: list[str], query: str, last: Pool | None, deadline: float | None
    ) -> Pool:
        lent, todo = self._rows_from(last, texts)
        fresh = self.embeddings.embed_matrix(todo, timeout=self._left(deadline))
        query_vec = self.embeddings.embed_matrix(
            [query], kind="query", timeout=self._left(deadline)
        )[0]
        return self._pooled(texts, query, lent, fresh, query_vec)

    async def _aembed(
        self, texts: list[str], query: str, last: Pool | None, deadline: float | None
    ) -> Pool:
        # the pool's own computing runs on the step threads; only the embedding is awaited here
        lent, todo = await in_step_thread(self._rows_from, last, texts, items=len(texts))
        fresh = await self.embeddings.aembed_matrix(todo, timeout=self._left(deadline))
        query_vec = (
            await self.embeddings.aembed_matrix([query], kind="query", timeout=self._left(deadline))
        )[0]
        return await in_step_thread(
            self._pooled, texts, query, lent, fresh, query_vec, items=len(texts)
        )

    def _rows_from(self, last: Pool | None, texts: list[str]) -> tuple[Lent | None, list[str]]:
        """What the last pool lends this one, and the texts to embed.

        Sparse: the rows of shared texts. Dense: the last rows, when this pool starts with them.
        """
        if last is None or last.embeddings is not self.embeddings:
            return None, texts
        if last.raw is None:
            size = len(last.texts)
            if (
                last.problem is None
                or len(texts) < size
                or self.profile.idf_reweighting
                or self.scorer is not None
                or tuple(texts[:size]) != last.texts
            ):
                return None, texts
            return (last, np.arange(size)), texts[size:]
        index = {t: i for i, t in enumerate(last.texts)}
        where = np.array([index.get(t, -1) for t in texts], dtype=np.int64)
        return (last, where), [t for t, w in zip(texts, where.tolist()) if w < 0]

    def _pooled(
        self,
        texts: list[str],
        query: str,
        lent: Lent | None,
        fresh: NDArray[np.float32],
        query_vec: NDArray[np.float32],
    ) -> Pool:
        """The pool's vectors: compacted, checked and reweighted (the sync and async path's)."""
        if lent is not None and lent[0].raw is None:
            return self._appended(texts, query, lent[0], fresh, query_vec)
        if lent is None:
            vectors, q, features = _used_features(fresh, query_vec)
            dim = int(fresh.shape[1]) if fresh.ndim == 2 else 0
        else:
            vectors, q, features = _grown(*lent, fresh, query_vec)
            dim = lent[0].dim
        checked, q_checked = checked_vectors(vectors, q)
        reweighted, q_reweighted = self.reweight(checked, q_checked)
        return Pool(
            tuple(texts),
            query,
            self.embeddings,
            reweighted,
            q_reweighted,
            raw=None if features is None else vectors,
            features=features,
            dim=dim,
            relevance=self.relevance(texts, query),
        )

    def _appended(
        self,
        texts: list[str],
        query: str,
        last: Pool,
        fresh: NDArray[np.float32],
        query_vec: NDArray[np.float32],
    ) -> Pool:
        """A dense pool that is ``last`` plus the texts embedded as ``fresh`` (checked here)."""
        dim = last.vectors.shape[1]
        if fresh.size:
            fresh, query_vec = checked_vectors(fresh, query_vec, others=True)
            vectors = np.concatenate([last.vectors, fresh])
        else:  # the same texts under another query: its dimension is checked on one old row
            checked_vectors(last.vectors[:1], query_vec, others=True)
            vectors = last.vectors
        return Pool(
            tuple(texts), query, self.embeddings, vectors, query_vec, dim=dim, base=last.problem
        )
