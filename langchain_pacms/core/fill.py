"""Ways to spend the budget that a selection leaves over.

A coverage greedy stops once no candidate adds enough coverage; what is left of the budget is
then filled by one of these walks. Each returns the candidates to add, in order, never more than
``room`` tokens and never a member.

* :func:`relevance_fill`: most relevant first.
* :func:`diverse_fill`: maximal marginal relevance *continued from the members*: the next item
  maximises ``lambda_mult * rel(j) - (1 - lambda_mult) * max_{s in S} cos(j, s)`` over the
  members and the items added so far. Where the objective no longer tells items apart, this
  prefers what the context does not already say (an original over a restatement of a kept
  round), where a relevance walk would keep adding copies of the best-matching rounds.

Example:
    >>> import numpy as np
    >>> from langchain_pacms.core import Problem
    >>> vectors = [[1.0, 0.0], [1.0, 0.05], [0.0, 1.0]]
    >>> p = Problem.build(vectors, [1.0, 0.2], tokens=[1, 1, 1], budget=2)
    >>> relevance_fill(p, [0], room=1), diverse_fill(p, [0], room=1)
    ([1], [2])
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from langchain_pacms.core.problem import Problem

__all__ = ["diverse_fill", "relevance_fill"]

# Members per block when measuring redundancy against the members.
_BLOCK = 256


def _open(problem: Problem, members: Sequence[int], room: int) -> np.ndarray:
    """Non-members that fit in ``room`` on their own."""
    taken = np.zeros(problem.n, dtype=bool)
    taken[np.asarray(members, dtype=np.int64)] = True
    return np.flatnonzero(~taken & (problem.tokens <= room))


def relevance_fill(problem: Problem, members: Sequence[int], room: int) -> list[int]:
    """Add non-members by relevance (ties: earlier position) while they fit.

    Args:
        problem: The selection instance.
        members: Indices already selected.
        room: Tokens left to spend.

    Returns:
        The added indices, in order.
    """
    allowed = np.zeros(problem.n, dtype=bool)
    allowed[_open(problem, members, room)] = True
    added: list[int] = []
    tokens = problem.tokens.tolist()
    for j in problem.relevance_order().tolist():
        if allowed[j] and tokens[j] <= room:
            added.append(j)
            room -= tokens[j]
    return added


def diverse_fill(
    problem: Problem, members: Sequence[int], room: int, *, lambda_mult: float = 0.5
) -> list[int]:
    """Add non-members by maximal marginal relevance against the members, while they fit.

    Redundancy ``max_{s in S} cos(j, s)`` only grows as items are added, so every score is
    non-increasing and a stale score is an upper bound: the walk re-scores an item only when it
    reaches the top of a heap (lazy evaluation, as in CELF), against the items added since it was
    last scored. The picks equal those of re-scoring everything at every step (ties: lower
    index). Items that do not fit are skipped and do not count as redundancy.

    Args:
        problem: The selection instance.
        members: Indices already selected.
        room: Tokens left to spend.
        lambda_mult: Relevance/diversity trade-off in ``[0, 1]`` (LangChain's default 0.5).

    Returns:
        The added indices, in order.

    Raises:
        ValueError: If ``lambda_mult`` is outside ``[0, 1]``.
    """
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
    # Cosines come from the problem's kept matrix when there is one (pacms computes it), else
    # from the vectors: then the added items' vectors are kept in one contiguous block.
    matrix = problem.cosine_matrix
    vectors = problem.vectors
    blocks = [chosen[at : at + _BLOCK] for at in range(0, chosen.size, _BLOCK)]
    if matrix is not None:
        sims = (matrix[np.ix_(open_, block)] for block in blocks)
    else:
        mine = vectors[open_]
        sims = (mine @ vectors[block].T for block in blocks)
    redundancy = np.full(open_.size, -np.inf, dtype=np.float32)
    for block_sims in sims:
        np.maximum(redundancy, block_sims.max(axis=1), out=redundancy)
    relevance = (lambda_mult * problem.relevance[open_].astype(np.float64)).tolist()
    rest = 1.0 - lambda_mult
    red = redundancy.astype(np.float64).tolist()
    tokens = problem.tokens[open_].tolist()
    # Entries: (-score, candidate index, slot in open_, items added when scored).
    scored = len(added)
    heap = [(-(relevance[k] - rest * red[k]), int(j), k, scored) for k, j in enumerate(open_)]
    heapq.heapify(heap)
    # The added items (or their vectors), in order, so that a re-score reads one slice.
    trail = np.empty(open_.size + len(added), dtype=np.int64)
    trail[: len(added)] = added
    if matrix is None:
        trail_vectors = np.empty((trail.size, vectors.shape[1]), dtype=vectors.dtype)
        trail_vectors[: len(added)] = vectors[added]
    while heap:
        _, j, k, stamp = heapq.heappop(heap)
        if tokens[k] > room:
            continue  # room only shrinks: it will never fit
        if stamp < len(added):
            since = slice(stamp, len(added))
            if matrix is None:
                fresh = float((trail_vectors[since] @ vectors[j]).max())
            else:
                fresh = float(matrix[j, trail[since]].max())
            red[k] = max(red[k], fresh)
            heapq.heappush(heap, (-(relevance[k] - rest * red[k]), j, k, len(added)))
            continue
        if matrix is None:
            trail_vectors[len(added)] = vectors[j]
        trail[len(added)] = j
        added.append(j)
        room -= tokens[k]
    return added
