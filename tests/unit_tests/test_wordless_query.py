"""A query without words is a normal case: recency, flagged, never a failure."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.selector import EmbeddingError

POOL = [
    Candidate("You are a helpful assistant.", id="system", mandatory=True),
    "the deploy failed on the staging cluster",
    "lunch plans for friday",
    "staging cluster deploy logs show a timeout",
    "the staging deploy failed again with a timeout",
]
WORDLESS = ["\N{THUMBS UP SIGN}", "???", "!!! ...", "\N{PARTY POPPER} \N{THUMBS UP SIGN}"]


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("query", WORDLESS)
async def test_a_wordless_query_keeps_the_newest_and_says_why(
    query: str, strict: bool, caplog: pytest.LogCaptureFixture
) -> None:
    selector = ContextSelector(strict=strict)
    recency = selector.recency(POOL, query, budget=20)
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        for sel in (
            selector.select(POOL, query, budget=20),
            await selector.aselect(POOL, query, budget=20),
        ):
            assert sel.kept_ids == recency.kept_ids and sel.kept_ids[-1] == "4"
            assert sel.strategy == "lastk" and sel.info["query_has_no_words"] is True
            assert not sel.fell_back and sel.error is None and sel.to_dict()["error"] is None
            assert sel.tokens_kept <= 20
    assert not [r for r in caplog.records if "embedding failed" in r.getMessage()]


def test_a_pool_without_words_under_a_query_without_words_is_recency_too() -> None:
    sel = ContextSelector(strict=True).select(["\N{THUMBS UP SIGN}", "!!!"], "?", budget=1)
    assert sel.kept_ids == ("1",) and sel.info["query_has_no_words"] and not sel.fell_back


def test_a_query_with_words_keeps_its_selection() -> None:
    sel = ContextSelector().select(POOL, "which deploy failed?", budget=20)
    assert "query_has_no_words" not in sel.info and sel.strategy == "pacms"


class _ZeroQuery(Embeddings):
    """A dense model that gives the query (any query) an all-zero vector: a real failure."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, float(len(t))] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [0.0, 0.0]


def test_a_zero_embedding_of_a_query_with_words_is_still_a_failure() -> None:
    sel = ContextSelector(_ZeroQuery()).select(["a", "bb"], "alpha", budget=1)
    assert sel.fell_back and "EmbeddingError" in str(sel.error)
    assert "query_has_no_words" not in sel.info
    with pytest.raises(EmbeddingError, match="all zero"):
        ContextSelector(_ZeroQuery(), strict=True).select(["a", "bb"], "alpha", budget=1)
    # Without words it is the normal recency case, whatever the model.
    wordless = ContextSelector(_ZeroQuery(), strict=True).select(["a", "bb"], "?", budget=1)
    assert wordless.kept_ids == ("1",) and not wordless.fell_back


@settings(max_examples=60, deadline=None)
@given(
    costs=st.lists(st.integers(0, 9), min_size=1, max_size=12),
    mandatory=st.lists(st.booleans(), min_size=12, max_size=12),
    budget=st.integers(1, 40),
    query=st.sampled_from(WORDLESS),
)
def test_wordless_selection_is_the_recency_walk(
    costs: list[int], mandatory: list[bool], budget: int, query: str
) -> None:
    pool = [
        Candidate(f"note {i} about topic {i % 3}", id=str(i), tokens=c, mandatory=m)
        for i, (c, m) in enumerate(zip(costs, mandatory))
    ]
    selector = ContextSelector(strict=True)
    sel = selector.select(pool, query, budget=budget)
    recency = selector.recency(pool, query, budget=budget)
    assert sel.kept_ids == recency.kept_ids and sel.over_budget == recency.over_budget
    assert {c.id for c in pool if c.mandatory} <= set(sel.kept_ids)
    assert sel.over_budget or sel.tokens_kept <= budget
    assert not sel.fell_back and sel.info["query_has_no_words"]
