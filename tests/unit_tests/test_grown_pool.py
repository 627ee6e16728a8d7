"""A pool that grew since the last call: carried-over rows and cosines give a fresh call's picks.

* :meth:`Problem.grown` equals :meth:`Problem.build` on all the vectors (the same unit rows, and
  where :func:`rows_stable` holds, the same cosine matrix bit for bit), whether the matrix is
  carried over, copied into a new buffer, or not carried at all;
* :meth:`Problem.near_pairs`, and its extension by a grown problem, list exactly the pairs at or
  above the threshold;
* ``ContextSelector`` with a dense embedder: each call on a pool that grew (any query, any
  budget) selects what a fresh selector selects, sync and async, and carries the cosines over
  where this BLAS allows it.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pacms_fakes import TableEmbeddings

import langchain_pacms.core.problem as problem_module
from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.core import Problem, rows_stable, solve


def _clustered(n: int, d: int, seed: int, copies: int = 3) -> np.ndarray:
    """Rows in a few tight groups (near-duplicates for the kernel), some of them exact copies."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(2, n // 8), d))
    rows = centres[rng.integers(0, centres.shape[0], n)] + 0.08 * rng.standard_normal((n, d))
    for k in range(min(copies, n // 2)):
        rows[n - 1 - k] = rows[k]
    return rows.astype(np.float32)


def _problems(
    rows: np.ndarray, n0: int, seed: int
) -> tuple[Problem, Problem, np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(5, 200, rows.shape[0])
    query = rows[0] + 0.3 * rng.standard_normal(rows.shape[1]).astype(np.float32)
    budget = max(1, int(tokens.sum() * 0.4))
    base = Problem.build(rows[:n0], query, tokens=tokens[:n0], budget=budget)
    fresh = Problem.build(rows, query, tokens=tokens, budget=budget)
    return base, fresh, tokens, query, budget


def _same_picks(a: Problem, b: Problem) -> None:
    for name in ("pacms", "pacms_paper", "mmr"):
        left, right = solve(a, name), solve(b, name)
        assert left.order.tolist() == right.order.tolist(), name
        np.testing.assert_array_equal(left.scores, right.scores)


def test_grown_problem_equals_a_built_one_and_carries_the_cosines() -> None:
    rows = _clustered(300, 48, 0)
    base, fresh, tokens, query, budget = _problems(rows, 290, 0)
    assert base.precompute_cosines()
    solve(base, "pacms")  # lists the near pairs, which the grown problem extends
    grown = base.grown(rows[290:], query, tokens=tokens, budget=budget)
    np.testing.assert_array_equal(grown.vectors, fresh.vectors)
    np.testing.assert_array_equal(grown.query, fresh.query)
    fresh.precompute_cosines()
    if rows_stable(48):
        matrix = grown.cosine_matrix
        assert matrix is not None and not matrix.flags.writeable
        np.testing.assert_array_equal(matrix, fresh.cosine_matrix)
        assert np.shares_memory(
            matrix, grown.grown(rows[:0], query, tokens=tokens, budget=budget).cosine_matrix
        )
        tau = next(key[1] for key in base._memo if isinstance(key, tuple) and key[0] == "near")
        carried = grown._memo[("near", tau)]
        listed = fresh.near_pairs(tau)
        assert listed is not None
        np.testing.assert_array_equal(carried.indptr, listed.indptr)
        np.testing.assert_array_equal(carried.cols, listed.cols)
    _same_picks(grown, fresh)


def test_growing_one_problem_twice_keeps_both_matrices_right() -> None:
    rows = _clustered(120, 16, 1)
    other = _clustered(120, 16, 2)[100:]
    base, fresh, tokens, query, budget = _problems(rows, 100, 1)
    base.precompute_cosines()
    first = base.grown(rows[100:], query, tokens=tokens, budget=budget)
    second = base.grown(other, query, tokens=tokens, budget=budget)  # must not overwrite first
    fresh.precompute_cosines()
    both = np.concatenate([rows[:100], other])
    again = Problem.build(both, query, tokens=tokens, budget=budget)
    again.precompute_cosines()
    if rows_stable(16):
        np.testing.assert_array_equal(first.cosine_matrix, fresh.cosine_matrix)
        np.testing.assert_array_equal(second.cosine_matrix, again.cosine_matrix)
    _same_picks(first, fresh)
    _same_picks(second, again)


def test_a_chain_of_grown_problems_past_the_buffer_stays_exact() -> None:
    rows = _clustered(700, 24, 3, copies=6)
    rng = np.random.default_rng(3)
    tokens = rng.integers(5, 200, 700)
    query = rows[1]
    problem = Problem.build(rows[:400], query, tokens=tokens[:400], budget=5_000)
    problem.precompute_cosines()
    for end in range(430, 701, 30):  # 400 rows leave room for 64 more: buffers are replaced
        problem = problem.grown(rows[problem.n : end], query, tokens=tokens[:end], budget=5_000)
        solve(problem, "pacms")
    fresh = Problem.build(rows, query, tokens=tokens, budget=5_000)
    fresh.precompute_cosines()
    if rows_stable(24):
        np.testing.assert_array_equal(problem.cosine_matrix, fresh.cosine_matrix)
    _same_picks(problem, fresh)


def test_without_stable_rows_the_grown_problem_computes_its_cosines_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(problem_module, "rows_stable", lambda dim: False)
    rows = _clustered(80, 12, 4)
    base, fresh, tokens, query, budget = _problems(rows, 70, 4)
    base.precompute_cosines()
    grown = base.grown(rows[70:], query, tokens=tokens, budget=budget)
    assert grown.cosine_matrix is None
    _same_picks(grown, fresh)


def test_grown_rejects_bad_input() -> None:
    rows = _clustered(20, 6, 5)
    base, _, tokens, query, budget = _problems(rows, 15, 5)
    with pytest.raises(ValueError, match="shape"):
        base.grown(np.ones((2, 5)), query, tokens=tokens[:17], budget=budget)
    with pytest.raises(ValueError, match="query"):
        base.grown(rows[15:], query[:5], tokens=tokens, budget=budget)
    with pytest.raises(ValueError, match="one entry per candidate"):
        base.grown(rows[15:], query, tokens=tokens[:19], budget=budget)
    with pytest.raises(ValueError, match="budget"):
        base.grown(rows[15:], query, tokens=tokens, budget=0)


@settings(max_examples=40, deadline=None)
@given(
    n0=st.integers(1, 40),
    grow=st.integers(0, 6),
    d=st.integers(2, 24),
    seed=st.integers(0, 2**16),
    threshold=st.sampled_from([0.0, 0.5, 0.9, 0.99]),
)
def test_near_pairs_of_grown_problems_are_those_of_the_whole_matrix(
    n0: int, grow: int, d: int, seed: int, threshold: float
) -> None:
    rows = _clustered(n0 + grow, d, seed, copies=2)
    base, fresh, tokens, query, budget = _problems(rows, n0, seed)
    base.precompute_cosines()
    base.near_pairs(threshold)
    grown = base.grown(rows[n0:], query, tokens=tokens, budget=budget)
    matrix = grown.cosine_matrix
    if matrix is None:  # this BLAS does not give the pieces the whole product's bits here
        _same_picks(grown, fresh)
        return
    fresh.precompute_cosines()
    np.testing.assert_array_equal(matrix, fresh.cosine_matrix)
    pairs = grown.near_pairs(threshold)
    assert pairs is not None
    want_rows, want_cols = np.nonzero(matrix >= np.float32(threshold))
    np.testing.assert_array_equal(pairs.rows, want_rows)
    np.testing.assert_array_equal(pairs.cols, want_cols)
    _same_picks(grown, fresh)


def _conversation(n: int, d: int = 32) -> tuple[list[Candidate], list[str], TableEmbeddings]:
    rows = _clustered(n + 4, d, 7, copies=5)
    texts = [f"message {i}" for i in range(n)]
    queries = [f"query {k}" for k in range(4)]
    table = {t: r.tolist() for t, r in zip(texts + queries, rows)}
    rng = np.random.default_rng(7)
    cands = [
        Candidate(t, id=f"m{i}", position=i, tokens=int(c))
        for i, (t, c) in enumerate(zip(texts, rng.integers(5, 300, n)))
    ]
    return cands, queries, TableEmbeddings(table)


def _assert_same(left, right) -> None:  # type: ignore[no-untyped-def]
    assert left.kept_ids == right.kept_ids
    assert left.pick_order == right.pick_order
    assert dict(left.gains) == dict(right.gains)
    assert dict(left.relevance) == dict(right.relevance)


def test_selector_on_a_growing_pool_selects_what_a_fresh_selector_selects() -> None:
    cands, queries, model = _conversation(460)
    growing = ContextSelector(model)
    carried = 0
    for step, end in enumerate(range(400, 461, 6)):
        query = queries[step % len(queries)]
        budget = 0.3 if step % 2 else 0.6
        before = growing._last_pool
        got = growing.select(cands[:end], query, budget=("ratio", budget))
        want = ContextSelector(model).select(cands[:end], query, budget=("ratio", budget))
        _assert_same(got, want)
        now = growing._last_pool
        assert now is not None and now.problem is not None and now.problem.n == end
        if before is not None and before.problem is not None:
            old, new = before.problem.cosine_matrix, now.problem.cosine_matrix
            if old is not None and new is not None and np.shares_memory(old, new):
                carried += 1
    # The first grown call copies the matrix into a buffer with room; the next nine write into it.
    assert carried == (9 if rows_stable(32) else 0)
    # The same texts under another query: nothing to embed but the query, no product at all.
    before = growing._last_pool
    got = growing.select(cands[:460], "query 3", budget=("ratio", 0.5))
    _assert_same(got, ContextSelector(model).select(cands[:460], "query 3", budget=("ratio", 0.5)))
    now = growing._last_pool
    assert before is not None and before.problem is not None and before.problem.n == 460
    assert now is not None and now.problem is not None
    if rows_stable(32):
        assert now.problem.cosine_matrix is before.problem.cosine_matrix or np.shares_memory(
            now.problem.cosine_matrix, before.problem.cosine_matrix
        )


def test_async_selector_on_a_growing_pool_selects_what_a_fresh_selector_selects() -> None:
    cands, queries, model = _conversation(120)

    async def run() -> None:
        growing = ContextSelector(model)
        for end in (100, 101, 110, 110, 120):
            got = await growing.aselect(cands[:end], queries[end % 4], budget=1_500)
            want = ContextSelector(model).select(cands[:end], queries[end % 4], budget=1_500)
            _assert_same(got, want)

    asyncio.run(run())


def test_a_pool_that_is_not_the_last_one_plus_new_texts_is_embedded_afresh() -> None:
    cands, queries, model = _conversation(90)
    selector = ContextSelector(model)
    selector.select(cands[:80], queries[0], budget=("ratio", 0.5))
    reordered = [cands[1], cands[0], *cands[2:85]]
    got = selector.select(reordered, queries[0], budget=("ratio", 0.5))
    _assert_same(got, ContextSelector(model).select(reordered, queries[0], budget=("ratio", 0.5)))
    last = selector._last_pool
    assert last is not None and last.base is None  # not grown from the last pool
