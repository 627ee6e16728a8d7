"""The PACMS objective: relevance-weighted facility-location coverage.

For candidates with unit embeddings ``e_i`` and query ``e_q``::

    rel(i)  = max(0, cos(e_i, e_q))
    k(i, j) = max(0, (cos(e_i, e_j) - tau) / (1 - tau))       similarity kernel, k(i, i) = 1
    t(i)    = rel(i) / density(i)                              target weight
    w_ij    = t(i) * k(i, j)
    F(S)    = sum_i max_{j in S} w_ij
    G(S)    = lam * sum_{j in S} rel(j) + (1 - lam) * F(S)

With ``tau = 0`` and ``density = 1`` this is the published PACMS objective. ``tau > 0`` keeps
coverage for near-duplicates only; with density normalisation (``density(i) = sum_k k(i, k)``,
at least 1) a cluster of near-copies weighs about as much as one item. ``G`` is monotone
submodular for every setting, so the greedy guarantees hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.kernel import DenseRows, KernelRows, covered, sparse_rows
from langchain_pacms.core.problem import Problem

__all__ = ["CoverageObjective"]

# Kept-matrix kernels with at most one entry in this many above the threshold are held sparse.
_SPARSE_SHARE = 8


class CoverageObjective:
    """Marginal gains and values of ``G`` over one :class:`Problem`.

    Row ``j`` of the kernel holds ``w_ij`` over the targets with positive weight
    (:attr:`targets`), dense or sparse (see :mod:`.kernel`); the two agree up to float64
    rounding of the gains. Coverage vectors are indexed like the targets.

    Args:
        problem: The selection instance.
        relevance_weight: ``lam`` in ``[0, 1]``; 0 is the published objective.
        similarity_threshold: ``tau`` in ``[0, 1)``: cosines at or below it give no coverage.
        density: Divide each target's weight by its kernel density ``sum_k k(i, k)``.
        coverage_prior: Experimental, not shipped: ``eps >= 0`` added to every target's
            relevance, ``t(i) = (rel(i) + eps) / density(i)``.

    Attributes:
        rows: The kernel rows: ``w_{targets[k], j}`` at row ``j``, column ``k`` (an ``(n, m)``
            matrix, dense or sparse).
        targets: ``(m,)`` indices of the candidates with a positive target weight.
        coverage_scale: ``1 - lam``.
        modular: ``(n,)`` float64, ``lam * rel``.

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
        # Only targets with rel(i) + prior > 0 can contribute to F; with lam = 1, F has weight 0.
        # Weights depend on the candidates alone, so problems linked by with_budget share them.
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

    def _weights(
        self, problem: Problem, coverage: bool, density: bool, coverage_prior: float
    ) -> tuple[NDArray[np.int64], KernelRows]:
        """Targets and the kernel rows (see the class attributes)."""
        # Every item is a target with weight rel(i) + prior: generic coverage of the whole pool.
        prior = problem.relevance.astype(np.float32) + np.float32(coverage_prior)
        active = prior > 0 if coverage else np.zeros(problem.n, dtype=bool)
        targets = np.flatnonzero(active).astype(np.int64)
        target = prior[targets]
        # The kernel is symmetric, so column k of row j is k(targets[k], j) and a column sum is
        # the density of that target: one (n, m) block of cosines serves both.
        fits = 4 * problem.n * targets.shape[0] <= problem.similarity_ceiling
        # Within the ceiling the rows are dense unless the kept matrix shows them mostly
        # zero (near-duplicate coverage): then reading their non-zeros is cheaper.
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
        """Marginal gain of adding candidate ``j`` to a set with coverage ``coverage``.

        Pass ``covered`` (:meth:`covered` of ``coverage``) to reuse it across evaluations. Not
        thread-safe: it uses a scratch buffer owned by the objective.
        """
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
        """Marginal gains of adding ``picks`` one after another; ``coverage`` is raised in place.

        Each gain equals :meth:`gain` at its turn, after the picks before it were added.

        Args:
            picks: Candidates to add, in order.
            coverage: Coverage vector of the set they are added to.
            covered: :meth:`covered` of ``coverage``.

        Returns:
            One gain per pick.
        """
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
