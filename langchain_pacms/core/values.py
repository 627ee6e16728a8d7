"""Coverage of the exact values candidates hold (paths, ids, numbers): ``pacms`` in tool loops.

Later agent steps mostly reuse exact values from earlier tool outputs. The objective is facility
location over the values: a value is covered by the kept candidate holding it with the highest
weight, :data:`VALUE_PRIOR` plus its relevance. It is monotone submodular, so the budgeted greedy
(by gain per token) keeps its guarantee; the budget left is filled in relevance order.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence

import numpy as np

from langchain_pacms.core.fill import relevance_fill
from langchain_pacms.core.greedy import problem_greedy
from langchain_pacms.core.kernel import SparseRows
from langchain_pacms.core.objective import CoverageObjective
from langchain_pacms.core.pick import Pick
from langchain_pacms.core.problem import Problem

__all__ = ["VALUE_PRIOR", "value_coverage", "value_rows"]

VALUE_PRIOR = 0.1
"""A value's weight beside its candidate's relevance."""


def value_rows(
    problem: Problem, values: Sequence[Collection[str]], prior: float = VALUE_PRIOR
) -> SparseRows:
    """Candidate ``j``'s row: weight ``prior + rel(j)`` on each distinct value it holds.

    Values are numbered in the order first met, each candidate's in sorted order, so the rows
    (and the sums over them) do not depend on the process's string hashing.

    Example:
        >>> p = Problem.build(np.eye(2, dtype=np.float32), np.zeros(2, np.float32),
        ...                   tokens=[1, 1], budget=2, relevance=[0.5, 0.0])
        >>> value_rows(p, [{"a.py", "42"}, {"42"}]).shape
        (2, 2)
    """
    if len(values) != problem.n:
        raise ValueError(
            f"values must give one collection per candidate ({problem.n}), got {len(values)}"
        )
    ids: dict[str, int] = {}
    columns = [sorted({ids.setdefault(v, len(ids)) for v in sorted(held)}) for held in values]
    indptr = np.zeros(problem.n + 1, dtype=np.int64)
    np.cumsum([len(c) for c in columns], out=indptr[1:])
    indices = np.fromiter((i for c in columns for i in c), dtype=np.int64, count=int(indptr[-1]))
    weight = np.float32(prior) + problem.relevance.astype(np.float32)
    data = np.repeat(weight, np.diff(indptr)).astype(np.float32)
    return SparseRows(indptr, indices, data, len(ids))


def value_coverage(
    problem: Problem, values: Sequence[Collection[str]], *, prior: float = VALUE_PRIOR
) -> Pick:
    """Mandatory items, then the greedy on value coverage per token, then a relevance fill.

    Args:
        problem: The selection instance.
        values: The values each candidate holds, one collection per candidate.
        prior: A value's weight beside its candidate's relevance.

    Returns:
        Picks in greedy order; scores are marginal gains (0 for fill items).

    Example:
        >>> p = Problem.build(np.eye(3, dtype=np.float32), np.zeros(3, np.float32),
        ...                   tokens=[2, 2, 2], budget=4, relevance=[0.9, 0.1, 0.1])
        >>> value_coverage(p, [{"a.py"}, {"a.py"}, {"b.py", "HAT039"}]).order.tolist()
        [0, 2]
    """
    if not prior > 0:
        raise ValueError(f"prior must be > 0, got {prior!r}")
    start = np.flatnonzero(problem.mandatory).astype(np.int64)
    scores = np.full(problem.n, np.nan)
    if int(problem.tokens[start].sum()) > problem.budget:  # as solve() answers it
        return Pick(start, scores, over_budget=True)
    objective = CoverageObjective.of_rows(value_rows(problem, values, prior))
    result = problem_greedy(
        problem, objective, start, scores, complete=functools.partial(relevance_fill, problem)
    )
    info = {
        "coverage": "values",
        "values": objective.targets.shape[0],
        "evaluations": result.evaluations,
        "filled": result.completed,
    }
    return Pick(np.asarray([*start.tolist(), *result.picks], dtype=np.int64), scores, info=info)
