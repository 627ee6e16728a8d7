"""A built-in, offline lexical embedder: hashed word and bigram term frequencies.

It needs no model, no server and no download, embeds tens of thousands of short texts per second,
and is the package default. Each text becomes a dense vector of ``dim`` hashed features (unigrams
and bigrams of lower-cased word tokens, sublinear term frequency, a hash-derived sign to cancel
collisions on average), scaled to unit length.

Term frequencies alone over-weight common words, so the embedder's profile
(:attr:`HashedTfidfEmbeddings.pacms_profile`) asks the selector to apply inverse document
frequency computed over each selection pool (``idf_reweight`` in
:mod:`langchain_pacms.embeddings.profile`), which keeps the cached per-text vectors independent
of the pool they appear in.

The dense vectors serve similarities between candidates. Relevance to the query comes from the
same features kept sparse over ``2^18`` buckets (:meth:`HashedTfidfEmbeddings.pool_relevance`,
see :mod:`langchain_pacms.embeddings.sparse`): in ``dim`` buckets the few rare words a question
shares with its answer drown in the collisions of a long text's other words.

Example:
    >>> emb = HashedTfidfEmbeddings(dim=256)
    >>> len(emb.embed_query("staging database port"))
    256
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
from langchain_core.embeddings import Embeddings
from numpy.typing import NDArray

from langchain_pacms._lru import LruMemo
from langchain_pacms.embeddings.profile import EmbedderProfile, idf_reweight
from langchain_pacms.embeddings.sparse import (
    RELEVANCE_BUCKETS,
    SparseRow,
    idf_cosines,
    sparse_row,
    text_features,
)

__all__ = ["SPARSE_ROWS_BYTES", "HashedTfidfEmbeddings"]

SPARSE_ROWS_BYTES = 32 * 2**20
"""Default most bytes of sparse rows one embedder keeps in memory (least recently used go
first); a LongMemEval round of about 300 features takes about 5 KB."""

_ROW_OVERHEAD_BYTES = 300  # two array headers, the tuple and the map slot, beyond the data


def _row_bytes(text: str, row: SparseRow) -> int:
    return len(text) + row.buckets.nbytes + row.weights.nbytes + _ROW_OVERHEAD_BYTES


class HashedTfidfEmbeddings(Embeddings):
    """Hashed unigram + bigram term-frequency vectors with pool-level IDF.

    Args:
        dim: Number of hashed features (a power of two).
        bigrams: Include adjacent word pairs as features.
        relevance_buckets: Buckets of the sparse rows that :meth:`pool_relevance` scores
            with (a power of two; default ``2^18``), or ``None`` to offer no pool relevance
            (the selector then takes relevance from the dense vectors).
        rows_bytes: Most bytes of sparse rows kept in memory for :meth:`pool_relevance`
            (default :data:`SPARSE_ROWS_BYTES`; ``0`` keeps none). A selector that builds
            its own embedder gives it a share of its ``memory_ceiling_bytes``.

    Attributes:
        pacms_profile: What :class:`~langchain_pacms.ContextSelector` uses with this embedder
            unless told otherwise. ``similarity_threshold=0.85``: on LongMemEval rounds,
            unrelated ones sit near cosine 0.05 (99th percentile 0.18), a restatement with a
            hedge and light synonym swaps near 0.975 (10th percentile 0.94), the same round
            with a short note added near 0.99, and the rounds of one replayed long document
            (a game record restated move by move) near 0.83-0.89, so
            0.85 (chosen on LongMemEval development questions once relevance came from
            :meth:`pool_relevance`; 0.6 before) joins copies and light edits, not look-alikes.
            ``min_gain=0.01``: once no candidate would add 0.01, the greedy hands the rest of
            the budget to the fill (the distinct fill by default); on LongMemEval development
            questions a round with relevance below 0.01 was no likelier to be evidence than one
            with relevance 0 (a text that shares one common
            word with the query scores about 0.01-0.03 here). ``relevance_feedback=0.6``: on
            the 80 LongMemEval development questions it kept at least as much evidence as
            ``topk`` and as ``pacms`` without it in every cell, and more than ``topk`` on the
            questions with several evidence rounds (those rounds share words with each other
            that the query lacks). ``idf_reweighting=True``: pool IDF, as above.

    Example:
        >>> emb = HashedTfidfEmbeddings()
        >>> vectors = emb.embed_matrix(["a cat", "a dog"])
        >>> vectors.shape
        (2, 4096)
    """

    pacms_profile = EmbedderProfile(
        name="hashed-tfidf",
        similarity_threshold=0.85,
        min_gain=0.01,
        relevance_feedback=0.6,
        idf_reweighting=True,
        tool_loop_similarity_threshold=0.3,
    )

    def __init__(
        self,
        dim: int = 4096,
        *,
        bigrams: bool = True,
        relevance_buckets: int | None = RELEVANCE_BUCKETS,
        rows_bytes: int = SPARSE_ROWS_BYTES,
    ) -> None:
        for name, value in (("dim", dim), ("relevance_buckets", relevance_buckets)):
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < 2
                or value & (value - 1)
            ):
                raise ValueError(f"{name} must be a power of two >= 2, got {value!r}")
        self.dim = dim
        self.bigrams = bigrams
        self.relevance_buckets = relevance_buckets
        self._mask = dim - 1
        self._rows: LruMemo[str, SparseRow] = LruMemo(
            max_bytes=rows_bytes, weigh=_row_bytes
        )  # a copy or a pickle starts it empty

    @property
    def cache_identity(self) -> str:
        """Identity used by embedding caches: changes whenever the vectors would."""
        return f"pacms-hashed-tfidf-v1:dim={self.dim}:bigrams={int(self.bigrams)}"

    def embed_matrix(self, texts: list[str]) -> NDArray[np.float32]:
        """Embed texts into a ``(len(texts), dim)`` float32 array of unit (or zero) rows."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for r, text in enumerate(texts):
            for feat, count in text_features(text, bigrams=self.bigrams).items():
                h = zlib.crc32(feat.encode("utf-8"))
                rows.append(r)
                cols.append(h & self._mask)
                vals.append((1.0 + np.log(count)) * (1.0 if h & 0x80000000 else -1.0))
        if rows:
            np.add.at(out, (np.asarray(rows), np.asarray(cols)), np.asarray(vals, np.float32))
        norms = np.linalg.norm(out, axis=1)
        nz = norms > 0
        out[nz] /= norms[nz, None]
        return out

    def reweight_pool(
        self, vectors: NDArray[np.float32], query: NDArray[np.float32]
    ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """Apply :func:`idf_reweight` to one pool of ``(n, dim)`` vectors and its query.

        Takes the same arguments and returns the same as :func:`idf_reweight`.
        """
        return idf_reweight(vectors, query)

    def _sparse_rows(self, texts: Sequence[str], buckets: int) -> list[SparseRow]:
        """Each text's sparse row, from the in-memory store or computed and stored."""
        rows = self._rows.get_many(texts)
        missing = {t for t, r in zip(texts, rows) if r is None}
        made = {t: sparse_row(t, buckets=buckets, bigrams=self.bigrams) for t in missing}
        self._rows.put_many(made.items())
        return [r if r is not None else made[t] for t, r in zip(texts, rows)]

    def pool_relevance(self, texts: Sequence[str], query: str) -> NDArray[np.float32] | None:
        """Relevance of every text of a pool to ``query``: sparse TF-IDF cosines, pool IDF.

        The same features as the dense vectors (words and word pairs, sublinear tf, signed
        hashes) kept in :attr:`relevance_buckets` buckets, weighted by inverse document
        frequency over ``texts`` (:func:`~langchain_pacms.embeddings.sparse.idf_cosines`).
        The rows of recent texts are kept (up to ``rows_bytes``), so an agent's
        growing history costs one new row per new message. Safe to call from several threads.

        Args:
            texts: The pool, which also gives the document frequencies.
            query: The query.

        Returns:
            ``(len(texts),)`` float32 relevances in ``[0, 1]``, or ``None`` when the embedder
            was built with ``relevance_buckets=None``.

        Example:
            >>> emb = HashedTfidfEmbeddings()
            >>> scores = emb.pool_relevance(["red apples", "green pears"], "red")
            >>> [round(float(r), 3) for r in scores]
            [0.577, 0.0]
        """
        buckets = self.relevance_buckets
        if buckets is None:
            return None
        rows = self._sparse_rows(list(texts), buckets)
        query_row = sparse_row(query, buckets=buckets, bigrams=self.bigrams)
        return idf_cosines(rows, query_row, buckets=buckets).astype(np.float32)

    def __repr__(self) -> str:
        return (
            f"HashedTfidfEmbeddings(dim={self.dim}, bigrams={self.bigrams}, "
            f"relevance_buckets={self.relevance_buckets})"
        )

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents (LangChain ``Embeddings`` interface)."""
        return self.embed_matrix(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        """Embed a query (same space as documents)."""
        return self.embed_matrix([text])[0].tolist()
