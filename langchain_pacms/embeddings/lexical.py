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

Example:
    >>> emb = HashedTfidfEmbeddings(dim=256)
    >>> len(emb.embed_query("staging database port"))
    256
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from itertools import pairwise

import numpy as np
from langchain_core.embeddings import Embeddings
from numpy.typing import NDArray

from langchain_pacms.embeddings.profile import EmbedderProfile, idf_reweight

__all__ = ["HashedTfidfEmbeddings"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class HashedTfidfEmbeddings(Embeddings):
    """Hashed unigram + bigram term-frequency vectors with pool-level IDF.

    Args:
        dim: Number of hashed features (a power of two).
        bigrams: Include adjacent word pairs as features.

    Attributes:
        pacms_profile: What :class:`~langchain_pacms.ContextSelector` uses with this embedder
            unless told otherwise. ``similarity_threshold=0.6``: unrelated texts sit near cosine
            0.05 here and a copy with a short note added near 0.8, so 0.6 (chosen on LongMemEval
            development questions) joins copies and light edits only. ``min_gain=0.01``: once no
            candidate would add 0.01, the greedy hands the rest of the budget to the diversity
            fill; on LongMemEval development questions a round with relevance below 0.01 was no
            likelier to be evidence than one with relevance 0 (a text that shares one common
            word with the query scores about 0.01-0.03 here). ``idf_reweighting=True``: pool
            IDF, as above.

    Example:
        >>> emb = HashedTfidfEmbeddings()
        >>> vectors = emb.embed_matrix(["a cat", "a dog"])
        >>> vectors.shape
        (2, 4096)
    """

    pacms_profile = EmbedderProfile(
        name="hashed-tfidf", similarity_threshold=0.6, min_gain=0.01, idf_reweighting=True
    )

    def __init__(self, dim: int = 4096, *, bigrams: bool = True) -> None:
        if dim < 2 or dim & (dim - 1):
            raise ValueError(f"dim must be a power of two >= 2, got {dim}")
        self.dim = dim
        self.bigrams = bigrams
        self._mask = dim - 1

    @property
    def cache_identity(self) -> str:
        """Identity used by embedding caches: changes whenever the vectors would."""
        return f"pacms-hashed-tfidf-v1:dim={self.dim}:bigrams={int(self.bigrams)}"

    def _features(self, text: str) -> Counter[str]:
        words = _WORD.findall(text.lower())
        feats = Counter(words)
        if self.bigrams:
            feats.update(f"{a} {b}" for a, b in pairwise(words))
        return feats

    def embed_matrix(self, texts: list[str]) -> NDArray[np.float32]:
        """Embed texts into a ``(len(texts), dim)`` float32 array of unit (or zero) rows."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for r, text in enumerate(texts):
            for feat, count in self._features(text).items():
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
        """Apply inverse document frequency over one pool, then re-normalise (:func:`idf_reweight`).

        Args:
            vectors: ``(n, dim)`` term-frequency vectors of the pool.
            query: ``(dim,)`` term-frequency vector of the query.

        Returns:
            New ``(vectors, query)`` arrays; inputs are not modified.
        """
        return idf_reweight(vectors, query)

    def __repr__(self) -> str:
        return f"HashedTfidfEmbeddings(dim={self.dim}, bigrams={self.bigrams})"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents (LangChain ``Embeddings`` interface)."""
        return self.embed_matrix(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        """Embed a query (same space as documents)."""
        return self.embed_matrix([text])[0].tolist()
