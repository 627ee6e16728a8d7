"""The PACMS objective: relevance-weighted facility-location coverage.

For candidates with unit embeddings ``e_i`` and query ``e_q``::

    rel(i)  = max(0, cos(e_i, e_q))
    w_ij    = t(i) * max(0, cos(e_i, e_j))        t(i) = rel(i) / density(i)
    F(S)    = sum_i max_{j in S} w_ij
    G(S)    = lam * sum_{j in S} rel(j) + (1 - lam) * F(S)

``density(i)`` is 1 (the published objective) unless a near-duplicate threshold is set: then it is
the number of candidates whose cosine with ``i`` reaches the threshold, so that a cluster of ``k``
near-copies carries the weight of one item instead of ``k``. ``G`` is monotone submodular for any
``lam`` in ``[0, 1]`` and any positive target weights, so the greedy guarantee holds throughout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.problem import Problem

__all__ = ["CoverageObjective"]

# Rows per block when scoring every candidate, so temporaries stay small at large n.
_BLOCK = 512


class CoverageObjective:
    """Marginal gains and values of ``G`` over one :class:`Problem`.

    The ``(n, n)`` weight matrix is stored transposed (row ``j`` holds ``w_ij`` for all ``i``) so
    that evaluating one candidate reads one contiguous row.

    Args:
        problem: The selection instance.
        relevance_weight: ``lam`` in ``[0, 1]``; 0 is the published objective.
        density_threshold: Cosine at or above which two candidates count as near-duplicates for
            the density normalisation; ``None`` disables it.

    Example:
        >>> import numpy as np
        >>> p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=2)
        >>> CoverageObjective(p).value([0])
        1.0
    """

    def __init__(
        self,
        problem: Problem,
        *,
        relevance_weight: float = 0.0,
        density_threshold: float | None = None,
    ) -> None:
        if not 0.0 <= relevance_weight <= 1.0:
            raise ValueError(f"relevance_weight must be in [0, 1], got {relevance_weight}")
        if density_threshold is not None and not 0.0 < density_threshold <= 1.0:
            raise ValueError(f"density_threshold must be in (0, 1], got {density_threshold}")
        rel = problem.relevance.astype(np.float32)
        weights = problem.vectors @ problem.vectors.T
        np.maximum(weights, 0.0, out=weights)
        target = rel
        if density_threshold is not None:
            density = np.count_nonzero(weights >= np.float32(density_threshold), axis=1)
            target = rel / np.maximum(density, 1).astype(np.float32)
        weights *= target[None, :]
        self.weights_t: NDArray[np.float32] = weights
        self.coverage_scale = np.float32(1.0 - relevance_weight)
        self.modular: NDArray[np.float64] = relevance_weight * rel.astype(np.float64)

    def empty_coverage(self) -> NDArray[np.float32]:
        """Coverage vector ``c_i = max_{j in S} w_ij`` of the empty set."""
        return np.zeros(self.weights_t.shape[0], dtype=np.float32)

    def gain(self, j: int, coverage: NDArray[np.float32]) -> float:
        """Marginal gain of adding candidate ``j`` to a set with coverage ``coverage``."""
        lift = self.weights_t[j] - coverage
        np.maximum(lift, 0.0, out=lift)
        return float(self.modular[j] + self.coverage_scale * float(lift.sum(dtype=np.float64)))

    def gains(self, coverage: NDArray[np.float32]) -> NDArray[np.float64]:
        """Marginal gains of every candidate at once (one pass over the matrix)."""
        n = self.weights_t.shape[0]
        cov = np.empty(n, dtype=np.float64)
        for start in range(0, n, _BLOCK):
            block = self.weights_t[start : start + _BLOCK]
            if coverage.any():
                block = np.maximum(block - coverage[None, :], 0.0)
            cov[start : start + _BLOCK] = block.sum(axis=1, dtype=np.float64)
        return self.modular + float(self.coverage_scale) * cov

    def add(self, j: int, coverage: NDArray[np.float32]) -> None:
        """Update ``coverage`` in place after adding candidate ``j``."""
        np.maximum(coverage, self.weights_t[j], out=coverage)

    def coverage_of(self, members: Sequence[int] | NDArray[np.int64]) -> NDArray[np.float32]:
        """Coverage vector of a set of candidates."""
        cov = self.empty_coverage()
        for j in members:
            self.add(int(j), cov)
        return cov

    def value(self, members: Sequence[int] | NDArray[np.int64]) -> float:
        """Objective value ``G(S)`` of a set of candidate indices."""
        idx = np.asarray(list(members), dtype=np.int64)
        cov = self.coverage_of(idx)
        modular = float(self.modular[idx].sum()) if idx.size else 0.0
        return modular + float(self.coverage_scale) * float(cov.sum(dtype=np.float64))
