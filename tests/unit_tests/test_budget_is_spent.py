"""``pacms`` spends the budget: it stops only when no candidate left out fits the room left.

The distinct fill passes over near-copies of what is kept, but only while something else fits;
with an embedder whose cosines are high across the board most of a pool is a near-copy of
something, and the budget must not stay empty because of it.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_pacms.core import Problem, solve
from langchain_pacms.core.fill import EXACT_COPY_COSINE


def _high_cosine_pool(seed: int, n: int, spread: float) -> np.ndarray:
    """Unit vectors around one common direction (mean cosine near ``1 - spread**2``)."""
    rng = np.random.default_rng(seed)
    common = np.zeros(16)
    common[0] = 1.0
    vectors = common + spread * rng.normal(size=(n, 16)) / 4.0
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _room_left_fits_nothing(problem: Problem, order: np.ndarray) -> bool:
    """No candidate left out fits the room left, but exact copies of kept ones."""
    kept = np.zeros(problem.n, dtype=bool)
    kept[order] = True
    room = problem.budget - int(problem.tokens[kept].sum())
    fits = np.flatnonzero(~kept & (problem.tokens <= room))
    if not fits.size:
        return True
    if not kept.any():
        return False
    cosines = problem.vectors[fits].astype(np.float64) @ problem.vectors[kept].T
    return bool((cosines.max(axis=1) >= EXACT_COPY_COSINE).all())


def test_a_pool_of_near_copies_fills_the_budget() -> None:
    # every pair sits far above the kernel threshold: before, the distinct fill kept one
    # candidate and passed over every other one as its near-copy
    vectors = _high_cosine_pool(0, 200, spread=0.1)
    assert float((vectors @ vectors.T).min()) > 0.85
    problem = Problem.build(
        vectors, vectors[0], tokens=np.full(200, 10), budget=1000, relevance=np.linspace(1, 0, 200)
    )
    pick = solve(problem, "pacms", similarity_threshold=0.85)
    used = int(problem.tokens[pick.order].sum())
    assert used == 1000
    assert _room_left_fits_nothing(problem, pick.order)


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 60),
    spread=st.sampled_from([0.05, 0.3, 1.0, 4.0]),
    share=st.floats(0.02, 0.9),
    mandatory=st.integers(0, 3),
    fill=st.sampled_from(["distinct", "diverse", "relevance"]),
    threshold=st.sampled_from([0.0, 0.5, 0.85, 0.99]),
    calibrate=st.booleans(),
)
def test_pacms_keeps_filling_while_a_left_out_candidate_fits(
    seed: int,
    n: int,
    spread: float,
    share: float,
    mandatory: int,
    fill: str,
    threshold: float,
    calibrate: bool,
) -> None:
    rng = np.random.default_rng(seed)
    vectors = _high_cosine_pool(seed, n, spread)
    vectors[: n // 4] = vectors[n // 4 : 2 * (n // 4)]  # a quarter are exact copies
    tokens = rng.integers(1, 200, size=n)
    musts = np.zeros(n, dtype=bool)
    musts[rng.choice(n, size=min(mandatory, n - 1), replace=False)] = True
    budget = max(1, int(share * tokens.sum()))
    if int(tokens[musts].sum()) > budget:
        musts[:] = False
    problem = Problem.build(vectors, vectors[0], tokens=tokens, budget=budget, mandatory=musts)
    pick = solve(problem, "pacms", similarity_threshold=threshold, fill=fill, calibrate=calibrate)
    assert int(problem.tokens[pick.order].sum()) <= budget
    assert _room_left_fits_nothing(problem, pick.order)
    # so at least 98 % of the budget is used whenever every candidate is within 2 % of it
    # and the candidates that are not exact copies fill it
    distinct = int(tokens[n // 4 :].sum())
    if int(tokens.max()) <= 0.02 * budget and distinct >= budget:
        assert int(problem.tokens[pick.order].sum()) >= 0.98 * budget


def test_an_exact_copy_is_not_added_even_with_room_left() -> None:
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.6, 0.8]])
    problem = Problem.build(vectors, [1.0, 0.0], tokens=[5, 5, 5], budget=100)
    kept = sorted(solve(problem, "pacms", similarity_threshold=0.85).order.tolist())
    assert kept in ([0, 2], [1, 2])  # one of the two copies, and the other candidate
