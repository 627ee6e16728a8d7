"""``mmr`` ranks only as far as its walk under the budget reads, with the reference's picks.

The reference is the incremental twin of LangChain's ``maximal_marginal_relevance`` that ``mmr``
ran before (all pairwise dot products at once, every candidate re-scored at every step); its
equality with LangChain's own function is ``test_core_mmr.py``'s subject. Here
:class:`~langchain_pacms.core.MmrRanking` must give its ranking with any block size, with and
without the matrix of all dot products (``gram_limit`` 0 is a pool past the limit), and ``mmr``
must give the picks of the whole reference ranking walked under the budget.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from script_runs import run_python

from langchain_pacms.core import MmrRanking, Problem, solve

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_mmr_scaling.py"


def reference_ranking(
    x: np.ndarray, query: np.ndarray, lam: float, relevance: np.ndarray | None = None
) -> list[int]:
    """The whole ranking, every candidate re-scored at every step (``mmr`` before it ranked on
    demand)."""
    norms = np.linalg.norm(x, axis=1)
    if relevance is not None:
        to_query = np.asarray(relevance, dtype=np.result_type(x.dtype, query.dtype))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            to_query = (np.dot(query[None, :], x.T) / (np.linalg.norm(query) * norms))[0]
        to_query[~np.isfinite(to_query)] = 0.0
    order = [int(np.argmax(to_query))]
    redundancy = np.full(len(x), -np.inf, dtype=to_query.dtype)
    taken = np.zeros(len(x), dtype=bool)
    taken[order[0]] = True
    gram = np.dot(x, x.T)
    for _ in range(len(x) - 1):
        with np.errstate(divide="ignore", invalid="ignore"):
            sim = gram[order[-1]] / (norms * norms[order[-1]])
        sim[~np.isfinite(sim)] = 0.0
        np.maximum(redundancy, sim, out=redundancy)
        value = lam * to_query - (1 - lam) * redundancy
        value[taken] = -np.inf
        order.append(int(np.argmax(value)))
        taken[order[-1]] = True
    return order


def instance(seed: int, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray, float, Any]:
    """Clustered vectors (a zero row now and then), a query, a lambda, maybe given relevance."""
    rng = np.random.default_rng(seed)
    n, d, k = int(rng.integers(2, 300)), int(rng.integers(2, 48)), int(rng.integers(1, 10))
    centers = rng.standard_normal((k, d))
    x = centers[rng.integers(0, k, n)] + rng.uniform(0.1, 1.5) * rng.standard_normal((n, d))
    if seed % 4 == 0:
        x[rng.integers(0, n)] = 0.0
    lam = [0.0, 0.1, 0.5, 0.7, 1.0, float(rng.random())][seed % 6]
    relevance = rng.random(n).astype(np.float32) if seed % 3 == 0 else None
    return x.astype(dtype), rng.standard_normal(d).astype(dtype), lam, relevance


def ranked(x: np.ndarray, q: np.ndarray, lam: float, rel: Any, **kwargs: Any) -> list[int]:
    ranking = MmrRanking(x, q, lam, relevance=rel, **kwargs)
    ranking.extend(len(x))
    return ranking.order.tolist()


@pytest.mark.parametrize("block", [1, 3, 64])
@pytest.mark.parametrize("gram_limit", [0, 10**9])
def test_the_ranking_is_the_reference_ranking(block: int, gram_limit: int) -> None:
    for seed in range(60):
        x, q, lam, rel = instance(seed)
        expected = reference_ranking(x, q, lam, rel)
        assert ranked(x, q, lam, rel, block=block, gram_limit=gram_limit) == expected, seed


def test_float32_rankings_differ_at_most_at_rounding_ties() -> None:
    for seed in range(60):
        x, q, lam, rel = instance(seed, np.float32)
        expected = reference_ranking(x, q, lam, rel)
        ours = ranked(x, q, lam, rel, block=5, gram_limit=0)
        assert sorted(ours) == list(range(len(x)))
        step = next((i for i in range(len(x)) if ours[i] != expected[i]), None)
        if step is not None:  # both choices score the same in exact arithmetic
            v = x.astype(np.float64)
            norms = np.linalg.norm(v, axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                sims = np.nan_to_num(v @ v.T / np.outer(norms, norms))
                to_q = np.nan_to_num(v @ q / (norms * np.linalg.norm(q)))
            rel64 = to_q if rel is None else rel.astype(np.float64)
            score = lam * rel64 - (1 - lam) * sims[:, ours[:step]].max(axis=1)
            assert score[ours[step]] == pytest.approx(score[expected[step]], abs=1e-5), seed


def test_the_ranking_is_the_same_on_both_sides_of_the_gram_limit() -> None:
    x, q, lam, rel = instance(7)
    n = len(x)
    assert ranked(x, q, lam, rel, block=2, gram_limit=n) == ranked(
        x, q, lam, rel, block=2, gram_limit=n - 1
    )


def walked(problem: Problem, ranking: list[int]) -> list[int]:
    """The ranking walked under the budget: mandatory items first, then each one that fits."""
    kept = np.flatnonzero(problem.mandatory).tolist()
    left = problem.budget - int(problem.tokens[kept].sum())
    for j in ranking:
        if not problem.mandatory[j] and problem.tokens[j] <= left:
            kept.append(j)
            left -= int(problem.tokens[j])
    return kept


def problem(seed: int) -> Problem:
    """A clustered pool with costs from 0 to 60 (a few tiny ones), some items mandatory."""
    rng = np.random.default_rng(1000 + seed)
    x, q, _, rel = instance(seed)
    n = len(x)
    tokens = np.where(rng.random(n) < 0.1, rng.integers(0, 3, n), rng.integers(5, 60, n))
    mandatory = rng.random(n) < 0.05
    budget = int(tokens[mandatory].sum()) + int(rng.integers(1, int(tokens.sum()) + 2))
    return Problem.build(x, q, tokens=tokens, budget=budget, mandatory=mandatory, relevance=rel)


@pytest.mark.parametrize("lam", [0.3, 0.5, 1.0])
def test_mmr_keeps_the_picks_of_the_whole_ranking(lam: float) -> None:
    for seed in range(40):
        p = problem(seed)
        expected = walked(p, reference_ranking(p.vectors, p.query, lam, p.scores))
        assert solve(p, "mmr", lambda_mult=lam).order.tolist() == expected, seed
        # past the gram limit, with small blocks: the same picks
        past = dataclasses.replace(p)  # its own memo
        low = past.shared(
            ("mmr", lam),
            functools.partial(
                MmrRanking,
                past.vectors,
                past.query,
                lam,
                relevance=past.scores,
                block=2,
                gram_limit=0,
            ),
        )
        assert solve(past, "mmr", lambda_mult=lam).order.tolist() == expected, seed
        assert len(low) > 0  # the walk read that ranking


def test_a_small_budget_ranks_a_small_part_of_a_large_pool() -> None:
    rng = np.random.default_rng(3)
    n = 4000
    p = Problem.build(
        rng.standard_normal((n, 32)),
        rng.standard_normal(32),
        tokens=rng.integers(40, 200, n),
        budget=800,
    )
    pick = solve(p, "mmr")
    ranking = p.shared(("mmr", 0.5), lambda: None)
    assert isinstance(ranking, MmrRanking) and len(ranking) < 60
    assert pick.order.tolist() == walked(p, reference_ranking(p.vectors, p.query, 0.5))


def test_a_budget_sweep_extends_one_ranking() -> None:
    p = problem(11)
    total = int(p.tokens.sum())
    budgets = [max(1, int(f * total)) for f in (0.3, 0.05, 0.7, 0.1)]
    swept = [solve(p.with_budget(b), "mmr").order.tolist() for b in budgets]
    fresh = [
        solve(
            Problem.build(
                p.vectors,
                p.query,
                tokens=p.tokens,
                budget=b,
                mandatory=p.mandatory,
                relevance=p.scores,
            ),
            "mmr",
        ).order.tolist()
        for b in budgets
    ]
    assert swept == fresh


def test_threads_extending_one_ranking_see_one_order() -> None:
    x, q, lam, rel = instance(5)
    alone = ranked(x, q, lam, rel, block=3)
    shared = MmrRanking(x, q, lam, relevance=rel, block=3)
    threads = [
        threading.Thread(target=shared.extend, args=(count,))
        for count in (len(x), 5, len(x) // 2, len(x) - 1)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert shared.order.tolist() == alone


def test_the_scaling_benchmark_runs_and_checks_its_picks() -> None:
    out = run_python(
        BENCH, "--sizes", "300", "700", "--budget-tokens", "1500", "--check", timeout=300
    )
    rows = [
        line for line in out.splitlines() if line.startswith("| 300 ") or line.startswith("| 700 ")
    ]
    assert len(rows) == 2 and all(row.rstrip().endswith("| yes |") for row in rows)
