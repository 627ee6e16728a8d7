"""The baseline strategies ``topk``, ``lastk`` and ``rag``: one ranking walked under the budget."""

from __future__ import annotations

import numpy as np

from langchain_pacms.core.fill import relevance_fill
from langchain_pacms.core.pick import Pick, check_flag, mandatory_state, scored, walk
from langchain_pacms.core.problem import Problem

__all__ = ["lastk", "rag", "topk"]


def topk(problem: Problem) -> Pick:
    """Rank by relevance (ties: earlier position) and add every candidate that fits."""
    start, remaining, _ = mandatory_state(problem)
    picked = relevance_fill(problem, start.tolist(), remaining)
    return scored(problem, [*start.tolist(), *picked], problem.relevance.astype(np.float64))


def lastk(problem: Problem, *, contiguous: bool = True) -> Pick:
    """Newest first while the next one fits; ``contiguous=False`` skips misfits and goes on."""
    check_flag("contiguous", contiguous)
    start, remaining, taken = mandatory_state(problem)
    order = problem.recency_order().tolist()
    picked = walk(problem, order, remaining, taken, stop_at_first_misfit=contiguous)
    return scored(problem, [*start.tolist(), *picked], np.zeros(problem.n))


def rag(problem: Problem, *, k: int = 4) -> Pick:
    """The ``k`` most relevant candidates, as a fixed-k retriever returns them, under the budget."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise TypeError(f"rag needs an int k, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"rag needs k >= 1, got {k}")
    start, remaining, taken = mandatory_state(problem)
    ranked = [j for j in problem.relevance_order().tolist() if not taken[j]][:k]
    picked = walk(problem, ranked, remaining, taken)
    return scored(problem, [*start.tolist(), *picked], problem.relevance.astype(np.float64))
