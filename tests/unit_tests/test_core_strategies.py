"""Hand-built instances with known answers for every strategy, the registry and `solve`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from langchain_pacms.core import (
    PAPER_OPTIONS,
    CoverageObjective,
    Pick,
    Problem,
    StrategyError,
    auto_relevance_weight,
    available_strategies,
    feedback_relevance,
    get_strategy,
    register_strategy,
    solve,
)
from langchain_pacms.core import problem as problem_module
from langchain_pacms.core import registry as strategies_module


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float64)
    return v / np.linalg.norm(v)


def kept(pick: Pick) -> set[int]:
    return set(pick.order.tolist())


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    registry = dict(strategies_module._REGISTRY)
    monkeypatch.setattr(strategies_module, "_REGISTRY", registry)
    return registry


# --------------------------------------------------------------------------------------------
# Problem
# --------------------------------------------------------------------------------------------


def test_problem_relevance_is_clipped_cosine():
    vectors = np.array([[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0], [1.0, 1.0]])
    p = Problem.build(vectors, [5.0, 0.0], tokens=[1, 1, 1, 1], budget=2)
    np.testing.assert_allclose(p.relevance, [1.0, 0.0, 0.0, math.sqrt(0.5)], atol=1e-6)
    assert p.relevance.dtype == np.float32


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"budget": 0}, "budget"),
        ({"budget": -3}, "budget"),
        ({"budget": 2.5}, "budget"),
        ({"budget": True}, "budget"),
        ({"tokens": [1, -1]}, ">= 0"),
        ({"tokens": [1.5, 1.0]}, "integers"),
        ({"tokens": [[1, 1]]}, "1-D"),
        ({"tokens": [1, 1, 1]}, "shape"),
        ({"query": [[1.0, 0.0]]}, "1-D"),
        ({"mandatory": [True]}, "one entry"),
        ({"positions": [0, 1, 2]}, "one entry"),
    ],
)
def test_problem_build_rejects_bad_input(kwargs: dict[str, Any], match: str):
    args: dict[str, Any] = {"tokens": [1, 1], "budget": 2}
    query = kwargs.pop("query", [1.0, 0.0])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Problem.build(np.eye(2), query, **args)


def test_with_budget_changes_only_the_budget_and_shares_the_kernel():
    p = Problem.build(np.eye(3), [1.0, 1.0, 0.0], tokens=[1, 2, 3], budget=2)
    q = p.with_budget(5)
    assert (q.budget, p.budget) == (5, 2)
    for name in ("vectors", "query", "tokens", "mandatory", "positions"):
        assert getattr(q, name) is getattr(p, name)
    a = CoverageObjective(p, similarity_threshold=0.5, density=True)
    b = CoverageObjective(q.with_budget(1), similarity_threshold=0.5, density=True)
    weights = a.rows.matrix  # type: ignore[union-attr]  # a small pool: dense rows
    assert b.rows.matrix is weights and b.targets is a.targets  # type: ignore[union-attr]
    assert not weights.flags.writeable
    # Other kernel settings get their own weights; so does an unlinked problem.
    other = CoverageObjective(q, similarity_threshold=0.0).rows
    assert other.matrix is not weights  # type: ignore[union-attr]
    unlinked = Problem.build(np.eye(3), [1.0, 1.0, 0.0], tokens=[1, 2, 3], budget=2)
    c = CoverageObjective(unlinked, similarity_threshold=0.5, density=True)
    assert c.rows.matrix is not weights  # type: ignore[union-attr]
    np.testing.assert_array_equal(c.rows.matrix, weights)  # type: ignore[union-attr]


def test_shared_builds_once_per_problem_and_its_linked_problems():
    calls: list[int] = []

    def build() -> int:
        calls.append(1)
        return len(calls)

    p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1)
    assert [p.shared("k", build), p.shared("k", build)] == [1, 1]
    q = p.with_budget(2)
    assert [q.shared("k", build), q.shared("other", build)] == [1, 2]
    again = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1)  # not linked
    assert again.shared("k", build) == 3


@pytest.mark.parametrize(("limit", "precompute"), [(0, True), (10_000, True), (10_000, False)])
def test_cosine_columns_are_the_vector_products(
    monkeypatch: pytest.MonkeyPatch, limit: int, precompute: bool
):
    # Columns come from the kept matrix when there is one, from the vectors otherwise.
    monkeypatch.setattr(problem_module, "COSINE_MATRIX_LIMIT", limit)
    rng = np.random.default_rng(3)
    p = Problem.build(
        rng.standard_normal((30, 6)), rng.standard_normal(6), tokens=[1] * 30, budget=5
    )
    kept = p.precompute_cosines() if precompute else False
    assert kept == (precompute and limit >= 30)
    assert (p.cosine_matrix is not None) == kept
    if kept:
        assert p.cosine_matrix is not None and not p.cosine_matrix.flags.writeable
        np.testing.assert_allclose(p.cosine_matrix, p.vectors @ p.vectors.T, atol=1e-6)
        assert p.with_budget(9).cosine_matrix is p.cosine_matrix
    cols = np.array([7, 4, 12, 4])
    block = p.cosine_columns(cols)
    np.testing.assert_allclose(block, p.vectors @ p.vectors[cols].T, atol=1e-6)
    assert block.flags.c_contiguous and block.dtype == np.float32  # one layout on both paths
    block[:] = 7.0  # a new array: writing to it changes nothing the problem keeps
    np.testing.assert_allclose(p.cosine_columns(cols), p.vectors @ p.vectors[cols].T, atol=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_pacms_picks_do_not_depend_on_the_cosine_matrix(monkeypatch: pytest.MonkeyPatch, seed: int):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 40, 80)
    p = Problem.build(
        rng.standard_normal((80, 12)),
        rng.standard_normal(12),
        tokens=tokens,
        budget=int(tokens.sum() * 0.4),
    )
    with_matrix = solve(p, "pacms", similarity_threshold=0.3, gain_floor=0.3)
    assert with_matrix.info["filled"] > 0  # the fill ran, so both of its paths are compared
    monkeypatch.setattr(problem_module, "COSINE_MATRIX_LIMIT", 0)
    without = solve(
        Problem.build(p.vectors, p.query, tokens=tokens, budget=p.budget),
        "pacms",
        similarity_threshold=0.3,
        gain_floor=0.3,
    )
    assert without.order.tolist() == with_matrix.order.tolist()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_with_budget_rejects_bad_budgets(bad: Any):
    p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=1)
    with pytest.raises(ValueError, match="budget"):
        p.with_budget(bad)


def test_recency_and_relevance_orders_break_ties_by_position():
    p = Problem.build(
        np.array([[1.0, 0.0]] * 4),
        [1.0, 0.0],
        tokens=[1] * 4,
        budget=4,
        positions=[3, 0, 2, 1],
    )
    assert p.recency_order().tolist() == [0, 2, 3, 1]
    assert p.relevance_order().tolist() == [1, 3, 2, 0]


# --------------------------------------------------------------------------------------------
# topk / lastk / rag
# --------------------------------------------------------------------------------------------


def test_topk_takes_most_relevant_that_fit():
    p = Problem.build(np.eye(3), [1.0, 0.2, 0.0], tokens=[4, 4, 4], budget=8)
    assert solve(p, "topk").order.tolist() == [0, 1]


def test_topk_skips_what_does_not_fit_and_keeps_walking():
    # Most relevant item is too big; the walk continues down the ranking.
    vectors = np.array([unit(1, 0.0), unit(1, 0.5), unit(1, 1.0), unit(0, 1)])
    p = Problem.build(vectors, [1.0, 0.0], tokens=[10, 5, 3, 3], budget=8)
    pick = solve(p, "topk")
    assert pick.order.tolist() == [1, 2]
    np.testing.assert_allclose(pick.scores[[1, 2]], p.relevance[[1, 2]])
    assert np.isnan(pick.scores[[0, 3]]).all()


def test_topk_ties_break_by_earlier_position():
    p = Problem.build(np.ones((3, 2)), [1.0, 1.0], tokens=[1, 1, 1], budget=2, positions=[7, 3, 5])
    assert kept(solve(p, "topk")) == {1, 2}


def test_lastk_is_a_contiguous_recent_window():
    # Newest first: 4 and 3 fit, 2 does not -> stop (1 would fit but is not contiguous).
    p = Problem.build(np.eye(5), np.ones(5), tokens=[2, 2, 5, 2, 2], budget=7)
    pick = solve(p, "lastk")
    assert kept(pick) == {3, 4}
    assert pick.order.tolist() == [4, 3]


def test_lastk_uses_positions_not_indices_and_charges_mandatory_first():
    p = Problem.build(
        np.eye(4),
        np.ones(4),
        tokens=[3, 2, 2, 2],
        budget=7,
        positions=[0, 30, 10, 20],
        mandatory=[True, False, False, False],
    )
    pick = solve(p, "lastk")
    # 3 tokens for the mandatory item, then newest (index 1, pos 30) and index 3 (pos 20).
    assert pick.order.tolist() == [0, 1, 3]


def test_rag_takes_exactly_k_most_relevant_when_they_fit():
    vectors = np.array([unit(1, 0.1 * i) for i in range(6)])
    p = Problem.build(vectors, [1.0, 0.0], tokens=[1] * 6, budget=100)
    assert solve(p, "rag", k=2).order.tolist() == [0, 1]
    assert solve(p, "rag").order.tolist() == [0, 1, 2, 3]  # default k=4


def test_rag_caps_by_budget_and_does_not_reach_past_k():
    vectors = np.array([unit(1, 0.1 * i) for i in range(6)])
    p = Problem.build(vectors, [1.0, 0.0], tokens=[5, 9, 5, 1, 1, 1], budget=10)
    # top-3 are 0, 1, 2; 1 does not fit after 0; items beyond k are never used.
    assert solve(p, "rag", k=3).order.tolist() == [0, 2]


def test_rag_counts_k_beyond_mandatory_items():
    vectors = np.array([unit(1, 0.1 * i) for i in range(5)])
    p = Problem.build(
        vectors, [1.0, 0.0], tokens=[1] * 5, budget=100, mandatory=[True, False, False, False, True]
    )
    assert solve(p, "rag", k=2).order.tolist() == [0, 4, 1, 2]


def test_rag_rejects_bad_k():
    p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=2)
    with pytest.raises(ValueError, match="k >= 1"):
        solve(p, "rag", k=0)


# --------------------------------------------------------------------------------------------
# mmr
# --------------------------------------------------------------------------------------------


def _mmr_instance(budget: int) -> Problem:
    a = unit(0.95, 0.312, 0.0)  # very relevant
    b = unit(0.94, 0.341, 0.0)  # near-duplicate of a, almost as relevant
    c = unit(0.8, -0.2, 0.566)  # less relevant, different
    return Problem.build(np.array([a, b, c]), [1.0, 0.0, 0.0], tokens=[1, 1, 1], budget=budget)


def test_mmr_prefers_diversity_where_topk_takes_the_duplicate():
    p = _mmr_instance(budget=2)
    assert kept(solve(p, "topk")) == {0, 1}
    pick = solve(p, "mmr", lambda_mult=0.5)
    assert pick.order.tolist() == [0, 2]
    # lambda_mult=1 is pure relevance.
    assert solve(p, "mmr", lambda_mult=1.0).order.tolist() == [0, 1]


def test_mmr_scores_are_the_step_scores():
    p = _mmr_instance(budget=3)
    pick = solve(p, "mmr", lambda_mult=0.5)
    assert pick.order.tolist() == [0, 2, 1]
    v = p.vectors.astype(np.float64)
    rel = v @ p.query
    assert pick.scores[0] == pytest.approx(rel[0], abs=1e-6)
    assert pick.scores[2] == pytest.approx(0.5 * rel[2] - 0.5 * v[2] @ v[0], abs=1e-6)
    assert pick.scores[1] == pytest.approx(
        0.5 * rel[1] - 0.5 * max(v[1] @ v[0], v[1] @ v[2]), abs=1e-6
    )


def test_mmr_walks_the_ranking_skipping_misfits():
    a, b, c = _mmr_instance(3).vectors
    p = Problem.build(np.array([a, b, c]), [1.0, 0.0, 0.0], tokens=[1, 1, 5], budget=3)
    # ranking is 0, 2, 1; item 2 does not fit, so 1 is taken.
    assert solve(p, "mmr").order.tolist() == [0, 1]


def test_mmr_rejects_bad_lambda():
    with pytest.raises(ValueError, match="lambda_mult"):
        solve(_mmr_instance(2), "mmr", lambda_mult=1.5)


# --------------------------------------------------------------------------------------------
# pacms
# --------------------------------------------------------------------------------------------


def _clusters() -> Problem:
    # Three near-identical relevant items (cluster A, item 0 in the middle) and one less
    # relevant item B orthogonal to all of A.
    a = unit(1.0, 0.0, 0.0, 0.0)
    a2 = unit(1.0, 0.0, 0.0, 0.001)
    a3 = unit(1.0, 0.0, 0.0, -0.001)
    b = unit(0.0, 1.0, 0.5, 0.0)
    vectors = np.array([a, a2, a3, b])
    return Problem.build(vectors, unit(1.0, 1.0, 0.0, 0.0), tokens=[1, 1, 1, 1], budget=2)


def test_pacms_covers_both_clusters_where_topk_keeps_duplicates():
    p = _clusters()
    assert kept(solve(p, "topk")) == {0, 1}
    assert kept(solve(p, "pacms")) == {0, 3}
    assert kept(solve(p, "pacms", relevance_weight=0.3)) == {0, 3}


def test_pacms_gains_are_marginal_gains():
    p = _clusters()
    pick = solve(p, "pacms", fill=False)
    obj = CoverageObjective(p, similarity_threshold=0.6, density=True)  # the defaults
    first, second = pick.order.tolist()
    assert pick.scores[first] == pytest.approx(obj.value([first]), rel=1e-6)
    assert pick.scores[second] == pytest.approx(
        obj.value([first, second]) - obj.value([first]), rel=1e-6
    )
    assert pick.info is not None and pick.info["relevance_weight"] == 0.0


def test_pacms_with_full_relevance_weight_matches_topk_on_equal_costs():
    rng = np.random.default_rng(3)
    p = Problem.build(
        rng.standard_normal((30, 8)), rng.standard_normal(8), tokens=[7] * 30, budget=70
    )
    assert kept(solve(p, "pacms", relevance_weight=1.0, fill=False)) == kept(solve(p, "topk"))


def test_pacms_best_single_item_beats_cost_benefit_greedy():
    # Greedy by gain per token takes the cheap item first; the big item then no longer fits.
    # The best-single-item check keeps the big item instead.
    p = Problem.build(np.eye(2), [1.0, 0.2], tokens=[10, 1], budget=10)
    pick = solve(p, "pacms", relevance_weight=1.0)
    assert pick.order.tolist() == [0]
    assert pick.scores[0] == pytest.approx(1.0 / math.sqrt(1.04), rel=1e-6)


def test_pacms_cost_exponent_zero_ignores_cost():
    # Item 0: gain 1.0 for 4 tokens; items 1, 2: gain 0.6 for 1 token each. Budget 5.
    vectors = np.array([unit(1, 0, 0), unit(0.6, 0.8, 0), unit(0.6, 0, 0.8)])
    p = Problem.build(vectors, [1.0, 0.0, 0.0], tokens=[4, 1, 1], budget=5)
    by_ratio = solve(p, "pacms", relevance_weight=1.0, cost_exponent=1.0, fill=False)
    by_gain = solve(p, "pacms", relevance_weight=1.0, cost_exponent=0.0, fill=False)
    assert by_ratio.order.tolist() == [1, 2]
    assert by_gain.order.tolist() == [0, 1]


def test_pacms_fill_uses_leftover_budget_by_relevance():
    # Items 2 and 3 are irrelevant and orthogonal to everything relevant: zero gain.
    vectors = np.array([unit(1, 0, 0), unit(1, 0.01, 0), unit(0, 0, 1), [0.0, 0.0, 0.0]])
    p = Problem.build(vectors, [1.0, 0.0, 0.0], tokens=[1, 1, 1, 1], budget=3)
    no_fill = solve(p, "pacms", fill=False, gain_floor=0.0)
    with_fill = solve(p, "pacms", fill="relevance", gain_floor=0.0)
    assert no_fill.order.tolist() == [0, 1]  # item 1 still adds a sliver of coverage
    assert with_fill.order.tolist() == [0, 1, 2]  # zero-relevance tie: earlier position
    assert with_fill.scores[2] == 0.0
    assert with_fill.scores[1] > 0.0
    assert with_fill.info["filled"] == 1


def test_pacms_gain_floor_hands_slivers_to_the_diverse_fill():
    # Item 1 is a near-copy of item 0: after item 0 it adds a sliver of coverage only. Below
    # the floor the diversity walk takes over and prefers the unrelated item 3 to the copy.
    vectors = np.array([unit(1, 0, 0), unit(1, 0.01, 0), unit(0, 0, 1), unit(0, 1, 0)])
    p = Problem.build(vectors, [1.0, 0.0, 0.5], tokens=[1, 1, 1, 1], budget=3)
    assert solve(p, "pacms", gain_floor=0.0).order.tolist() == [0, 2, 1]
    floored = solve(p, "pacms", fill="diverse")  # default gain_floor=0.05
    assert floored.order.tolist() == [0, 2, 3]
    assert floored.scores[3] == 0.0
    assert floored.info["filled"] == 1
    assert solve(p, "pacms", fill=False).order.tolist() == [0, 2]
    assert solve(p, "pacms", fill=True).order.tolist() == [0, 2, 3]
    assert solve(p, "pacms", fill="relevance").order.tolist() == [0, 2, 1]
    # The default distinct fill passes over the near-copy 1 of item 0 as well.
    assert solve(p, "pacms").order.tolist() == [0, 2, 3]


def test_pacms_min_gain_is_an_absolute_floor_capped_at_the_best_gain():
    # Item 0 is relevant; items 1 and 2 barely match the query; item 3 matches nothing but
    # points away from everything, so a diversity walk ranks it first.
    vectors = np.array([unit(1, 0, 0), unit(0.02, 1, 0), unit(0.03, 0, 1), unit(-0.5, -1, -1)])
    p = Problem.build(vectors, [1.0, 0.0, 0.0], tokens=[1, 1, 1, 1], budget=2)
    assert 0 < p.relevance[1] < p.relevance[2] < 0.05 and p.relevance[3] == 0
    # No floor: the greedy buys the larger sliver after item 0.
    assert solve(p, "pacms", gain_floor=0.0).order.tolist() == [0, 2]
    # An absolute floor above the slivers hands the rest of the budget to the diversity walk.
    floored = solve(p, "pacms", gain_floor=0.0, min_gain=0.01)
    assert floored.order.tolist() == [0, 2]  # 0.03 is above 0.01: still bought
    floored = solve(p, "pacms", gain_floor=0.0, min_gain=0.1, fill="diverse")
    assert floored.order.tolist() == [0, 3] and floored.info["filled"] == 1
    # The default distinct fill takes the most relevant item that is no copy of item 0.
    floored = solve(p, "pacms", gain_floor=0.0, min_gain=0.1)
    assert floored.order.tolist() == [0, 2] and floored.info["filled"] == 1
    # Capped at the best single gain: the greedy still makes its first pick.
    capped = solve(p, "pacms", gain_floor=0.0, min_gain=0.99, fill="diverse")
    assert capped.order.tolist() == [0, 3] and capped.info["filled"] == 1


def test_pacms_rejects_bad_fill_and_floor():
    p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=2)
    with pytest.raises(ValueError, match="fill must be one of"):
        solve(p, "pacms", fill="newest")
    with pytest.raises(ValueError, match="gain_floor"):
        solve(p, "pacms", gain_floor=1.5)
    with pytest.raises(ValueError, match="min_gain"):
        solve(p, "pacms", min_gain=-0.1)


def test_pacms_density_counts_near_duplicates_once():
    p = _clusters()
    plain = CoverageObjective(p)
    dense = CoverageObjective(p, similarity_threshold=0.5, density=True)
    rel_a = float(p.relevance[0])
    # The three near-copies each carry about rel/3 under density normalisation.
    assert dense.value([0]) == pytest.approx(rel_a, rel=1e-3)
    assert plain.value([0]) == pytest.approx(3 * rel_a, rel=1e-3)
    assert kept(solve(p, "pacms")) == {0, 3}


def test_similarity_threshold_stops_related_items_covering_each_other():
    # Two relevant items at cosine 0.6: with tau = 0 each covers most of the other; with
    # tau = 0.8 they are not near-duplicates and each keeps its full weight.
    a = unit(1.0, 0.0)
    b = unit(0.6, 0.8)
    p = Problem.build(np.array([a, b]), unit(1.0, 1.0), tokens=[1, 1], budget=1)
    loose = CoverageObjective(p)
    strict = CoverageObjective(p, similarity_threshold=0.8)
    rel = p.relevance.astype(float)
    assert loose.value([0]) == pytest.approx(rel[0] + rel[1] * 0.6, rel=1e-5)
    assert strict.value([0]) == pytest.approx(rel[0], rel=1e-5)


def test_pacms_paper_is_pacms_with_published_options():
    p = _clusters()
    assert kept(solve(p, "pacms_paper")) == kept(solve(p, "pacms", **PAPER_OPTIONS))
    assert PAPER_OPTIONS["similarity_threshold"] == 0.0 and PAPER_OPTIONS["density"] is False


def test_pacms_mandatory_items_first_and_scored_nan():
    p = Problem.build(
        np.eye(3), [0.1, 1.0, 0.5], tokens=[2, 1, 1], budget=3, mandatory=[True, False, False]
    )
    pick = solve(p, "pacms")
    assert pick.order.tolist() == [0, 1]
    assert np.isnan(pick.scores[0])


def test_pacms_only_mandatory_items():
    p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=5, mandatory=[True, True])
    assert solve(p, "pacms").order.tolist() == [0, 1]


@pytest.mark.parametrize(
    ("budget", "total", "expected"),
    [(1, 100, 0.98), (25, 100, 0.5), (50, 100, 0.0), (90, 100, 0.0)],
)
def test_auto_relevance_weight(budget: int, total: int, expected: float):
    tokens = [total // 4] * 4
    p = Problem.build(np.eye(4), np.ones(4), tokens=tokens, budget=budget)
    assert auto_relevance_weight(p) == pytest.approx(expected)
    with pytest.warns(UserWarning, match="experimental"):
        pick = solve(p, "pacms", experimental_auto_relevance_weight=True)
    assert pick.info is not None
    assert pick.info["relevance_weight"] == pytest.approx(expected)


def test_auto_relevance_weight_is_not_a_shipped_value():
    with pytest.raises(ValueError, match="experimental_auto_relevance_weight"):
        solve(_clusters(), "pacms", relevance_weight="auto")


@pytest.mark.parametrize("bad", [-0.1, 1.1, "high", True, None])
def test_pacms_rejects_bad_relevance_weight(bad: Any):
    with pytest.raises(ValueError, match="relevance_weight"):
        solve(_clusters(), "pacms", relevance_weight=bad)


@pytest.mark.parametrize("bad", [-0.1, 1.0])
def test_objective_rejects_bad_similarity_threshold(bad: float):
    with pytest.raises(ValueError, match="similarity_threshold"):
        CoverageObjective(_clusters(), similarity_threshold=bad)


# --------------------------------------------------------------------------------------------
# every strategy: shared behaviour on hand-built instances
# --------------------------------------------------------------------------------------------

BUILTINS = ["pacms", "topk", "lastk", "mmr", "rag"]


@pytest.mark.parametrize("name", BUILTINS)
def test_mandatory_over_budget_keeps_exactly_the_mandatory_items(name: str):
    p = Problem.build(
        np.eye(4), np.ones(4), tokens=[3, 1, 3, 1], budget=5, mandatory=[True, False, True, False]
    )
    pick = solve(p, name)
    assert pick.over_budget
    assert pick.order.tolist() == [0, 2]


@pytest.mark.parametrize("name", BUILTINS)
def test_item_larger_than_budget_is_never_kept(name: str):
    p = Problem.build(np.eye(3), [1.0, 0.5, 0.2], tokens=[50, 2, 2], budget=10)
    pick = solve(p, name)
    assert 0 not in kept(pick)
    assert not pick.over_budget


@pytest.mark.parametrize("name", BUILTINS)
def test_empty_problem(name: str):
    p = Problem.build(np.zeros((0, 3)), [1.0, 0.0, 0.0], tokens=[], budget=10)
    pick = solve(p, name)
    assert pick.order.tolist() == []
    assert not pick.over_budget


@pytest.mark.parametrize("name", BUILTINS)
def test_zero_query_does_not_crash(name: str):
    p = Problem.build(np.eye(3), np.zeros(3), tokens=[1, 1, 1], budget=2)
    pick = solve(p, name)
    assert int(p.tokens[pick.order].sum()) <= 2
    assert np.all(p.relevance == 0)


# --------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------


def test_builtins_registered():
    assert set(BUILTINS) <= set(available_strategies())
    assert available_strategies() == sorted(available_strategies())


def test_register_user_strategy_and_use_it(isolated_registry: dict[str, Any]):
    def cheapest_first(problem: Problem, *, limit: int = 99) -> Pick:
        order = [int(j) for j in np.argsort(problem.tokens, kind="stable")]
        chosen, used = [], 0
        for j in order[:limit]:
            if used + problem.tokens[j] <= problem.budget:
                chosen.append(j)
                used += int(problem.tokens[j])
        return Pick(np.asarray(chosen), np.zeros(problem.n))

    register_strategy("cheapest", cheapest_first)
    assert "cheapest" in available_strategies()
    assert get_strategy("cheapest") is cheapest_first
    p = Problem.build(np.eye(4), np.ones(4), tokens=[5, 1, 3, 2], budget=6)
    assert solve(p, "cheapest").order.tolist() == [1, 3, 2]
    assert solve(p, "cheapest", limit=1).order.tolist() == [1]
    # A callable works without registration too.
    assert solve(p, cheapest_first).order.tolist() == [1, 3, 2]


def test_register_twice_needs_replace(isolated_registry: dict[str, Any]):
    def first(problem: Problem) -> Pick:
        return Pick(np.zeros(0, dtype=np.int64), np.zeros(problem.n))

    def second(problem: Problem) -> Pick:
        return Pick(np.zeros(1, dtype=np.int64), np.zeros(problem.n))

    register_strategy("mine", first)
    with pytest.raises(ValueError, match="already registered"):
        register_strategy("mine", second)
    assert get_strategy("mine") is first
    register_strategy("mine", second, replace=True)
    assert get_strategy("mine") is second
    with pytest.raises(ValueError, match="already registered"):
        register_strategy("pacms", second)


def test_register_rejects_empty_name(isolated_registry: dict[str, Any]):
    with pytest.raises(ValueError, match="non-empty"):
        register_strategy("", lambda problem: None)  # type: ignore[arg-type, return-value]


def test_unknown_strategy_name_lists_known_ones():
    p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=2)
    with pytest.raises(ValueError, match=r"unknown strategy 'nope'.*pacms"):
        solve(p, "nope")
    with pytest.raises(ValueError, match="unknown strategy"):
        get_strategy("nope")


# --------------------------------------------------------------------------------------------
# solve guards user strategies
# --------------------------------------------------------------------------------------------


def _guard_problem() -> Problem:
    return Problem.build(
        np.eye(4), np.ones(4), tokens=[2, 2, 2, 2], budget=5, mandatory=[True, False, False, False]
    )


def _returning(order: Any, scores: Any = None) -> Any:
    def strategy(problem: Problem) -> Pick:
        return Pick(order, np.zeros(problem.n) if scores is None else scores)

    return strategy


@pytest.mark.parametrize(
    ("strategy", "match"),
    [
        (_returning(np.array([0, 7])), "out of range"),
        (_returning(np.array([0, -1])), "out of range"),
        (_returning(np.array([0, 1, 1])), "twice"),
        (_returning(np.array([1])), "mandatory"),
        (_returning(np.array([0, 1, 2])), r"'strategy' exceeded the token budget: \d+ tokens for"),
        (_returning(np.array([0.0, 1.7])), "integer"),
        (_returning(np.array([[0, 1]])), "1-D"),
        (_returning(np.array([0, 1]), np.zeros(2)), "scores"),
        (lambda problem: [0, 1], "Pick"),
        (lambda problem: None, "Pick"),
    ],
)
def test_solve_catches_misbehaving_strategy(strategy: Any, match: str):
    with pytest.raises(StrategyError, match=match):
        solve(_guard_problem(), strategy)


def test_solve_puts_mandatory_first_for_user_strategies():
    pick = solve(_guard_problem(), _returning([1, 0]))
    assert pick.order.tolist() == [0, 1]
    assert pick.order.dtype == np.int64


def test_solve_skips_strategy_when_mandatory_over_budget():
    calls = []

    def spy(problem: Problem) -> Pick:
        calls.append(1)
        return Pick(np.zeros(0, dtype=np.int64), np.zeros(problem.n))

    p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[9, 1], budget=5, mandatory=[True, False])
    pick = solve(p, spy)
    assert pick.over_budget and pick.order.tolist() == [0]
    assert calls == []


def test_coverage_prior_gives_irrelevant_items_a_coverage_gain():
    # Item 1 is orthogonal to the query: without a prior it is no target and gains nothing.
    p = Problem.build(np.eye(2), [1.0, 0.0], tokens=[1, 1], budget=2)
    plain = CoverageObjective(p)
    primed = CoverageObjective(p, coverage_prior=0.01)
    assert plain.value([1]) == 0.0
    assert primed.value([1]) == pytest.approx(0.01)
    assert primed.value([0]) == pytest.approx(1.01)
    with pytest.warns(UserWarning, match="experimental_coverage_prior"):
        primed_pick = solve(
            p, "pacms", experimental_coverage_prior=0.01, gain_floor=0.0, fill=False
        )
    assert primed_pick.order.tolist() == [0, 1]
    assert solve(p, "pacms", fill=False).order.tolist() == [0]
    with pytest.raises(TypeError, match="coverage_prior"):
        solve(p, "pacms", coverage_prior=0.01)  # the research knob is not a plain option
    with pytest.raises(ValueError, match="coverage_prior"):
        CoverageObjective(p, coverage_prior=-1.0)


def test_lastk_not_contiguous_skips_what_does_not_fit_and_goes_on():
    p = Problem.build(np.eye(5), np.ones(5), tokens=[2, 2, 5, 2, 9], budget=7)
    assert solve(p, "lastk").order.tolist() == []  # the newest alone is too big
    assert solve(p, "lastk", contiguous=False).order.tolist() == [3, 2]
    p = Problem.build(np.eye(5), np.ones(5), tokens=[2, 2, 5, 2, 2], budget=7)
    assert solve(p, "lastk", contiguous=False).order.tolist() == [4, 3, 1]


# -- relevance feedback ------------------------------------------------------------------------


def test_feedback_raises_what_resembles_the_best_matches_and_lowers_nothing():
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((40, 12))
    p = Problem.build(vectors, rng.standard_normal(12), tokens=np.full(40, 5), budget=50)
    lifted = feedback_relevance(p, 0.6, items=5)
    assert lifted.dtype == np.float32 and lifted.shape == (40,)
    assert (lifted >= p.relevance).all() and (lifted <= 1.0).all()
    assert (lifted > p.relevance).any()
    top = int(p.relevance_order()[0])
    assert lifted[top] == p.relevance[top]
    assert np.array_equal(feedback_relevance(p, 0.0), p.relevance)
    with pytest.raises(ValueError, match="relevance_feedback"):
        feedback_relevance(p, 1.5)
    with pytest.raises(ValueError, match="feedback_items"):
        feedback_relevance(p, 0.5, items=0)


def test_pacms_with_feedback_keeps_a_look_alike_of_the_best_match():
    # Item 2 shares nothing with the query but much with item 1, the second-best match; item 3
    # is slightly relevant and unlike both. Without feedback the fill takes item 3.
    vectors = np.array(
        [unit(1, 0, 0, 0), unit(0.6, 0.8, 0, 0), unit(0, 0.8, 0.6, 0), unit(0.05, 0, 0, 1)]
    )
    p = Problem.build(vectors, unit(1, 0, 0, 0), tokens=[1, 1, 1, 1], budget=3)
    assert p.relevance[2] == 0 < p.relevance[3]
    assert solve(p, "pacms").order.tolist() == [0, 1, 3]
    assert solve(p, "pacms", relevance_feedback=0.6, feedback_items=2).order.tolist() == [0, 1, 2]
    assert solve(p, "pacms", relevance_feedback=0.0).order.tolist() == [0, 1, 3]


def test_with_relevance_shares_the_cosines_only():
    p = Problem.build(np.eye(3), [1.0, 0.5, 0.0], tokens=[1, 1, 1], budget=2)
    assert p.precompute_cosines()
    q = p.with_relevance([0.0, 0.5, 1.0])
    assert q.relevance.tolist() == [0.0, 0.5, 1.0] and q.cosine_matrix is p.cosine_matrix
    assert q.budget == p.budget and q.tokens is p.tokens
    q.shared("probe", lambda: 1)
    assert p.shared("probe", lambda: 2) == 2  # the rest of the memo is not shared
    with pytest.raises(ValueError, match="3 finite values"):
        p.with_relevance([0.5, float("nan"), 0.0])


def test_feedback_is_built_once_per_pool_and_linked_budgets_pick_as_fresh_ones():
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((60, 10))
    tokens = rng.integers(5, 40, 60)
    p = Problem.build(vectors, rng.standard_normal(10), tokens=tokens, budget=100)
    for budget in (100, 300, 700):
        linked = p.with_budget(budget)
        fresh = Problem.build(vectors, p.query, tokens=tokens, budget=budget)
        got = solve(linked, "pacms", relevance_feedback=0.6, feedback_items=5)
        want = solve(fresh, "pacms", relevance_feedback=0.6, feedback_items=5)
        assert got.order.tolist() == want.order.tolist()
    # one feedback problem for the pool, whatever the budget
    keys = [k for k in p._memo if isinstance(k, tuple) and k[0] == "relevance_feedback"]
    assert keys == [("relevance_feedback", 0.6, 5)]


def test_a_builtins_answer_to_its_options_is_probed_once(monkeypatch):
    # RemoteSelector checks its strategy on every call and the service on every request: the
    # probe solve behind that check runs once per built-in and options, not per call
    import langchain_pacms.core.registry as registry

    calls: list[dict] = []
    real = registry.solve
    monkeypatch.setattr(registry, "_PROBED", {})
    monkeypatch.setattr(registry, "solve", lambda *a, **k: calls.append(k) or real(*a, **k))
    for _ in range(3):
        assert registry.rejection("mmr", {"lambda_mult": 0.3}) is None
        assert "lambda_mult" in str(registry.rejection("mmr", {"lambda_mult": 7}))
    assert calls == [{"lambda_mult": 0.3}, {"lambda_mult": 7}]
