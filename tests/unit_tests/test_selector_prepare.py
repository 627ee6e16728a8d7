"""ContextSelector.prepare: the problem select solves, for harnesses that solve it themselves."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.core import solve
from langchain_pacms.selector import EmbeddingError

POOL = [
    "the deploy failed on the staging cluster",
    "lunch plans for friday",
    "staging cluster deploy logs show a timeout",
    "the staging deploy failed again with a timeout",
    "weekend hiking trip",
]
QUERY = "why did the staging deploy fail"


@pytest.mark.parametrize("strategy", ["pacms", "topk", "mmr", "lastk", "rag"])
def test_prepared_problem_gives_select_picks(strategy: str) -> None:
    selector = ContextSelector()
    cands = [Candidate(t, mandatory=(i == 4)) for i, t in enumerate(POOL)]
    selection = selector.select(cands, QUERY, budget=("ratio", 0.5), strategy=strategy)
    problem = selector.prepare(cands, QUERY, budget=("ratio", 0.5))
    name, options = selector.resolve_options(strategy)
    pick = solve(problem, name, **options)
    assert tuple(str(j) for j in pick.order.tolist()) == selection.pick_order
    assert problem.budget == selection.budget
    assert problem.mandatory.tolist() == [False, False, False, False, True]


def test_aprepare_equals_prepare() -> None:
    selector = ContextSelector()
    sync = selector.prepare(POOL, QUERY, budget=20)
    both = asyncio.run(selector.aprepare(POOL, QUERY, budget=20))
    assert np.array_equal(sync.vectors, both.vectors)
    assert np.array_equal(sync.query, both.query)
    assert sync.tokens.tolist() == both.tokens.tolist() and sync.budget == both.budget == 20


def test_prepare_has_no_fallback() -> None:
    selector = ContextSelector()
    with pytest.raises(ValueError, match="at least one candidate"):
        selector.prepare([], QUERY, budget=5)
    with pytest.raises(EmbeddingError, match="all zero"):
        selector.prepare(POOL, "!!!", budget=5)  # no feature: an all-zero query
    wordless = selector.select(POOL, "!!!", budget=5)  # select: recency, not a failure
    assert wordless.info["query_has_no_words"] and not wordless.fell_back
