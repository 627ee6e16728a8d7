"""The built-in offline lexical embedder (the package default): hashed word and bigram counts."""

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

SPARSE_ROWS_BYTES = 32 * 2**20  # default most bytes of sparse rows one embedder keeps (LRU)
_ROW_OVERHEAD_BYTES = 300  # two array headers, the tuple and the map slot, beyond the data


def _row_bytes(text: str, row: SparseRow) -> int:
    return len(text) + row.buckets.nbytes + row.weights.nbytes + _ROW_OVERHEAD_BYTES


class HashedTfidfEmbeddings(Embeddings):
    """Hashed unigram + bigram term-frequency vectors with pool-level IDF.

    Each text becomes ``dim`` signed hashed features with sublinear counts, of unit length.

    Args:
        dim: Number of hashed features (a power of two).
        bigrams: Include adjacent word pairs as features.
        relevance_buckets: Sparse-row buckets of :meth:`pool_relevance` (a power of two), or
            ``None`` to offer no pool relevance.
        rows_bytes: Most bytes of sparse rows kept for :meth:`pool_relevance` (0: none).

    Attributes:
        pacms_profile: The profile the selector uses with it unless told otherwise.

    Example:
        >>> HashedTfidfEmbeddings().embed_matrix(["a cat", "a dog"]).shape
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
        """Apply :func:`idf_reweight` to one pool of ``(n, dim)`` vectors and its query."""
        return idf_reweight(vectors, query)

    def _sparse_rows(self, texts: Sequence[str], buckets: int) -> list[SparseRow]:
        """Each text's sparse row, from the in-memory store or computed and stored."""
        rows = self._rows.get_many(texts)
        missing = {t for t, r in zip(texts, rows) if r is None}
        made = {t: sparse_row(t, buckets=buckets, bigrams=self.bigrams) for t in missing}
        self._rows.put_many(made.items())
        return [r if r is not None else made[t] for t, r in zip(texts, rows)]

    def pool_relevance(self, texts: Sequence[str], query: str) -> NDArray[np.float32] | None:
        """Relevance of every text of a pool to ``query``: TF-IDF cosines, IDF over the pool.

        Args:
            texts: The pool, which also gives the document frequencies.
            query: The query.

        Returns:
            ``(len(texts),)`` float32 in ``[0, 1]``; ``None`` with ``relevance_buckets=None``.

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
