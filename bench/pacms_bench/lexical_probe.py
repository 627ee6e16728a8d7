"""Where the built-in lexical embedder loses relevance: sparse hashed TF-IDF references.

The built-in embedder (:class:`~langchain_pacms.embeddings.HashedTfidfEmbeddings`) folds word
unigrams and bigrams into 4,096 signed buckets for its dense vectors, and scores relevance from
the same features over 2^18 buckets (:mod:`langchain_pacms.embeddings.sparse`). This module is
an independent implementation that ranks the same texts by exact sparse hashed TF-IDF cosines
under several recipes (bucket count, token pattern, signs, bigrams, where the inverse document
frequency is counted) and measures the top-k evidence recall each gives on LongMemEval pools
without restatements, next to the selector's own relevance. It is a reference for the
evaluation, not a selector default.

Every recipe weighs a feature by sublinear term frequency (``1 + ln tf``) times the smooth
inverse document frequency over the pool (``ln((1 + n) / (1 + df)) + 1``), sums features that
share a bucket (with a hash-derived sign when ``signed``), and scores a text by the cosine of its
bucket vector with the query's, clipped at zero.

Example:
    >>> texts = ["the cat sat on the mat", "dogs bark at night", "a cat and a dog"]
    >>> rel = lexical_relevance(texts, "where did the cat sit", RECIPES["reference"])
    >>> int(rel.argmax()), bool(rel[1] == 0.0)
    (0, True)
"""

from __future__ import annotations

import functools
import re
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

import numpy as np
from numpy.typing import NDArray

__all__ = ["RECIPES", "LexicalRecipe", "lexical_relevance", "probe_topk", "topk_recall"]

_PACKAGE_WORDS = r"[^\W_]+"  # the built-in embedder's tokens
_WORDS_2PLUS = r"(?u)\b\w\w+\b"  # words of two or more characters


@dataclass(frozen=True)
class LexicalRecipe:
    """One sparse hashed TF-IDF recipe.

    Attributes:
        buckets: Number of hash buckets (a power of two).
        pattern: Regular expression whose matches in the lower-cased text are the words.
        signed: Give each feature a hash-derived sign (collisions cancel on average).
        bigrams: Add adjacent word pairs as features.
        idf_scope: ``"bucket"`` counts document frequency per bucket (what the built-in
            embedder's pool reweighting does); ``"feature"`` per exact feature, before folding.
    """

    buckets: int = 1 << 18
    pattern: str = _PACKAGE_WORDS
    signed: bool = True
    bigrams: bool = True
    idf_scope: Literal["bucket", "feature"] = "bucket"

    def __post_init__(self) -> None:
        if self.buckets < 2 or self.buckets & (self.buckets - 1):
            raise ValueError(f"buckets must be a power of two >= 2, got {self.buckets}")
        if self.idf_scope not in ("bucket", "feature"):
            raise ValueError(f"idf_scope must be 'bucket' or 'feature', got {self.idf_scope!r}")


RECIPES: Mapping[str, LexicalRecipe] = {
    # the built-in features folded into the dense vectors' 4,096 buckets: the selector's
    # relevance with HashedTfidfEmbeddings(relevance_buckets=None)
    "builtin-4096": LexicalRecipe(buckets=4096),
    "builtin-4096, feature idf": LexicalRecipe(buckets=4096, idf_scope="feature"),
    "16384 buckets": LexicalRecipe(buckets=1 << 14),
    # the built-in features over 2^18 buckets: the selector's relevance by default
    "2^18 buckets": LexicalRecipe(),
    "2^18, feature idf": LexicalRecipe(idf_scope="feature"),
    "2^18, unigrams": LexicalRecipe(bigrams=False),
    # the plain reference: 2+ character words, no signs, 2^18 buckets
    "reference": LexicalRecipe(pattern=_WORDS_2PLUS, signed=False),
}
"""The recipes :func:`probe_topk` compares, by name."""


def _features(text: str, words: re.Pattern[str], bigrams: bool) -> Counter[str]:
    found = words.findall(text.lower())
    feats = Counter(found)
    if bigrams:
        feats.update(f"{a} {b}" for a, b in pairwise(found))
    return feats


def _entries(
    texts: Sequence[str], recipe: LexicalRecipe
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """``(row, 32-bit feature hash, 1 + ln tf)`` for every distinct feature of every text."""
    words = re.compile(recipe.pattern)
    rows: list[int] = []
    keys: list[int] = []
    tfs: list[int] = []
    for r, text in enumerate(texts):
        for feat, count in _features(text, words, recipe.bigrams).items():
            rows.append(r)
            keys.append(zlib.crc32(feat.encode("utf-8")))
            tfs.append(count)
    return (
        np.asarray(rows, dtype=np.int64),
        np.asarray(keys, dtype=np.int64),
        1.0 + np.log(np.asarray(tfs, dtype=np.float64)),
    )


def _bucket_vectors(
    rows: NDArray[np.int64],
    keys: NDArray[np.int64],
    weights: NDArray[np.float64],
    recipe: LexicalRecipe,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Sum signed weights per ``(row, bucket)``: the sparse vectors as sorted triples."""
    if recipe.signed:
        weights = np.where(keys & 0x80000000, weights, -weights)
    buckets = keys & (recipe.buckets - 1)
    cells, inverse = np.unique(rows * recipe.buckets + buckets, return_inverse=True)
    values = np.bincount(inverse, weights=weights, minlength=len(cells)).astype(np.float64)
    cells = cells.astype(np.int64)
    return cells // recipe.buckets, cells % recipe.buckets, values


def lexical_relevance(
    texts: Sequence[str], query: str, recipe: LexicalRecipe
) -> NDArray[np.float64]:
    """Cosine of every text with the query under one sparse recipe, clipped at zero.

    Args:
        texts: The pool, whose texts also give the inverse document frequencies.
        query: The query text (weighted with the pool's frequencies).
        recipe: The recipe.

    Returns:
        ``(len(texts),)`` relevances in ``[0, 1]``; zero for a text or query with no words.

    Example:
        >>> rel = lexical_relevance(["red apples", "green pears"], "red", RECIPES["reference"])
        >>> rel.round(3).tolist()
        [0.577, 0.0]
    """
    n = len(texts)
    rows, keys, tf = _entries(texts, recipe)
    _, qkeys, qtf = _entries([query], recipe)
    scope = (lambda k: k) if recipe.idf_scope == "feature" else (lambda k: k & (recipe.buckets - 1))
    doc_ids = scope(keys)
    # document frequency: distinct texts per feature (or bucket) of the pool
    distinct = np.unique(rows * (1 << 32) + doc_ids) % (1 << 32)
    ids, df = np.unique(distinct, return_counts=True)

    def idf(of: NDArray[np.int64]) -> NDArray[np.float64]:
        at = np.clip(np.searchsorted(ids, of), 0, max(len(ids) - 1, 0))
        counts = np.where(ids[at] == of, df[at], 0) if len(ids) else np.zeros(len(of))
        return np.log((1.0 + n) / (1.0 + counts)) + 1.0

    d_rows, d_buckets, d_values = _bucket_vectors(rows, keys, tf * idf(doc_ids), recipe)
    _, q_buckets, q_values = _bucket_vectors(
        np.zeros(len(qkeys), dtype=np.int64), qkeys, qtf * idf(scope(qkeys)), recipe
    )
    out = np.zeros(n)
    q_norm = float(np.linalg.norm(q_values))
    if not n or q_norm == 0.0 or not len(d_rows):
        return out
    at = np.clip(np.searchsorted(q_buckets, d_buckets), 0, len(q_buckets) - 1)
    matched = np.where(q_buckets[at] == d_buckets, q_values[at], 0.0)
    dots = np.bincount(d_rows, weights=d_values * matched, minlength=n)
    norms = np.sqrt(np.bincount(d_rows, weights=d_values**2, minlength=n))
    np.divide(dots, norms * q_norm, out=out, where=norms > 0)
    return np.maximum(out, 0.0)


def topk_recall(
    relevance: NDArray[np.floating], tokens: Sequence[int], budget: int, evidence: set[int]
) -> float:
    """Evidence recall of the package's ``topk`` walk: most relevant first, all that fits.

    Ties break by position, as the ``topk`` strategy breaks them.

    Example:
        >>> topk_recall(np.array([0.9, 0.1, 0.5]), [5, 5, 5], 10, {1})
        0.0
    """
    order = np.lexsort((np.arange(len(relevance)), -np.asarray(relevance, dtype=np.float64)))
    left, kept = budget, set()
    for i in order.tolist():
        if tokens[i] <= left:
            kept.add(i)
            left -= tokens[i]
    return len(kept & evidence) / len(evidence)


def _ranked(texts: Sequence[str], query: str, *, recipe: LexicalRecipe) -> NDArray[np.float64]:
    return lexical_relevance(texts, query, recipe)


def probe_topk(
    pools: Sequence[tuple[Sequence[str], str, Sequence[int], set[int]]],
    budgets: Sequence[float],
    recipes: Mapping[str, LexicalRecipe],
    *,
    builtin: Callable[[Sequence[str], str], NDArray[np.floating]] | None = None,
) -> dict[str, list[float]]:
    """Mean top-k evidence recall of every recipe at every budget.

    Args:
        pools: ``(texts, query, tokens, evidence indices)`` per question.
        budgets: Budgets as fractions of each pool's tokens (``floor``, at least 1).
        recipes: The recipes to rank with, by name.
        builtin: The selector's own relevance (texts, query) -> scores, reported first as
            ``"selector"`` when given.

    Returns:
        Mean recall per name, one value per budget.
    """
    rankers: dict[str, Callable[[Sequence[str], str], NDArray[np.floating]]] = {}
    if builtin is not None:
        rankers["selector"] = builtin
    for name, recipe in recipes.items():
        rankers[name] = functools.partial(_ranked, recipe=recipe)
    sums = {name: [0.0] * len(budgets) for name in rankers}
    for texts, query, tokens, evidence in pools:
        total = int(sum(tokens))
        caps = [max(1, int(total * b)) for b in budgets]
        for name, rank in rankers.items():
            relevance = rank(texts, query)
            for j, cap in enumerate(caps):
                sums[name][j] += topk_recall(relevance, tokens, cap, evidence)
    return {name: [v / max(len(pools), 1) for v in row] for name, row in sums.items()}
