"""The selector's public steps for selectors that score elsewhere: resolve, recency, recovery.

``RemoteSelector`` is built on these; they must give exactly what ``select`` gives on its own
fallback path.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from pacms_fakes import words

from langchain_pacms import Candidate, ContextSelector


class DownEmbeddings(Embeddings):
    """Always fails, as an unreachable embedding server does."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding server unreachable")

    def embed_query(self, text: str) -> list[float]:
        raise ConnectionError("embedding server unreachable")


pools = st.lists(
    st.tuples(st.text(alphabet="abc ", min_size=1, max_size=12), st.booleans()),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(pool=pools, budget=st.integers(min_value=1, max_value=30))
def test_recency_is_selects_own_fallback(pool: list[tuple[str, bool]], budget: int) -> None:
    cands = [Candidate(text=t, mandatory=m) for t, m in pool]
    down = ContextSelector(DownEmbeddings(), token_counter=words)
    fallen = down.select(cands, "q", budget=budget)
    mine = ContextSelector(token_counter=words).recency(
        cands, "q", budget=budget, error=ConnectionError("embedding server unreachable")
    )
    for field in (
        "kept_ids",
        "pick_order",
        "tokens_kept",
        "budget",
        "strategy",
        "over_budget",
        "fell_back",
        "error",
    ):
        assert getattr(mine, field) == getattr(fallen, field), field
    assert mine.fell_back
    assert set(mine.timings) == {"tokens", "solve", "total"}


def test_resolve_is_what_select_counts() -> None:
    s = ContextSelector(token_counter=words)
    pool = ["a b c", Candidate("d e", id="x", tokens=9), Candidate("f", position=40)]
    cands, tokens, budget = s.resolve(pool, "a", budget=("ratio", 0.5))
    assert [c.id for c in cands] == ["0", "x", "2"]
    assert [c.position for c in cands] == [0, 1, 40]
    assert tokens.tolist() == [3, 9, 1] == s.count_tokens(pool)
    assert budget == 6 == s.select(pool, "a", budget=("ratio", 0.5)).budget
    with pytest.raises(TypeError, match="budget"):
        s.resolve(pool, "a")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="query"):
        s.recency(pool, " ", budget=3)


def test_one_warning_per_streak_until_recovery(caplog: pytest.LogCaptureFixture) -> None:
    s = ContextSelector(token_counter=words)

    def warned() -> int:
        return len([r for r in caplog.records if r.levelno == logging.WARNING])

    with caplog.at_level(logging.WARNING, logger="langchain_pacms.selector"):
        for _ in range(3):
            sel = s.recency(["a b", "c"], "q", budget=1, error=TimeoutError("slow"))
            assert sel.error == "TimeoutError: slow" and sel.kept_ids == ("1",)
        assert warned() == 1
        s.note_recovery()
        s.recency(["a b", "c"], "q", budget=1, error=TimeoutError("slow"))
        assert warned() == 2
        quiet = s.recency(["a b", "c"], "q", budget=1)  # no error: nothing logged
        assert quiet.fell_back and quiet.error is None and warned() == 2
