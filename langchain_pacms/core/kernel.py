"""Rows ``w_ij`` of the coverage kernel, dense or sparse, and their lifts over a coverage."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.problem import Problem

__all__ = ["DenseRows", "KernelRows", "SparseRows", "sparse_rows"]

_BLOCK = 512  # rows per block when lifting every row of a dense matrix
_ALONG_BYTES = 8 * 2**20  # most bytes of running coverages DenseRows.lifts_along holds


def covered(coverage: NDArray[np.float32]) -> float:
    """``sum_i c_i`` of a coverage vector, in float64."""
    return float(np.add.reduce(coverage, dtype=np.float64))


class DenseRows:
    """Kernel rows as one read-only, C-contiguous ``(n, m)`` float32 matrix."""

    uses_total = True  # lift reads its total argument

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

    def steady(self) -> NDArray[np.bool_] | None:
        """Rows whose lift no other row's addition can change: not known for dense rows."""
        return None

    def cover(self, rows: NDArray[np.int64], coverage: NDArray[np.float32]) -> None:
        """Raise ``coverage`` to every row of ``rows``, in place."""
        for at in range(0, rows.shape[0], _BLOCK):
            np.maximum(coverage, self.matrix[rows[at : at + _BLOCK]].max(axis=0), out=coverage)

    def lifts_along(
        self, picks: list[int], coverage: NDArray[np.float32], total: float
    ) -> list[float]:
        """Lifts of adding ``picks`` one after another to ``coverage`` (raised in place)."""
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
    """Kernel rows keeping only their positive weights (compressed rows, targets ascending)."""

    uses_total = False  # lift ignores its total argument (callers may pass anything)

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
        self._steady: NDArray[np.bool_] | None = None

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
        """``sum_i max(w_ij, c_i) - sum_i c_i`` over row ``j``'s non-zeros (``total`` unused)."""
        a, b = self._ptr[j], self._ptr[j + 1]
        if a == b:
            return 0.0
        now = coverage[self.indices[a:b]]
        return float(
            np.add.reduce(np.subtract(np.maximum(self.data[a:b], now), now, dtype=np.float64))
        )

    def steady(self) -> NDArray[np.bool_]:
        """Rows whose lift no other row's addition can change (no target shared with another)."""
        if self._steady is None:  # the rows' pattern does not change: computed once
            alone = np.bincount(self.indices, minlength=self.shape[1])[self.indices] == 1
            shared = np.zeros(self.shape[0], dtype=np.int64)
            np.add.at(shared, np.repeat(np.arange(self.shape[0]), np.diff(self.indptr)), ~alone)
            self._steady = shared == 0
        return self._steady

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

    def cover(self, rows: NDArray[np.int64], coverage: NDArray[np.float32]) -> None:
        """Raise ``coverage`` to every row of ``rows``, in place."""
        targets, values = self._entries(rows)
        np.maximum.at(coverage, targets, values)

    def _entries(self, rows: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """Targets and values of the non-zeros of ``rows``, row after row."""
        starts = self.indptr[rows]
        sizes = self.indptr[rows + 1] - starts
        at = np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
        return self.indices[at], self.data[at]

    def lifts_along(
        self, picks: list[int], coverage: NDArray[np.float32], total: float
    ) -> list[float]:
        """Lifts of adding ``picks`` one after another, via a running max over float32 bits."""
        if not picks:
            return []
        rows = np.asarray(picks, dtype=np.int64)
        sizes = self.indptr[rows + 1] - self.indptr[rows]
        total_size = int(sizes.sum())
        if not total_size:
            return [0.0] * len(picks)
        # The entries of every pick, in pick order (each pick's targets ascending).
        targets, values = self._entries(rows)
        group = np.argsort(targets, kind="stable")  # by target, then pick order
        ordered = targets[group]
        first = np.ones(total_size, dtype=bool)
        first[1:] = ordered[1:] != ordered[:-1]
        number = np.cumsum(first) - 1
        keyed = values[group].view(np.int32).astype(np.int64) + (number << 32)
        raised = np.maximum.accumulate(keyed)
        before = np.empty(total_size, dtype=np.float32)
        before[group] = coverage[ordered]
        shifted = (raised[:-1] - (number[1:] << 32)).astype(np.int32).view(np.float32)
        inner = group[1:][~first[1:]]
        before[inner] = np.maximum(before[inner], shifted[~first[1:]])
        gain = np.subtract(np.maximum(values, before), before, dtype=np.float64)
        lifts = np.zeros(len(picks), dtype=np.float64)
        filled = np.flatnonzero(sizes)
        lifts[filled] = np.add.reduceat(gain, (np.cumsum(sizes) - sizes)[filled])
        np.maximum.at(coverage, targets, values)
        return lifts.tolist()


KernelRows = DenseRows | SparseRows


def sparse_rows(
    problem: Problem,
    targets: NDArray[np.int64],
    threshold: float,
    kernel: Callable[[NDArray[np.float32]], NDArray[np.float32]],
    *,
    max_nonzeros: int | None = None,
) -> tuple[SparseRows, NDArray[np.float32]] | None:
    """Sparse rows of ``kernel(cosines to targets)`` and column sums; None over max_nonzeros."""
    m = int(targets.shape[0])
    tau = np.float32(threshold)
    pairs = problem.near_pairs(threshold)  # None without a kept matrix
    if pairs is not None:
        matrix = problem.cosine_matrix
        assert matrix is not None
        rows, cols = pairs.rows, pairs.cols  # row-major, cosine >= tau
        cosines = matrix[rows, cols]
        above = cosines > tau
        if max_nonzeros is not None and int(np.count_nonzero(above)) > max_nonzeros:
            return None
        slot = np.full(problem.n, -1, dtype=np.int64)
        slot[targets] = np.arange(m)
        keep = above & (slot[cols] >= 0)
        counts = np.bincount(rows[keep], minlength=problem.n)
        return _compressed(m, counts, [slot[cols[keep]]], [kernel(cosines[keep])])
    counts = np.zeros(problem.n, dtype=np.int64)
    cols_parts: list[NDArray[np.int64]] = []
    data_parts: list[NDArray[np.float32]] = []
    for start, block in problem.cosine_blocks(targets):
        at = np.flatnonzero(block > tau)  # row-major order
        values = kernel(block.ravel()[at])
        rows, cols = np.divmod(at, max(m, 1))
        counts[start : start + block.shape[0]] = np.bincount(rows, minlength=block.shape[0])
        cols_parts.append(cols)
        data_parts.append(values)
    return _compressed(m, counts, cols_parts, data_parts)


def _compressed(
    m: int,
    counts: NDArray[np.int64],
    cols_parts: list[NDArray[np.int64]],
    data_parts: list[NDArray[np.float32]],
) -> tuple[SparseRows, NDArray[np.float32]]:
    """Compressed rows from each row's entry count, and their float32 column sums."""
    indptr = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.concatenate(cols_parts) if cols_parts else np.zeros(0, dtype=np.int64)
    data = np.concatenate(data_parts) if data_parts else np.zeros(0, dtype=np.float32)
    sums = np.zeros(m, dtype=np.float32)
    np.add.at(sums, indices, data)
    return SparseRows(indptr, indices, data, m), sums
