"""The incremental MMR twin against LangChain's own `maximal_marginal_relevance`."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from langchain_pacms.core import Problem, mmr_ranking, solve

LAMBDAS = [0.0, 0.1, 0.25, 0.5, 0.7, 0.9, 1.0]


def langchain_ranking(query: np.ndarray, vectors: np.ndarray, lam: float) -> list[int] | None:
    """LangChain's ranking with k = n, or None where LangChain itself raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return maximal_marginal_relevance(query, vectors, lambda_mult=lam, k=len(vectors))
        except ValueError:  # e.g. a zero vector selected first: LangChain finds only NaN
            return None


def instance(seed: int, dtype: type, *, zero_row: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 50))
    d = int(rng.integers(1, 40))
    k = int(rng.integers(1, 6))
    centers = rng.standard_normal((k, d))
    vectors = centers[rng.integers(0, k, n)] + rng.uniform(0.1, 1.5) * rng.standard_normal((n, d))
    if zero_row:
        vectors[rng.integers(0, n)] = 0.0
    query = rng.standard_normal(d)
    return vectors.astype(dtype), query.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("block", range(3))
def test_mmr_ranking_equals_langchain(dtype: type, block: int):
    compared = 0
    for seed in range(block * 70, (block + 1) * 70):
        vectors, query = instance(seed, dtype, zero_row=seed % 5 == 0)
        for lam in (LAMBDAS[seed % len(LAMBDAS)], float(np.random.default_rng(seed).random())):
            expected = langchain_ranking(query, vectors, lam)
            if expected is None:
                continue
            assert mmr_ranking(vectors, query, lam)[0].tolist() == expected, (seed, lam)
            compared += 1
    assert compared > 100


def _exact_scores(vectors: np.ndarray, query: np.ndarray, chosen: list[int], lam: float):
    v = vectors.astype(np.float64)
    q = query.astype(np.float64)
    norms = np.linalg.norm(v, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        to_query = np.nan_to_num(v @ q / (norms * np.linalg.norm(q)))
        sims = np.nan_to_num((v @ v.T) / np.outer(norms, norms))
    if not chosen:
        return to_query
    return lam * to_query - (1 - lam) * sims[:, chosen].max(axis=1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mmr_ranking_with_exact_duplicates_differs_only_at_rounding_ties(dtype: type):
    # With exact duplicate vectors two scores are equal in exact arithmetic; BLAS rounds dot
    # products differently by the shape of the product, so LangChain's choice between them is
    # arbitrary. Both rankings must agree until such a tie, where both choices score the same.
    for seed in range(120):
        vectors, query = instance(seed, dtype)
        rng = np.random.default_rng(seed)
        n = len(vectors)
        vectors[rng.integers(0, n, n // 3)] = vectors[rng.integers(0, n, n // 3)]
        lam = LAMBDAS[seed % len(LAMBDAS)]
        expected = langchain_ranking(query, vectors, lam)
        assert expected is not None
        ours = mmr_ranking(vectors, query, lam)[0].tolist()
        assert sorted(ours) == list(range(n))
        step = next((i for i in range(n) if ours[i] != expected[i]), None)
        if step is None:
            continue
        scores = _exact_scores(vectors, query, ours[:step], lam)
        assert scores[ours[step]] == pytest.approx(scores[expected[step]], abs=1e-5), seed


@pytest.mark.parametrize("block", range(2))
def test_mmr_strategy_walks_langchain_ranking_under_budget(block: int):
    for seed in range(block * 40, (block + 1) * 40):
        rng = np.random.default_rng(seed)
        vectors, query = instance(seed, np.float64)
        n = len(vectors)
        tokens = rng.integers(1, 80, n)
        mandatory = rng.random(n) < 0.1
        budget = 1 + int(rng.uniform(0.1, 0.8) * tokens.sum()) + int(tokens[mandatory].sum())
        lam = LAMBDAS[seed % len(LAMBDAS)]
        p = Problem.build(vectors, query, tokens=tokens, budget=budget, mandatory=mandatory)
        ranking = langchain_ranking(p.query, p.vectors, lam)
        assert ranking is not None
        expected = [int(j) for j in np.flatnonzero(mandatory)]
        left = budget - int(tokens[mandatory].sum())
        for j in ranking:
            if not mandatory[j] and tokens[j] <= left:
                expected.append(j)
                left -= int(tokens[j])
        assert solve(p, "mmr", lambda_mult=lam).order.tolist() == expected, seed


def test_mmr_ranking_scores_and_edge_cases():
    order, scores = mmr_ranking(np.zeros((0, 3)), np.ones(3))
    assert order.tolist() == [] and scores.tolist() == []
    order, scores = mmr_ranking(np.array([[1.0, 0.0]]), np.array([1.0, 0.0]))
    assert order.tolist() == [0] and scores.tolist() == [1.0]
    # A zero query is defined here (LangChain raises): relevance 0, diversity still applies.
    order, _ = mmr_ranking(np.array([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]]), np.zeros(2), 0.5)
    assert order.tolist() == [0, 2, 1]
    # Non-finite rows score 0 and produce no NaN.
    vectors = np.array([[1.0, 0.0], [np.nan, 1.0], [np.inf, 0.0]])
    order, scores = mmr_ranking(vectors, np.array([1.0, 0.0]), 0.5)
    assert sorted(order.tolist()) == [0, 1, 2]
    assert np.isfinite(scores).all()
