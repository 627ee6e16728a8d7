"""The PACMS objective ``G(S) = lam * sum_{j in S} rel(j) + (1 - lam) * sum_i max_{j in S} w_ij``.

``w_ij = rel(i) / density(i) * max(0, (cos_ij - tau) / (1 - tau))``, density ``sum_k k(i, k)``
or 1; ``tau = 0`` and density 1 give the published objective. Monotone submodular.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.kernel import DenseRows, KernelRows, covered, sparse_rows
from langchain_pacms.core.problem import Problem

__all__ = ["CoverageObjective"]

_SPARSE_SHARE = 8  # kernels with at most one entry in this many above the threshold: sparse


class CoverageObjective:
    """Marginal gains and values of ``G``; coverages index the positive-weight ``targets``."""

    def __init__(
        self,
        problem: Problem,
        *,
        relevance_weight: float = 0.0,
        similarity_threshold: float = 0.0,
        density: bool = False,
        coverage_prior: float = 0.0,
    ) -> None:
        if not 0.0 <= relevance_weight <= 1.0:
            raise ValueError(f"relevance_weight must be in [0, 1], got {relevance_weight}")
        if not 0.0 <= similarity_threshold < 1.0:
            raise ValueError(f"similarity_threshold must be in [0, 1), got {similarity_threshold}")
        if coverage_prior < 0.0:
            raise ValueError(f"coverage_prior must be >= 0, got {coverage_prior}")
        self.similarity_threshold = float(similarity_threshold)
        # Weights depend on the candidates alone: problems linked by with_budget share them.
        key = (
            "coverage",
            relevance_weight < 1.0,
            self.similarity_threshold,
            density,
            float(coverage_prior),
        )
        self.targets, rows = problem.shared(
            key, lambda: self._weights(problem, relevance_weight < 1.0, density, coverage_prior)
        )
        self.rows: KernelRows = rows.view()
        self.coverage_scale = np.float32(1.0 - relevance_weight)
        self.modular: NDArray[np.float64] = relevance_weight * problem.relevance.astype(np.float64)
        self._scale = float(self.coverage_scale)
        self._modular = self.modular.tolist()

    @classmethod
    def of_rows(cls, rows: KernelRows) -> CoverageObjective:
        """The coverage objective of given kernel rows (no modular part); targets: their columns.

        Example:
            >>> from langchain_pacms.core.kernel import SparseRows
            >>> rows = SparseRows.from_dense(np.array([[1, 0], [1, 1]], dtype=np.float32))
            >>> CoverageObjective.of_rows(rows).value([1])
            2.0
        """
        objective = cls.__new__(cls)
        objective.similarity_threshold = 0.0
        objective.targets = np.arange(rows.shape[1], dtype=np.int64)
        objective.rows = rows
        objective.coverage_scale = np.float32(1.0)
        objective.modular = np.zeros(rows.shape[0], dtype=np.float64)
        objective._scale = 1.0
        objective._modular = objective.modular.tolist()
        return objective

    def _weights(
        self, problem: Problem, coverage: bool, density: bool, coverage_prior: float
    ) -> tuple[NDArray[np.int64], KernelRows]:
        """Targets (``rel(i) + prior > 0``) and the kernel rows."""
        prior = problem.relevance.astype(np.float32) + np.float32(coverage_prior)
        active = prior > 0 if coverage else np.zeros(problem.n, dtype=bool)
        targets = np.flatnonzero(active).astype(np.int64)
        target = prior[targets]
        # The kernel is symmetric: a column sum is that target's density.
        fits = 4 * problem.n * targets.shape[0] <= problem.similarity_ceiling
        # Dense within the ceiling, unless the kept matrix shows the rows mostly zero.
        built = (
            sparse_rows(
                problem,
                targets,
                self.similarity_threshold,
                self._kernel,
                max_nonzeros=problem.n * targets.shape[0] // _SPARSE_SHARE if fits else None,
            )
            if problem.cosine_matrix is not None or not fits
            else None
        )
        if built is None:
            weights = self._kernel(problem.cosine_columns(targets))
            if density:
                target = target / np.maximum(weights.sum(axis=0), 1.0).astype(np.float32)
            weights *= target[None, :]  # C-contiguous, as cosine_columns returns it
            weights.flags.writeable = False
            return targets, DenseRows(weights)
        rows, sums = built
        if density:
            target = target / np.maximum(sums, 1.0).astype(np.float32)
        rows.data *= target[rows.indices]
        return targets, rows

    def _kernel(self, cosines: NDArray[np.float32]) -> NDArray[np.float32]:
        """Apply ``k = max(0, (cos - tau) / (1 - tau))`` to cosines, in place."""
        tau = np.float32(self.similarity_threshold)
        if tau:
            cosines -= tau
            cosines *= np.float32(1.0 / (1.0 - self.similarity_threshold))
        np.maximum(cosines, 0.0, out=cosines)
        return cosines

    def empty_coverage(self) -> NDArray[np.float32]:
        """Coverage vector ``c_i = max_{j in S} w_ij`` (over :attr:`targets`) of the empty set."""
        return np.zeros(self.targets.shape[0], dtype=np.float32)

    @staticmethod
    def covered(coverage: NDArray[np.float32]) -> float:
        """``sum_i c_i`` of a coverage vector (the coverage part of ``F(S)``)."""
        return covered(coverage)

    def gain(self, j: int, coverage: NDArray[np.float32], covered: float | None = None) -> float:
        """Marginal gain of adding ``j`` to ``coverage`` (sum: ``covered``); not thread-safe."""
        if covered is None:
            covered = self.covered(coverage)
        return self._modular[j] + self._scale * self.rows.lift(j, coverage, covered)

    def gains(self, coverage: NDArray[np.float32]) -> NDArray[np.float64]:
        """Marginal gains of every candidate at once (same values as :meth:`gain`)."""
        return self.modular + self._scale * self.rows.lifts(coverage)

    def add(self, j: int, coverage: NDArray[np.float32]) -> None:
        """Update ``coverage`` in place after adding candidate ``j``."""
        self.rows.add(j, coverage)

    def gains_along(
        self, picks: list[int], coverage: NDArray[np.float32], covered: float
    ) -> list[float]:
        """Marginal gains of adding ``picks`` one after another; ``coverage`` is raised in place."""
        lifts = self.rows.lifts_along(picks, coverage, covered)
        return [self._modular[j] + self._scale * lift for j, lift in zip(picks, lifts)]

    def coverage_of(self, members: Sequence[int] | NDArray[np.int64]) -> NDArray[np.float32]:
        """Coverage vector of a set of candidates."""
        cov = self.empty_coverage()
        self.rows.cover(np.asarray(members, dtype=np.int64).reshape(-1), cov)
        return cov

    def value(self, members: Sequence[int] | NDArray[np.int64]) -> float:
        """Objective value ``G(S)`` of a set of candidate indices."""
        idx = np.asarray(list(members), dtype=np.int64)
        cov = self.coverage_of(idx)
        modular = float(self.modular[idx].sum()) if idx.size else 0.0
        return modular + self._scale * float(cov.sum(dtype=np.float64))
