"""Cosines between unit rows: normalising, growing a kept cosine matrix, near pairs."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "CosineStore",
    "NearPairs",
    "extended_cosines",
    "grown_pairs",
    "rows_stable",
    "unit_rows",
]


def unit_rows(matrix: ArrayLike) -> NDArray[np.float32]:
    """A vector or rows as new float32 unit rows (norms in float64); zero or non-finite rows: 0."""
    arr = np.asarray(matrix)
    if arr.dtype != np.float32:
        arr = arr.astype(np.float64, copy=False)
    one_d = arr.ndim == 1
    if one_d:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"expected a 1-D or 2-D array of vectors, got shape {arr.shape}")
    with np.errstate(invalid="ignore", over="ignore"):
        # A non-finite entry makes the row's norm non-finite (NaN or inf): that flags the row.
        norms = np.sqrt(np.einsum("ij,ij->i", arr, arr, dtype=np.float64))
        bad = ~np.isfinite(norms)
        out = np.empty(arr.shape, dtype=np.float32)
        np.divide(
            arr, np.where(bad | (norms == 0), 1.0, norms)[:, None], out=out, casting="same_kind"
        )
    out[bad] = 0.0
    return out[0] if one_d else out


# Rows of the stability probe, and how many of them are appended (both off any kernel's unroll).
_PROBE_ROWS, _PROBE_GROWN = 517, 11


@cache
def rows_stable(dim: int) -> bool:
    """Whether this BLAS gives a cosine the same bits in any product (so a matrix may grow)."""
    rows = unit_rows(np.random.default_rng(0).standard_normal((_PROBE_ROWS, dim)))
    head = _PROBE_ROWS - _PROBE_GROWN
    whole = rows @ rows.T
    return bool(
        np.array_equal(rows[:head] @ rows[:head].T, whole[:head, :head])
        and np.array_equal(rows[head:] @ rows.T, whole[head:])
    )


@dataclass(eq=False)
class CosineStore:
    """A buffer holding a cosine matrix in its top-left ``used`` rows, shared by grown problems."""

    buffer: NDArray[np.float32]
    used: int


_STORE_LOCK = threading.Lock()
# Old rows computed again with a grown pool's new rows, to check the product's bits.
_CHECK_ROWS = 32


def extended_cosines(
    old: NDArray[np.float32],
    unit: NDArray[np.float32],
    store: CosineStore | None,
    limit: int,
) -> tuple[NDArray[np.float32], CosineStore] | None:
    """Grow ``old`` into the cosine matrix of ``unit``, in ``store`` or anew (None: bits differ)."""
    n0, n = old.shape[0], unit.shape[0]
    rows = None
    if n > n0:
        lo = max(0, n0 - _CHECK_ROWS)
        rows = unit[lo:] @ unit.T
        if not np.array_equal(rows[: n0 - lo, :n0], old[lo:]):
            return None
        rows = rows[n0 - lo :]
    with _STORE_LOCK:  # a store is extended by one problem only: the others copy
        if store is None or store.used != n0 or store.buffer.shape[0] < n:
            room = max(64, n // 8)
            cap = max(n, min(n + room, limit))
            store = CosineStore(np.empty((cap, cap), dtype=np.float32), n0)
            store.buffer[:n0, :n0] = old
        store.used = n
    buffer = store.buffer
    if rows is not None:
        buffer[n0:n, :n] = rows
        buffer[:n0, n0:n] = rows[:, :n0].T
    matrix = buffer[:n, :n]
    matrix.flags.writeable = False
    return matrix, store


@dataclass(frozen=True, eq=False)
class NearPairs:
    """The pairs of a cosine matrix at or above a threshold, row-major (compressed rows)."""

    indptr: NDArray[np.int64]
    rows: NDArray[np.int64]
    cols: NDArray[np.int64]

    @classmethod
    def of(cls, mask: NDArray[np.bool_]) -> NearPairs:
        """The pairs where ``mask`` (an ``(n, n)`` boolean matrix) is true."""
        n = mask.shape[0]
        rows, cols = np.divmod(np.flatnonzero(mask), max(n, 1))
        return cls.from_rows(rows, cols, n)

    @classmethod
    def from_rows(cls, rows: NDArray[np.int64], cols: NDArray[np.int64], n: int) -> NearPairs:
        """Pairs given row-major as their rows and columns."""
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        return cls(indptr, rows.astype(np.int64, copy=False), cols.astype(np.int64, copy=False))


def grown_pairs(
    pairs: NearPairs, matrix: NDArray[np.float32], n0: int, threshold: float
) -> NearPairs:
    """``pairs`` of the first ``n0`` rows and columns, with the grown matrix's new ones."""
    n = matrix.shape[0]
    tau = np.float32(threshold)
    new_rows, new_cols = np.divmod(np.flatnonzero(matrix[n0:] >= tau), max(n, 1))
    new_rows += n0
    old = new_cols < n0  # (new row, old column): also (old column, new row) by symmetry
    rows = np.concatenate([pairs.rows, new_cols[old], new_rows])
    cols = np.concatenate([pairs.cols, new_rows[old], new_cols])
    order = np.argsort(rows * n + cols, kind="stable")
    return NearPairs.from_rows(rows[order], cols[order], n)
