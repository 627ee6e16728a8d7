"""Reading a pool on its own cosine scale, for ``pacms`` with ``calibrate=True``."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.problem import Problem

__all__ = [
    "POOL_MEAN_COSINE_LIMIT",
    "RELEVANCE_TIE_WEIGHT",
    "on_pool_scale",
    "pool_mean_cosine",
    "pool_threshold",
]


POOL_MEAN_COSINE_LIMIT = 0.95  # mean pool cosine from which calibrated pacms keeps relevance order
RELEVANCE_TIE_WEIGHT = 1e-3  # raw relevance in on_pool_scale: low candidates keep their order


def pool_mean_cosine(problem: Problem) -> float:
    """The mean cosine over all pairs of distinct candidates (0 for fewer than two)."""
    n = problem.n
    if n < 2:
        return 0.0
    vectors = problem.vectors.astype(np.float64)
    total = vectors.sum(axis=0)
    pairs = float(total @ total) - float(np.einsum("ij,ij->", vectors, vectors))
    return pairs / (n * (n - 1))


def pool_threshold(threshold: float, mean_cosine: float) -> float:
    """A dense-scale threshold read on a pool's scale: ``m + threshold * (1 - m)``, ``m >= 0``."""
    shift = max(float(mean_cosine), 0.0)
    return shift + float(threshold) * (1.0 - shift)


def on_pool_scale(problem: Problem) -> Problem:
    """Relevance ``(max(0, r - m) + w * r) / (1 - m + w)``, ``m`` its mean, built once per pool.

    Example:
        >>> p = Problem.build(np.eye(3), [1.0, 0.0, 0.0], tokens=[1, 1, 1], budget=1,
        ...                   relevance=[0.9, 0.8, 0.7])
        >>> [round(float(r), 3) for r in on_pool_scale(p).relevance]
        [0.502, 0.004, 0.003]
    """

    def scaled() -> NDArray[np.float64]:
        rel = problem.relevance.astype(np.float64)
        shift = min(max(float(rel.mean()), 0.0), 0.999)
        return (np.maximum(0.0, rel - shift) + RELEVANCE_TIE_WEIGHT * rel) / (
            1.0 - shift + RELEVANCE_TIE_WEIGHT
        )

    return problem.with_shared_relevance(("pool_scale",), scaled)
