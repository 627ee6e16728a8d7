"""Reading a pool on its own cosine scale, for ``pacms`` with ``calibrate=True``.

Settings chosen on the dense scale (unrelated texts near 0) are moved onto each pool's own
scale, for embedders that declare no profile.

Example:
    >>> pool_threshold(0.85, 0.0)
    0.85
"""

from __future__ import annotations

import numpy as np

from langchain_pacms.core.problem import Problem

__all__ = [
    "POOL_MEAN_COSINE_LIMIT",
    "RELEVANCE_TIE_WEIGHT",
    "on_pool_scale",
    "pool_mean_cosine",
    "pool_threshold",
]


POOL_MEAN_COSINE_LIMIT = 0.95
"""Mean pool cosine from which ``pacms`` with ``calibrate=True`` keeps relevance order."""

RELEVANCE_TIE_WEIGHT = 1e-3
"""Weight of raw relevance in :func:`on_pool_scale`, keeping low candidates in raw order."""


def pool_mean_cosine(problem: Problem) -> float:
    """The mean cosine over all pairs of distinct candidates (0 for fewer than two).

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

    Returns ``m + threshold * (1 - m)`` with ``m = max(0, mean_cosine)``.

    Example:
        >>> pool_threshold(0.85, 0.0), round(pool_threshold(0.85, 0.8), 3)
        (0.85, 0.97)
    """
    shift = max(float(mean_cosine), 0.0)
    return shift + float(threshold) * (1.0 - shift)


def on_pool_scale(problem: Problem) -> Problem:
    """The problem with relevance read on the pool's own scale, built once per pool.

    ``rel' = (max(0, rel - m) + w * rel) / (1 - m + w)``, ``m`` the pool's mean relevance
    (at most 0.999) and ``w`` :data:`RELEVANCE_TIE_WEIGHT`; the order is kept.

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
