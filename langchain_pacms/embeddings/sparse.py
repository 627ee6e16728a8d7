"""Exact query relevance from sparse hashed term rows, with inverse document frequency per pool."""

from __future__ import annotations

import re
import threading
import zlib
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "RELEVANCE_BUCKETS",
    "PoolRelevance",
    "SparseRow",
    "idf_cosines",
    "sparse_row",
    "text_features",
]

RELEVANCE_BUCKETS = 1 << 18  # enough buckets that a pool's distinct features rarely share one
WORDS = re.compile(r"[^\W_]+", re.UNICODE)  # runs of letters and digits (of lower-cased text)


@runtime_checkable
class PoolRelevance(Protocol):
    """An embedder that scores a whole pool against a query itself (used as relevance)."""

    def pool_relevance(self, texts: Sequence[str], query: str) -> NDArray[np.float32] | None:
        """Relevance of each text to ``query`` in ``[0, 1]``, or ``None`` to use the vectors."""
        ...


class SparseRow(NamedTuple):
    """One text's hashed term frequencies: sorted distinct buckets and their summed weights."""

    buckets: NDArray[np.int64]
    weights: NDArray[np.float64]


def text_features(text: str, *, bigrams: bool = True) -> Counter[str]:
    """Lower-cased words (and adjacent word pairs) of ``text`` with their counts.

    Example:
        >>> sorted(text_features("Red red apples").items())
        [('apples', 1), ('red', 2), ('red apples', 1), ('red red', 1)]
    """
    words = WORDS.findall(text.lower())
    feats = Counter(words)
    if bigrams:
        feats.update(f"{a} {b}" for a, b in pairwise(words))
    return feats


def sparse_row(text: str, *, buckets: int = RELEVANCE_BUCKETS, bigrams: bool = True) -> SparseRow:
    """One text's row: ``1 + ln tf`` per CRC-32 bucket (low bits), signed by the top bit."""
    feats = text_features(text, bigrams=bigrams)
    if not feats:
        return SparseRow(np.zeros(0, dtype=np.int64), np.zeros(0))
    hashes = np.fromiter(
        (zlib.crc32(f.encode("utf-8")) for f in feats), dtype=np.int64, count=len(feats)
    )
    tf = 1.0 + np.log(np.fromiter(feats.values(), dtype=np.float64, count=len(feats)))
    signed = np.where(hashes & 0x80000000, tf, -tf)
    cells, inverse = np.unique(hashes & (buckets - 1), return_inverse=True)
    sums = np.bincount(inverse, weights=signed, minlength=len(cells)).astype(np.float64)
    return SparseRow(cells.astype(np.int64), sums)


_SCRATCH = threading.local()


def _scratch(buckets: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """This thread's all-zero count and value tables over ``buckets`` (left all-zero after use)."""
    tables: dict[int, tuple[NDArray[np.int64], NDArray[np.float64]]] = getattr(
        _SCRATCH, "tables", {}
    )
    _SCRATCH.tables = tables
    if buckets not in tables:
        tables[buckets] = (np.zeros(buckets, dtype=np.int64), np.zeros(buckets))
    return tables[buckets]


def idf_cosines(
    rows: Sequence[SparseRow], query: SparseRow, *, buckets: int = RELEVANCE_BUCKETS
) -> NDArray[np.float64]:
    """Cosine of each row with the query, IDF ``ln((1 + n) / (1 + df)) + 1`` over ``rows``, >= 0."""
    n = len(rows)
    out = np.zeros(n)
    if not n or not len(query.buckets):
        return out
    sizes = np.fromiter((len(r.buckets) for r in rows), dtype=np.int64, count=n)
    if not sizes.sum():
        return out
    cols = np.concatenate([r.buckets for r in rows])
    counts, lookup = _scratch(buckets)
    try:
        np.add.at(counts, cols, 1)  # document frequency (a row holds a bucket once)
        df, q_df = counts[cols], counts[query.buckets]
    finally:
        counts[cols] = 0
    by_df = np.log((1.0 + n) / (1.0 + np.arange(n + 1))) + 1.0  # idf for each possible df
    values = np.concatenate([r.weights for r in rows]) * by_df[df]
    q_values = query.weights * by_df[q_df]
    q_norm = float(np.linalg.norm(q_values))
    try:
        lookup[query.buckets] = q_values
        matched = lookup[cols]
    finally:
        lookup[query.buckets] = 0.0
    starts = np.cumsum(sizes) - sizes
    full = sizes > 0
    dots = np.zeros(n)
    norms = np.zeros(n)
    # reduceat sums each row's contiguous run of entries (rows without entries stay 0)
    dots[full] = np.add.reduceat(values * matched, starts[full])
    norms[full] = np.sqrt(np.add.reduceat(values * values, starts[full]))
    if q_norm > 0:
        np.divide(dots, norms * q_norm, out=out, where=norms > 0)
    return np.maximum(out, 0.0)
