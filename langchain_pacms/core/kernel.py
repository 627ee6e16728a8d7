"""The rows of the coverage kernel ``w_ij``, dense or sparse, and what the greedy asks of them.

:class:`~langchain_pacms.core.objective.CoverageObjective` stores its weights transposed: row
``j`` holds ``w_ij`` for every target ``i``. Coverage needs only near-duplicates (cosines above
the threshold ``tau``), so with the default threshold almost every weight is zero. Small pools
keep the rows as one dense matrix (:class:`DenseRows`); pools whose dense matrix would not fit in
the problem's ``similarity_ceiling`` keep only the non-zero weights of each row
(:class:`SparseRows`), built from row blocks of cosines by :func:`sparse_rows`, so memory grows
with the number of near-duplicate pairs instead of ``n * m``.

Both answer the same three questions about a coverage vector ``c`` (``c_i = max_{j in S} w_ij``):
the *lift* ``sum_i max(w_ij, c_i) - sum_i c_i`` of one row, the lifts of every row, and ``c``
after adding a row. The values agree up to rounding: dense rows sum over every target, sparse
rows over their non-zeros only.

Example:
    >>> import numpy as np
    >>> weights = np.array([[0.5, 0.0], [0.0, 0.25]], np.float32)
    >>> dense, sparse = DenseRows(weights), SparseRows.from_dense(weights)
    >>> c = np.array([0.0, 0.5], np.float32)
    >>> dense.lifts(c).tolist(), sparse.lifts(c).tolist()
    ([0.5, 0.0], [0.5, 0.0])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.problem import Problem

__all__ = ["DenseRows", "KernelRows", "SparseRows", "sparse_rows"]

# Rows per block when lifting every row of a dense matrix, so temporaries stay small at large n.
_BLOCK = 512
# Most bytes of running coverages that DenseRows.lifts_along holds at once.
_ALONG_BYTES = 8 * 2**20


def covered(coverage: NDArray[np.float32]) -> float:
    """``sum_i c_i`` of a coverage vector, in float64."""
    return float(np.add.reduce(coverage, dtype=np.float64))


class DenseRows:
    """Kernel rows as one read-only ``(n, m)`` float32 matrix (see the module docstring).

    Args:
        matrix: Row ``j`` holds ``w_ij`` for every target ``i``; C-contiguous.
    """

    def __init__(self, matrix: NDArray[np.float32]) -> None:
        self.matrix = matrix
        self.shape: tuple[int, int] = (int(matrix.shape[0]), int(matrix.shape[1]))
        self.nbytes = int(matrix.nbytes)
        self._rows = list(matrix)  # row views: cheaper to index than the matrix
        self._buffer = np.empty(self.shape[1], dtype=np.float32)

    def view(self) -> DenseRows:
        """The same rows with a scratch buffer of their own (one per thread of use)."""
        other = object.__new__(DenseRows)
        other.__dict__.update(self.__dict__)
        other._buffer = np.empty(self.shape[1], dtype=np.float32)
        return other

    def lift(self, j: int, coverage: NDArray[np.float32], total: float) -> float:
        """``sum_i max(w_ij, c_i) - total`` (``total``: :func:`covered` of ``coverage``)."""
        top = self._buffer
        np.maximum(self._rows[j], coverage, out=top)
        return float(np.add.reduce(top, dtype=np.float64)) - total

    def lifts(self, coverage: NDArray[np.float32]) -> NDArray[np.float64]:
        """:meth:`lift` of every row."""
        n = self.shape[0]
        lift = np.empty(n, dtype=np.float64)
        total = covered(coverage)
        for start in range(0, n, _BLOCK):
            block = self.matrix[start : start + _BLOCK]
            if total:
                block = np.maximum(block, coverage[None, :])
            lift[start : start + _BLOCK] = np.add.reduce(block, axis=1, dtype=np.float64)
        lift -= total
        return lift

    def add(self, j: int, coverage: NDArray[np.float32]) -> None:
        """Raise ``coverage`` to row ``j``, in place."""
        np.maximum(coverage, self._rows[j], out=coverage)

    def lifts_along(
        self, picks: list[int], coverage: NDArray[np.float32], total: float
    ) -> list[float]:
        """Lifts of adding ``picks`` one after another to ``coverage`` (raised in place).

        Each lift is that of :meth:`lift` at its turn. The raised coverages are a running
        maximum over the picks' rows (a block of them at a time), and each one's sum is the
        next lift's total, so a walk of additions costs a few array operations per block.
        """
        lifts: list[float] = []
        step = max(1, _ALONG_BYTES // (4 * max(1, self.shape[1])))
        for at in range(0, len(picks), step):
            stack = np.concatenate([coverage[None, :], self.matrix[picks[at : at + step]]])
            rows = list(stack)  # row views: a running maximum, one contiguous row at a time
            for before, row in itertools.pairwise(rows):
                np.maximum(before, row, out=row)
            for raised in np.add.reduce(stack[1:], axis=1, dtype=np.float64).tolist():
                lifts.append(raised - total)
                total = raised
            coverage[:] = stack[-1]
        return lifts


class SparseRows:
    """Kernel rows keeping only their non-zero weights (compressed rows).

    Row ``j``'s non-zeros are ``data[indptr[j]:indptr[j + 1]]`` at targets
    ``indices[indptr[j]:indptr[j + 1]]``, in increasing target order.

    Args:
        indptr: ``(n + 1,)`` int64 row offsets.
        indices: int64 target index of every non-zero.
        data: float32 value of every non-zero (positive).
        width: Number of targets ``m``.
    """

    def __init__(
        self,
        indptr: NDArray[np.int64],
        indices: NDArray[np.int64],
        data: NDArray[np.float32],
        width: int,
    ) -> None:
        self.indptr, self.indices, self.data = indptr, indices, data
        self.shape: tuple[int, int] = (int(indptr.shape[0]) - 1, int(width))
        self.nbytes = int(indptr.nbytes + indices.nbytes + data.nbytes)
        self._ptr = indptr.tolist()

    def view(self) -> SparseRows:
        """These rows (they use no scratch buffer, so any thread may share them)."""
        return self

    @classmethod
    def from_dense(cls, matrix: NDArray[np.float32]) -> SparseRows:
        """The non-zeros of a dense ``(n, m)`` matrix (for tests and small inputs)."""
        rows, cols = np.nonzero(matrix)
        indptr = np.zeros(matrix.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=matrix.shape[0]), out=indptr[1:])
        data = np.ascontiguousarray(matrix[rows, cols], dtype=np.float32)
        return cls(indptr, cols.astype(np.int64), data, int(matrix.shape[1]))

    def lift(self, j: int, coverage: NDArray[np.float32], total: float) -> float:
        """``sum_i max(w_ij, c_i) - sum_i c_i``, summed over row ``j``'s non-zeros only.

        ``total`` is not needed here (zero weights lift nothing); it keeps the dense rows'
        signature.
        """
        a, b = self._ptr[j], self._ptr[j + 1]
        if a == b:
            return 0.0
        now = coverage[self.indices[a:b]]
        return float(np.subtract(np.maximum(self.data[a:b], now), now, dtype=np.float64).sum())

    def lifts(self, coverage: NDArray[np.float32]) -> NDArray[np.float64]:
        """:meth:`lift` of every row."""
        now = coverage[self.indices]
        gain = np.subtract(np.maximum(self.data, now), now, dtype=np.float64)
        lift = np.zeros(self.shape[0], dtype=np.float64)
        filled = np.flatnonzero(np.diff(self.indptr))
        if filled.size:  # reduceat over the rows that have entries (empty ones lift 0)
            lift[filled] = np.add.reduceat(gain, self.indptr[filled])
        return lift

    def add(self, j: int, coverage: NDArray[np.float32]) -> None:
        """Raise ``coverage`` to row ``j``, in place."""
        a, b = self._ptr[j], self._ptr[j + 1]
        at = self.indices[a:b]
        coverage[at] = np.maximum(coverage[at], self.data[a:b])

    def lifts_along(
        self, picks: list[int], coverage: NDArray[np.float32], total: float
    ) -> list[float]:
        """Lifts of adding ``picks`` one after another to ``coverage`` (raised in place)."""
        lifts = []
        for j in picks:
            lifts.append(self.lift(j, coverage, total))
            self.add(j, coverage)
        return lifts


KernelRows = DenseRows | SparseRows
"""Either way of holding the kernel rows."""


def sparse_rows(
    problem: Problem,
    targets: NDArray[np.int64],
    threshold: float,
    kernel: Callable[[NDArray[np.float32]], NDArray[np.float32]],
) -> tuple[SparseRows, NDArray[np.float32]]:
    """The non-zeros of ``kernel(cosines to targets)``, built a row block at a time.

    Blocks come from :meth:`~langchain_pacms.core.Problem.cosine_blocks` (each within the
    problem's ``similarity_ceiling``). ``kernel`` maps cosines to kernel values in place and
    must be positive exactly where the cosine is above ``threshold`` (as
    ``max(0, (cos - tau) / (1 - tau))`` is, in float32 too), so only those entries are mapped.
    The column sums are accumulated in float32 in row order, as a dense matrix's
    ``sum(axis=0)`` adds its rows (zeros add nothing).

    Args:
        problem: The selection instance.
        targets: Column candidates.
        threshold: Cosines at or below it give zero.
        kernel: Maps an array of cosines to kernel values in place and returns it.

    Returns:
        The rows (unscaled kernel values) and the column sums of the kernel.
    """
    m = int(targets.shape[0])
    counts = np.zeros(problem.n, dtype=np.int64)
    sums = np.zeros(m, dtype=np.float32)
    cols_parts: list[NDArray[np.int64]] = []
    data_parts: list[NDArray[np.float32]] = []
    tau = np.float32(threshold)
    for start, block in problem.cosine_blocks(targets):
        at = np.flatnonzero(block > tau)  # row-major order
        values = kernel(block.ravel()[at])
        rows, cols = np.divmod(at, max(m, 1))
        np.add.at(sums, cols, values)
        counts[start : start + block.shape[0]] = np.bincount(rows, minlength=block.shape[0])
        cols_parts.append(cols)
        data_parts.append(values)
    indptr = np.zeros(problem.n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.concatenate(cols_parts) if cols_parts else np.zeros(0, dtype=np.int64)
    data = np.concatenate(data_parts) if data_parts else np.zeros(0, dtype=np.float32)
    return SparseRows(indptr, indices, data, m), sums
