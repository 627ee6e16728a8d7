"""Ways to spend the budget a selection leaves: each returns non-members to add within ``room``."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.pick import walk
from langchain_pacms.core.problem import Problem

__all__ = ["EXACT_COPY_COSINE", "distinct_fill", "diverse_fill", "relevance_fill"]

EXACT_COPY_COSINE = 1.0 - 1e-5  # cosine from which distinct_fill sees an exact copy of one kept
_BLOCK = 256  # members per block when measuring redundancy against them
_COMPACT_MIN = 64  # the row walk compacts its slots only while more items than this are left


def _taken(problem: Problem, members: Sequence[int]) -> NDArray[np.bool_]:
    """The mask of ``members``."""
    taken = np.zeros(problem.n, dtype=bool)
    taken[np.asarray(members, dtype=np.int64)] = True
    return taken


def _open(problem: Problem, members: Sequence[int], room: int) -> NDArray[np.int64]:
    """Non-members that fit in ``room`` on their own."""
    return np.flatnonzero(~_taken(problem, members) & (problem.tokens <= room))


def relevance_fill(problem: Problem, members: Sequence[int], room: int) -> list[int]:
    """Add non-members by relevance (ties: earlier position) while they fit."""
    return walk(problem, problem.relevance_order().tolist(), room, _taken(problem, members))


def distinct_fill(
    problem: Problem, members: Sequence[int], room: int, *, threshold: float
) -> list[int]:
    """Like :func:`relevance_fill`, passing over items with cosine >= ``threshold`` to a kept one.

    Those are added last, in relevance order; exact copies (:data:`EXACT_COPY_COSINE`) never.
    """
    added = _distinct_walk(problem, members, room, threshold)
    left = room - int(problem.tokens[np.asarray(added, dtype=np.int64)].sum())
    exact = max(threshold, EXACT_COPY_COSINE)
    return added + _distinct_walk(problem, [*members, *added], left, exact)


def _distinct_walk(
    problem: Problem, members: Sequence[int], room: int, threshold: float
) -> list[int]:
    """The relevance walk of :func:`distinct_fill` that passes over every near-copy."""
    kept = _taken(problem, members)
    allowed = ~kept & (problem.tokens <= room)
    if not allowed.any():
        return []
    pairs = problem.near_pairs(threshold)
    if pairs is None:
        return _distinct_from_vectors(problem, members, room, threshold, allowed)
    near = np.zeros(problem.n, dtype=bool)
    near[pairs.cols[kept[pairs.rows]]] = True
    tokens = problem.tokens.tolist()
    start, cols = pairs.indptr.tolist(), pairs.cols
    added: list[int] = []
    for j in problem.relevance_order().tolist():
        if not allowed[j] or tokens[j] > room or near[j]:
            continue
        added.append(j)
        room -= tokens[j]
        near[cols[start[j] : start[j + 1]]] = True
    return added


def _distinct_from_vectors(
    problem: Problem,
    members: Sequence[int],
    room: int,
    threshold: float,
    allowed: NDArray[np.bool_],
) -> list[int]:
    """:func:`distinct_fill` without a kept cosine matrix, ``_BLOCK`` candidates at a time."""
    vectors = problem.vectors
    tokens = problem.tokens
    kept = np.asarray(members, dtype=np.int64)
    order = problem.relevance_order()
    order = order[allowed[order]]
    added: list[int] = []
    at = 0
    while at < order.size and room > 0:
        rest = order[at:]
        fits = np.flatnonzero(tokens[rest] <= room)[:_BLOCK]
        if not fits.size:
            break
        block = rest[fits]
        at += int(fits[-1]) + 1  # the skipped ones do not fit now, so they never will
        left = vectors[block]
        near = np.zeros(block.size, dtype=bool)
        rows = max(1, problem.similarity_ceiling // (4 * block.size))
        for start in range(0, kept.size, rows):
            near |= ((vectors[kept[start : start + rows]] @ left.T) >= threshold).any(axis=0)
        among = (left @ left.T) >= threshold
        taken: list[int] = []
        for k, j in enumerate(block.tolist()):
            cost = int(tokens[j])
            if cost > room or near[k] or (taken and among[taken, k].any()):
                continue
            taken.append(k)
            added.append(j)
            room -= cost
        kept = np.concatenate([kept, block[taken]])
    return added


def diverse_fill(
    problem: Problem, members: Sequence[int], room: int, *, lambda_mult: float = 0.5
) -> list[int]:
    """Add non-members by maximal marginal relevance against the members, while they fit."""
    if not 0.0 <= lambda_mult <= 1.0:
        raise ValueError(f"lambda_mult must be in [0, 1], got {lambda_mult}")
    open_ = _open(problem, members, room)
    if not open_.size:
        return []
    chosen = np.asarray(members, dtype=np.int64)
    added: list[int] = []
    if not chosen.size:  # nothing to be redundant with: start from the most relevant item
        first = int(open_[np.argmax(problem.relevance[open_])])
        added.append(first)
        room -= int(problem.tokens[first])
        chosen = np.asarray(added, dtype=np.int64)
        open_ = _open(problem, added, room)
    matrix = problem.cosine_matrix
    blocks = [chosen[at : at + _BLOCK] for at in range(0, chosen.size, _BLOCK)]
    if matrix is None:
        mine = problem.vectors[open_]
        redundancy = np.full(open_.size, -np.inf, dtype=np.float32)
        for block in blocks:
            np.maximum(redundancy, (mine @ problem.vectors[block].T).max(axis=1), out=redundancy)
        return added + _lazy_walk(problem, open_, redundancy, room, lambda_mult)
    # The kept matrix is symmetric: whole (contiguous) member rows instead of a gather.
    everyone = np.full(problem.n, -np.inf, dtype=np.float32)
    for block in blocks:
        np.maximum(everyone, matrix[block].max(axis=0), out=everyone)
    return added + _row_walk(problem, matrix, open_, everyone[open_], room, lambda_mult)


def _row_walk(
    problem: Problem,
    matrix: NDArray[np.float32],
    open_: NDArray[np.int64],
    redundancy: NDArray[np.float32],
    room: int,
    lambda_mult: float,
) -> list[int]:
    """The walk over the kept cosine matrix: each step re-scores every live item from one row."""
    n = problem.n
    ids = np.arange(n)
    sub = matrix
    red = np.zeros(n, dtype=np.float64)  # closed items: any finite value
    red[open_] = redundancy
    rel = np.full(n, -np.inf, dtype=np.float64)
    rel[open_] = lambda_mult * problem.relevance[open_].astype(np.float64)
    rest = 1.0 - lambda_mult
    tokens = problem.tokens.tolist()
    alive = int(open_.size)
    added: list[int] = []
    while True:
        if 2 * alive <= ids.size and ids.size > _COMPACT_MIN:
            keep = np.flatnonzero((rel > -np.inf) & (problem.tokens[ids] <= room))
            ids, sub, red, rel = ids[keep], sub[keep].take(keep, axis=1), red[keep], rel[keep]
            tokens = problem.tokens[ids].tolist()
            alive = int(keep.size)
            if not alive:
                return added
        score = np.multiply(red, rest)
        np.subtract(rel, score, out=score)
        j = int(score.argmax())
        while score[j] > -np.inf and tokens[j] > room:  # room only shrinks: it never will fit
            rel[j] = score[j] = -np.inf
            alive -= 1
            j = int(score.argmax())
        if score[j] == -np.inf:
            return added
        added.append(int(ids[j]))
        room -= tokens[j]
        rel[j] = -np.inf
        alive -= 1
        np.maximum(red, sub[j], out=red)


def _lazy_walk(
    problem: Problem,
    open_: NDArray[np.int64],
    redundancy: NDArray[np.float32],
    room: int,
    lambda_mult: float,
) -> list[int]:
    """The walk from the vectors: lazy re-scoring from a heap, as scores only fall (CELF)."""
    vectors = problem.vectors
    relevance = (lambda_mult * problem.relevance[open_].astype(np.float64)).tolist()
    rest = 1.0 - lambda_mult
    red = redundancy.astype(np.float64).tolist()
    tokens = problem.tokens[open_].tolist()
    # Entries: (-score, candidate index, slot in open_, items added when scored).
    heap = [(-(relevance[k] - rest * red[k]), int(j), k, 0) for k, j in enumerate(open_)]
    heapq.heapify(heap)
    added: list[int] = []
    # The added items' vectors, in order, so that a re-score reads one slice.
    trail = np.empty((open_.size, vectors.shape[1]), dtype=vectors.dtype)
    while heap:
        _, j, k, stamp = heapq.heappop(heap)
        if tokens[k] > room:
            continue  # room only shrinks: it will never fit
        if stamp < len(added):
            fresh = float((trail[stamp : len(added)] @ vectors[j]).max())
            red[k] = max(red[k], fresh)
            heapq.heappush(heap, (-(relevance[k] - rest * red[k]), j, k, len(added)))
            continue
        trail[len(added)] = vectors[j]
        added.append(j)
        room -= tokens[k]
    return added
