"""What a strategy returns (:class:`Pick`), its signature, and the walks strategies share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from langchain_pacms.core.problem import Problem

__all__ = ["Pick", "Strategy", "check_flag", "mandatory_state", "scored", "walk"]


@dataclass(frozen=True)
class Pick:
    """What a strategy chose.

    Attributes:
        order: Chosen candidate indices in pick order (after ``solve``: mandatory first).
        scores: Per-candidate score at pick time (``pacms``: marginal gain, ``topk``/``rag``:
            relevance, ``mmr``: MMR score, ``lastk``: 0); NaN where not picked.
        over_budget: True when the mandatory items alone exceed the budget.
        info: Strategy diagnostics (e.g. greedy evaluations).
    """

    order: NDArray[np.int64]
    scores: NDArray[np.float64]
    over_budget: bool = False
    info: dict[str, Any] | None = None


def check_flag(name: str, value: Any) -> None:
    """``ValueError`` unless ``value`` is ``True`` or ``False`` (a string such as ``"no"`` is not).

    Example:
        >>> check_flag("density", "no")
        Traceback (most recent call last):
        ...
        ValueError: density must be True or False, got 'no'
    """
    if value not in (True, False):
        raise ValueError(f"{name} must be True or False, got {value!r}")


class Strategy(Protocol):
    """Signature shared by every strategy."""

    def __call__(self, problem: Problem, **options: Any) -> Pick:
        """Choose candidate indices for ``problem``."""
        ...


def walk(
    problem: Problem,
    ranking: Iterable[int],
    remaining: int,
    taken: NDArray[np.bool_],
    *,
    stop_at_first_misfit: bool = False,
) -> list[int]:
    """Add ranked candidates that still fit; ``taken`` is updated in place."""
    added: list[int] = []
    tokens = problem.tokens.tolist()
    for j in ranking:
        if taken[j]:
            continue
        cost = tokens[j]
        if cost > remaining:
            if stop_at_first_misfit:
                break
            continue
        taken[j] = True
        remaining -= cost
        added.append(int(j))
    return added


def scored(problem: Problem, picked: list[int], values: NDArray[np.float64]) -> Pick:
    """The :class:`Pick` of ``picked``, scored by ``values`` (NaN for the others)."""
    scores = np.full(problem.n, np.nan)
    scores[picked] = values[picked]
    return Pick(np.asarray(picked, dtype=np.int64), scores)


def mandatory_state(problem: Problem) -> tuple[NDArray[np.int64], int, NDArray[np.bool_]]:
    """The mandatory items, the budget they leave and the mask of items taken so far."""
    start = np.flatnonzero(problem.mandatory).astype(np.int64)
    remaining = problem.budget - int(problem.tokens[start].sum())
    return start, remaining, problem.mandatory.copy()
