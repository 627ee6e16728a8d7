"""Kernel rows (dense and sparse), row blocks of cosines and the similarity ceiling."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_pacms.core import CoverageObjective, Problem, kernel, solve
from langchain_pacms.core.kernel import DenseRows, SparseRows


def grouped(seed: int, n: int, d: int = 12, budget_share: float = 0.4, **kw: Any) -> Problem:
    """Groups of near-duplicates around random centres (no exact copies)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(2, n // 8), d))
    vectors = centers[rng.integers(0, centers.shape[0], n)] + 0.3 * rng.standard_normal((n, d))
    tokens = rng.integers(1, 60, n)
    return Problem.build(
        vectors,
        rng.standard_normal(d),
        tokens=tokens,
        budget=max(1, int(tokens.sum() * budget_share)),
        **kw,
    )


@st.composite
def sparse_matrices(
    draw: st.DrawFn, max_rows: int, max_density: float
) -> tuple[np.ndarray, np.random.Generator]:
    """A random float32 matrix whose entries are zero but for a drawn share of them, and the
    seeded generator that made it (for the test's further draws)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n, m = draw(st.integers(1, max_rows)), draw(st.integers(0, 30))
    density = draw(st.floats(0.0, max_density))
    return (rng.random((n, m)) * (rng.random((n, m)) < density)).astype(np.float32), rng


@given(sparse_matrices(40, 1.0))
@settings(max_examples=60, deadline=None)
def test_sparse_rows_answer_like_dense_rows(drawn: tuple[np.ndarray, np.random.Generator]) -> None:
    matrix, rng = drawn
    n, m = matrix.shape
    dense, sparse = DenseRows(matrix), SparseRows.from_dense(matrix)
    assert sparse.shape == dense.shape == (n, m)
    coverage = (rng.random(m) * (rng.random(m) < 0.5)).astype(np.float32)
    exact = (np.maximum(matrix, coverage).astype(np.float64) - coverage).sum(axis=1)
    np.testing.assert_allclose(dense.lifts(coverage), exact, atol=1e-9)
    np.testing.assert_allclose(sparse.lifts(coverage), exact, atol=1e-9)
    total = float(coverage.astype(np.float64).sum())
    for j in range(n):
        assert sparse.lift(j, coverage, total) == pytest.approx(exact[j], abs=1e-9)
        assert dense.lift(j, coverage, total) == pytest.approx(exact[j], abs=1e-9)
    a, b = coverage.copy(), coverage.copy()
    for j in rng.permutation(n)[: n // 2]:
        dense.add(int(j), a)
        sparse.add(int(j), b)
    np.testing.assert_array_equal(a, b)


@given(sparse_matrices(30, 0.3))
@settings(max_examples=60, deadline=None)
def test_steady_rows_are_those_no_other_row_can_lower(
    drawn: tuple[np.ndarray, np.random.Generator],
) -> None:
    matrix, _ = drawn
    n, m = matrix.shape
    sparse = SparseRows.from_dense(matrix)
    assert DenseRows(matrix).steady() is None
    steady = sparse.steady()
    for j in range(n):
        alone = np.zeros(m, dtype=np.float32)
        before = sparse.lift(j, alone, 0.0)
        lowered = False
        for k in range(n):
            if k != j:
                coverage = alone.copy()
                sparse.add(k, coverage)
                lowered |= sparse.lift(j, coverage, 0.0) != before
        # Steady: no other row shares a target with it (so none can lower its lift).
        shares = any(bool(((matrix[j] > 0) & (matrix[k] > 0)).any()) for k in range(n) if k != j)
        assert steady[j] == (not shares)
        if steady[j]:
            assert not lowered


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(2, 60),
    tau=st.sampled_from([0.0, 0.3, 0.6, 0.9]),
    ceiling=st.sampled_from([4, 300, 4096]),
)
@settings(max_examples=40, deadline=None)
def test_sparse_kernel_holds_the_dense_weights_exactly(
    seed: int, n: int, tau: float, ceiling: int
) -> None:
    # Built a few rows at a time (the ceiling), the kept weights are the dense matrix's
    # non-zeros, density sums included (up to the rounding of the smaller products).
    p = grouped(seed, n)
    small = dataclasses.replace(p, similarity_ceiling=ceiling)
    options = {"similarity_threshold": tau, "density": True}
    dense = CoverageObjective(p, **options)
    sparse = CoverageObjective(small, **options)
    assert isinstance(dense.rows, DenseRows)
    m = int(dense.targets.shape[0])
    np.testing.assert_array_equal(sparse.targets, dense.targets)
    assert isinstance(sparse.rows, SparseRows) == (4 * n * m > ceiling)
    if isinstance(sparse.rows, SparseRows):
        rebuilt = np.zeros(sparse.rows.shape, dtype=np.float32)
        rows = np.repeat(np.arange(n), np.diff(sparse.rows.indptr))
        rebuilt[rows, sparse.rows.indices] = sparse.rows.data
        assert (sparse.rows.data > 0).all()
        np.testing.assert_allclose(rebuilt, dense.rows.matrix, rtol=1e-5, atol=1e-6)
    members = list(range(0, n, 3))
    # A threshold near 1 magnifies the cosines' float32 rounding (tau = 0.9: tenfold).
    assert sparse.value(members) == pytest.approx(dense.value(members), rel=1e-5, abs=1e-6)


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(20, 150),
    share=st.sampled_from([0.05, 0.1, 0.45, 0.7]),
    tau=st.sampled_from([0.3, 0.6]),
)
@settings(max_examples=30, deadline=None)
def test_pacms_picks_the_same_under_any_ceiling(seed: int, n: int, share: float, tau: float):
    # A dense kernel and cosine matrix, or sparse rows built one row at a time and no matrix:
    # the same picks on pools without exact copies (copies tie, and which copy a tie goes to
    # depends on how BLAS rounded their cosines; see test_frozen_picks).
    p = grouped(seed, n, budget_share=share)
    options = {"similarity_threshold": tau}
    as_built = solve(p, "pacms", **options)
    small = solve(dataclasses.replace(p, similarity_ceiling=16), "pacms", **options)
    assert small.order.tolist() == as_built.order.tolist()
    np.testing.assert_allclose(small.scores, as_built.scores, rtol=1e-5, atol=1e-7)


def test_sparse_kernel_memory_follows_the_near_duplicates() -> None:
    p = grouped(0, 600, d=24, similarity_ceiling=64 * 1024)
    objective = CoverageObjective(p, similarity_threshold=0.6, density=True)
    assert isinstance(objective.rows, SparseRows)
    dense_bytes = 4 * p.n * objective.targets.shape[0]
    assert objective.rows.nbytes < dense_bytes / 4  # about 3 near-duplicates a row here
    assert not p.precompute_cosines() and p.cosine_matrix is None  # 600^2 floats > 64 KiB


@pytest.mark.parametrize("ceiling", [4, 100, 4 * 30 * 7, 10**9])
def test_cosine_blocks_stay_within_the_ceiling(ceiling: int) -> None:
    p = grouped(1, 30, similarity_ceiling=ceiling)
    cols = np.array([3, 0, 29, 3, 11, 12, 5])
    blocks = list(p.cosine_blocks(cols))
    assert [start for start, _ in blocks] == list(
        range(0, 30, blocks[1][0] if len(blocks) > 1 else 30)
    )
    assert all(b.nbytes <= max(ceiling, 4 * cols.size) for _, b in blocks)
    stacked = np.concatenate([b for _, b in blocks])
    np.testing.assert_allclose(stacked, p.cosine_columns(cols), atol=1e-6)
    assert all(b.flags.c_contiguous and b.flags.writeable for _, b in blocks)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "64"])
def test_build_rejects_a_bad_ceiling(bad: Any) -> None:
    with pytest.raises(ValueError, match="similarity_ceiling"):
        Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1, similarity_ceiling=bad)


def test_the_ceiling_carries_over_to_linked_problems() -> None:
    p = grouped(2, 10, similarity_ceiling=123)
    assert p.with_budget(3).similarity_ceiling == 123
    assert p.with_costs(tokens=[1] * 10, budget=2).similarity_ceiling == 123


@pytest.mark.parametrize("ceiling", [4, 10**9], ids=["sparse", "dense"])
@pytest.mark.parametrize("block", [1, 3, 10**9])
def test_gains_along_are_gain_then_add(
    monkeypatch: pytest.MonkeyPatch, ceiling: int, block: int
) -> None:
    # Running maxima over blocks of rows give each pick's gain and the raised coverage; on
    # dense rows these are the alternating calls' values bit for bit (the completion's scores
    # do not change), whatever the block size.
    monkeypatch.setattr(kernel, "_ALONG_BYTES", block)
    p = grouped(4, 80, similarity_ceiling=ceiling)
    objective = CoverageObjective(p, similarity_threshold=0.6, density=True)
    one = objective.coverage_of([3, 60])
    two = one.copy()
    picks = [5, 17, 40, 41, 79, 0, 12, 13, 14]
    expected = []
    for j in picks:
        expected.append(objective.gain(j, two))
        objective.add(j, two)
    gains = objective.gains_along(picks, one, objective.covered(one))
    np.testing.assert_array_equal(one, two)
    if ceiling > 4:
        assert gains == expected
    else:
        np.testing.assert_allclose(gains, expected, rtol=0, atol=1e-12)


def _copies(seed: int, n: int, d: int = 12) -> Problem:
    """Grouped vectors where about a tenth are exact copies of row 0 (ties)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(2, n // 8), d))
    vectors = centers[rng.integers(0, centers.shape[0], n)] + 0.3 * rng.standard_normal((n, d))
    vectors[rng.random(n) < 0.1] = vectors[0]
    tokens = rng.integers(1, 60, n)
    return Problem.build(
        vectors, rng.standard_normal(d), tokens=tokens, budget=max(1, int(tokens.sum() * 0.4))
    )


@given(seed=st.integers(0, 2**16), n=st.integers(2, 80), tau=st.sampled_from([0.5, 0.6, 0.85]))
@settings(max_examples=40, deadline=None)
def test_a_kept_matrix_gives_sparse_rows_with_the_dense_values(seed: int, n: int, tau: float):
    # With the cosine matrix kept and few cosines above tau, the rows are read from the matrix
    # as sparse rows: the dense rows' non-zeros and density bit for bit, so every value agrees.
    p = _copies(seed, n)
    kept = dataclasses.replace(p)
    assert kept.precompute_cosines()
    options = {"similarity_threshold": tau, "density": True}
    dense = CoverageObjective(p, **options)  # no matrix kept: one dense block
    rows = CoverageObjective(kept, **options).rows
    assert isinstance(dense.rows, DenseRows)
    nonzero = int(np.count_nonzero(kept.cosine_matrix > np.float32(tau)))
    if nonzero > n * dense.targets.shape[0] // 8:
        assert isinstance(rows, DenseRows)
        return
    assert isinstance(rows, SparseRows)
    rebuilt = np.zeros(rows.shape, dtype=np.float32)
    rebuilt[np.repeat(np.arange(n), np.diff(rows.indptr)), rows.indices] = rows.data
    np.testing.assert_array_equal(rebuilt, dense.rows.matrix)


def test_a_dense_kernel_stays_dense_with_a_kept_matrix() -> None:
    p = grouped(3, 60)
    assert p.precompute_cosines()
    assert isinstance(CoverageObjective(p, similarity_threshold=0.0).rows, DenseRows)
    assert kernel.sparse_rows(p, np.arange(60), 0.0, lambda c: c, max_nonzeros=10) is None


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 40),
    m=st.integers(1, 30),
    density=st.floats(0.0, 1.0),
    copies=st.booleans(),
)
@settings(max_examples=80, deadline=None)
def test_sparse_lifts_along_are_lift_then_add_bit_for_bit(
    seed: int, n: int, m: int, density: float, copies: bool
) -> None:
    rng = np.random.default_rng(seed)
    matrix = (rng.random((n, m)) * (rng.random((n, m)) < density)).astype(np.float32)
    if copies:
        matrix[rng.random(n) < 0.3] = matrix[0]
    sparse = SparseRows.from_dense(matrix)
    start = (rng.random(m) * (rng.random(m) < 0.4)).astype(np.float32)
    picks = rng.permutation(n)[: int(rng.integers(0, n + 1))].tolist()
    one, two = start.copy(), start.copy()
    expected = []
    for j in picks:
        expected.append(sparse.lift(j, two, 0.0))
        sparse.add(j, two)
    assert sparse.lifts_along(picks, one, 0.0) == expected
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("as_sparse", [False, True])
def test_cover_raises_coverage_like_adding_each_row(as_sparse: bool) -> None:
    rng = np.random.default_rng(7)
    matrix = (rng.random((700, 50)) * (rng.random((700, 50)) < 0.2)).astype(np.float32)
    rows = SparseRows.from_dense(matrix) if as_sparse else DenseRows(matrix)
    members = rng.permutation(700)[:600]
    one = (rng.random(50) * 0.3).astype(np.float32)
    two = one.copy()
    for j in members:
        rows.add(int(j), two)
    rows.cover(members, one)
    np.testing.assert_array_equal(one, two)
