"""ContextSelector: bad input, edge cases, fail-soft behaviour and the async twin."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from pacms_fakes import words

from langchain_pacms import Candidate, ContextSelector, Selection, TokenCounter
from langchain_pacms.core import Pick, Problem

POOL = [
    "The staging database listens on port 6543.",
    "Lunch was great today, the soup was hot.",
    "CI is flaky again on the integration job.",
    "Deploys go through the release branch every Friday.",
    "The production database listens on port 5432.",
]
QUERY = "Which port does the staging database use?"


def selector(**kwargs: Any) -> ContextSelector:
    kwargs.setdefault("token_counter", words)
    return ContextSelector(**kwargs)


class FlakyEmbeddings(Embeddings):
    """Raises while `failing` is true; otherwise embeds by character histogram."""

    def __init__(self) -> None:
        self.failing = True
        self.calls = 0

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(32)
        for ch in text.lower():
            v[ord(ch) % 32] += 1
        return v.tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.failing:
            raise ConnectionError("embedding server unreachable")
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if self.failing:
            raise ConnectionError("embedding server unreachable")
        return self._vec(text)


class SlowEmbeddings(FlakyEmbeddings):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.failing = False
        self.delay = delay

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        time.sleep(self.delay)
        return super().embed_documents(texts)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(self.delay)
        return super().embed_documents(texts)


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------


def test_empty_pool_gives_a_defined_empty_selection():
    for budget in (10, ("ratio", 0.5)):
        sel = selector().select([], QUERY, budget)
        assert isinstance(sel, Selection)
        assert sel.kept_ids == () and sel.pick_order == () and sel.candidates == ()
        assert sel.tokens_total == sel.tokens_kept == sel.tokens_dropped == 0
        assert not sel.fell_back and not sel.over_budget and sel.error is None
        assert sel.strategy == "pacms"
        assert sel.to_dict()["kept"] == 0


def test_unknown_option_rejected_when_nothing_is_solved():
    # an empty pool, an embedding failure and a query without words solve nothing, yet a
    # misspelt option is an error; per-candidate options (values) still pass
    for s, pool, query in (
        (selector(), [], QUERY),
        (selector(embeddings=FlakyEmbeddings()), POOL, QUERY),
        (ContextSelector(), POOL, "👍"),
    ):
        with pytest.raises(TypeError, match="unknown option 'bogus'"):
            s.select(pool, query, 10, bogus=1)
        values = [{f"v{i}"} for i in range(len(pool))]
        assert s.select(pool, query, 10, values=values).kept_ids == (
            s.select(pool, query, 10).kept_ids
        )


@pytest.mark.parametrize("query", ["", "   ", "\n\t "])
def test_empty_query_rejected(query: str):
    with pytest.raises(ValueError, match="query is empty"):
        selector().select(POOL, query, budget=10)


def test_non_string_query_rejected():
    with pytest.raises(ValueError, match="query must be a str"):
        selector().select(POOL, None, budget=10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"budget": 0}, r"Budget\(tokens=...\) must be a positive int"),
        ({"budget": -5}, r"Budget\(tokens=...\) must be a positive int"),
        ({"budget": 2.5}, "budget must be a Budget"),
        ({"budget": True}, "budget must be a Budget"),
        ({"budget": ("tokens", 2.5)}, r"Budget\(tokens=...\) must be a positive int"),
        ({"budget": ("ratio", 0.0)}, r"Budget\(ratio=...\)"),
        ({"budget": ("ratio", -0.2)}, r"Budget\(ratio=...\)"),
        ({"budget": ("ratio", 1.5)}, r"Budget\(ratio=...\)"),
        ({"budget": ("ratio", float("nan"))}, r"Budget\(ratio=...\)"),
        ({"budget": ("ratio", "half")}, r"Budget\(ratio=...\)"),
        ({"budget": ("fraction", 0.5)}, "resolve it with the model"),
    ],
)
def test_bad_budgets_rejected(kwargs: dict[str, Any], match: str):
    with pytest.raises(ValueError, match=match):
        selector().select(POOL, QUERY, **kwargs)


def test_a_budget_is_required():
    with pytest.raises(TypeError, match="budget"):
        selector().select(POOL, QUERY)  # type: ignore[call-arg]


def test_budget_ratio_is_a_fraction_of_pool_tokens():
    sel = selector().select(POOL, QUERY, budget=("ratio", 0.5))
    total = sum(words(t) for t in POOL)
    assert sel.tokens_total == total
    assert sel.budget == total // 2
    assert 0 < sel.tokens_kept <= sel.budget
    assert selector().select(POOL, QUERY, budget=("ratio", 1.0)).kept_ids == tuple(
        str(i) for i in range(len(POOL))
    )


def test_budget_smaller_than_mandatory_keeps_exactly_mandatory():
    pool = [Candidate(POOL[0], mandatory=True), POOL[1], Candidate(POOL[2], mandatory=True)]
    sel = selector().select(pool, QUERY, budget=3)
    assert sel.over_budget
    assert sel.kept_ids == ("0", "2")
    assert sel.tokens_kept > sel.budget


def test_duplicate_ids_rejected():
    with pytest.raises(ValueError, match="duplicate candidate id 'x'"):
        selector().select([Candidate("a", id="x"), Candidate("b", id="x")], QUERY, budget=5)
    # A default id (the index) can collide with an explicit one too.
    with pytest.raises(ValueError, match="duplicate candidate id '1'"):
        selector().select([Candidate("a", id="1"), "b"], QUERY, budget=5)


def test_candidate_larger_than_budget_is_dropped():
    big = " ".join(["database port"] * 50)
    sel = selector().select([big, POOL[0]], QUERY, budget=20)
    assert sel.kept_ids == ("1",)
    assert sel.dropped_ids == ("0",)
    assert not sel.over_budget


@pytest.mark.parametrize("content", [123, None, b"bytes", ["a", "b"], {"type": "text"}])
def test_non_string_content_rejected_naming_it(content: Any):
    pool = [POOL[0], Candidate(content)]  # type: ignore[arg-type]
    name = type(content).__name__
    with pytest.raises(ValueError, match=f"candidate 1 has non-string text \\({name}\\)"):
        selector().select(pool, QUERY, budget=10)


@pytest.mark.parametrize("item", [42, {"text": "a"}, None])
def test_non_candidate_items_rejected(item: Any):
    with pytest.raises(ValueError, match=f"candidate 1 is {type(item).__name__}"):
        selector().select([POOL[0], item], QUERY, budget=10)


def test_candidates_must_be_a_sequence():
    with pytest.raises(ValueError, match="sequence"):
        selector().select("just one string", QUERY, budget=10)  # type: ignore[arg-type]


def test_unknown_kind_rejected():
    with pytest.raises(ValueError, match="unknown kind 'note'"):
        selector().select([Candidate("a", kind="note")], QUERY, budget=10)


@pytest.mark.parametrize("tokens", [-1, 1.5, True, "3"])
def test_invalid_candidate_tokens_rejected(tokens: Any):
    with pytest.raises(ValueError, match="invalid tokens"):
        selector().select([Candidate("a", tokens=tokens)], QUERY, budget=10)


def test_unknown_strategy_rejected():
    with pytest.raises(ValueError, match="unknown strategy"):
        selector().select(POOL, QUERY, budget=10, strategy="nope")


# --------------------------------------------------------------------------------------------
# normal behaviour
# --------------------------------------------------------------------------------------------


def test_selection_fields_and_helpers():
    pool = [Candidate(t, id=f"m{i}", kind="memory", metadata={"i": i}) for i, t in enumerate(POOL)]
    sel = selector().select(pool, QUERY, budget=16)
    assert "m0" in sel.kept_ids
    assert sel.tokens_kept <= 16 and sel.tokens_dropped == sel.tokens_total - sel.tokens_kept
    assert [c.id for c in sel.kept] == list(sel.kept_ids)
    assert set(sel.dropped_ids) | set(sel.kept_ids) == {c.id for c in pool}
    verdicts = sel.verdicts()
    assert [v.id for v in verdicts] == [c.id for c in pool]
    assert all(v.kept == (v.id in sel.kept_ids) for v in verdicts)
    assert all((v.pick_rank is None) != v.kept for v in verdicts)
    assert sel.relevance["m0"] == max(sel.relevance.values())
    payload = json.loads(json.dumps(sel.to_dict()))
    assert payload["kept"] == len(sel.kept_ids) and payload["strategy"] == "pacms"
    assert set(sel.timings) >= {"tokens", "embed", "solve", "total"}
    with pytest.raises(TypeError):
        sel.relevance["m0"] = 0.0  # type: ignore[index]


def test_tokens_counted_once_with_selector_counter_unless_given():
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return 3

    sel = ContextSelector(token_counter=count).select(
        [Candidate("a"), Candidate("b", tokens=7), Candidate("a", id="again")],
        QUERY,
        budget=100,
    )
    assert dict(sel.tokens) == {"0": 3, "1": 7, "again": 3}
    assert calls == ["a"]
    assert isinstance(ContextSelector(token_counter=count).token_counter, TokenCounter)


def test_strategy_options_defaults_and_overrides():
    sel = selector(strategy="rag", strategy_options={"k": 1})
    assert len(sel.select(POOL, QUERY, budget=100).kept_ids) == 1
    assert len(sel.select(POOL, QUERY, budget=100, k=2).kept_ids) == 2
    other = sel.select(POOL, QUERY, budget=100, strategy="topk")
    assert other.strategy == "topk" and len(other.kept_ids) == len(POOL)


def test_custom_strategy_callable_and_its_name():
    def newest_only(problem: Problem) -> Pick:
        j = int(np.argmax(problem.positions))
        return Pick(np.array([j]), np.zeros(problem.n))

    sel = selector().select(POOL, QUERY, budget=100, strategy=newest_only)
    assert sel.kept_ids == (str(len(POOL) - 1),)
    assert sel.strategy == "newest_only"


# --------------------------------------------------------------------------------------------
# fail soft
# --------------------------------------------------------------------------------------------


def test_embedding_failure_falls_back_to_lastk(caplog: pytest.LogCaptureFixture):
    model = FlakyEmbeddings()
    s = selector(embeddings=model)
    with caplog.at_level(logging.WARNING, logger="langchain_pacms.selector"):
        sel = s.select(POOL, QUERY, budget=16)
    assert sel.fell_back and sel.strategy == "lastk"
    assert "ConnectionError" in (sel.error or "")
    assert sel.kept_ids == ("3", "4")  # the newest window that fits 16 words
    assert all(v == 0.0 for v in sel.relevance.values())
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_one_warning_per_failure_streak_and_recovery_resets(caplog: pytest.LogCaptureFixture):
    model = FlakyEmbeddings()
    s = selector(embeddings=model)

    def warnings_logged() -> int:
        return len([r for r in caplog.records if r.levelno == logging.WARNING])

    with caplog.at_level(logging.WARNING, logger="langchain_pacms.selector"):
        for _ in range(3):
            assert s.select(POOL, QUERY, budget=12).fell_back
        assert warnings_logged() == 1
        model.failing = False
        good = s.select(POOL, QUERY, budget=12)
        assert not good.fell_back and good.strategy == "pacms" and good.error is None
        assert warnings_logged() == 1
        # Everything above is cached now; a cached selection needs no embedding call at all.
        model.failing = True
        assert not s.select(POOL, QUERY, budget=12).fell_back
        # A new query needs the model again: a new failure streak, one new warning.
        assert s.select(POOL, "Who deploys on Friday?", budget=12).fell_back
        assert s.select(POOL, "Is CI flaky?", budget=12).fell_back
        assert warnings_logged() == 2


def test_strict_raises_instead_of_falling_back():
    with pytest.raises(ConnectionError, match="unreachable"):
        selector(embeddings=FlakyEmbeddings(), strict=True).select(POOL, QUERY, budget=12)


def test_fallback_still_respects_budget_and_mandatory():
    pool = [Candidate(POOL[0], mandatory=True), *POOL[1:]]
    sel = selector(embeddings=FlakyEmbeddings()).select(pool, QUERY, budget=16)
    assert sel.fell_back
    assert "0" in sel.kept_ids
    assert sel.tokens_kept <= 16


def test_embed_timeout_falls_back_quickly():
    s = selector(embeddings=SlowEmbeddings(delay=0.5), embed_timeout=0.05)
    started = time.perf_counter()
    sel = s.select(POOL, QUERY, budget=12)
    assert time.perf_counter() - started < 0.4
    assert sel.fell_back and "TimeoutError" in (sel.error or "")
    assert sel.strategy == "lastk"


def test_embed_timeout_not_hit_by_fast_embedder():
    s = selector(embeddings=SlowEmbeddings(delay=0.0), embed_timeout=5.0)
    sel = s.select(POOL, QUERY, budget=12)
    assert not sel.fell_back and sel.strategy == "pacms" and sel.error is None


async def test_aselect_embed_timeout_falls_back():
    s = selector(embeddings=SlowEmbeddings(delay=0.5), embed_timeout=0.05)
    started = time.perf_counter()
    sel = await s.aselect(POOL, QUERY, budget=12)
    assert time.perf_counter() - started < 0.4
    assert sel.fell_back and sel.strategy == "lastk"


async def test_aselect_failure_falls_back_and_strict_raises():
    sel = await selector(embeddings=FlakyEmbeddings()).aselect(POOL, QUERY, budget=16)
    assert sel.fell_back and sel.kept_ids == ("3", "4")
    with pytest.raises(ConnectionError):
        await selector(embeddings=FlakyEmbeddings(), strict=True).aselect(POOL, QUERY, budget=12)


# --------------------------------------------------------------------------------------------
# async parity
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["pacms", "topk", "lastk", "mmr", "rag"])
async def test_aselect_matches_select(strategy: str):
    pool = [Candidate(t, mandatory=i == 0) for i, t in enumerate(POOL)]
    sync = selector().select(pool, QUERY, budget=("ratio", 0.6), strategy=strategy)
    fresh = await selector().aselect(pool, QUERY, budget=("ratio", 0.6), strategy=strategy)
    for other in (fresh,):
        assert other.kept_ids == sync.kept_ids
        assert other.pick_order == sync.pick_order
        assert dict(other.relevance) == dict(sync.relevance)
        assert dict(other.gains) == dict(sync.gains)
        assert other.budget == sync.budget and other.tokens_kept == sync.tokens_kept
        assert other.fell_back is sync.fell_back is False


class CountingAsync(SlowEmbeddings):
    """Slow async model that records every text it is sent."""

    def __init__(self) -> None:
        super().__init__(delay=0.05)
        self.sent: list[str] = []

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.sent.extend(texts)
        return await super().aembed_documents(texts)


async def test_concurrent_aselect_on_a_cold_cache_embeds_each_text_once():
    model = CountingAsync()
    s = selector(embeddings=model)
    picks = await asyncio.gather(
        *(s.aselect(POOL, QUERY, budget=16) for _ in range(4)),
        s.aselect(POOL[:3], QUERY, budget=16),
    )
    assert sorted(model.sent) == sorted(POOL)
    assert len({p.kept_ids for p in picks[:4]}) == 1 and not any(p.fell_back for p in picks)
    assert picks[0].kept_ids == s.select(POOL, QUERY, budget=16).kept_ids


async def test_aselect_empty_pool_and_bad_input():
    sel = await selector().aselect([], QUERY, budget=4)
    assert sel.kept_ids == () and not sel.fell_back
    with pytest.raises(ValueError, match="query is empty"):
        await selector().aselect(POOL, " ", budget=4)


def test_cache_and_cache_store_together_keep_pool_reweighting():
    from langchain_core.stores import InMemoryByteStore

    from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings

    plain = selector().select(POOL, QUERY, budget=12)
    wrapped = selector(
        embeddings=CachedEmbeddings(HashedTfidfEmbeddings()), cache_store=InMemoryByteStore()
    ).select(POOL, QUERY, budget=12)
    assert dict(wrapped.relevance) == pytest.approx(dict(plain.relevance))
    assert wrapped.kept_ids == plain.kept_ids


def test_recency_fallback_skips_an_item_too_big_and_keeps_older_ones():
    # The newest item alone is over the budget: the fallback skips it and keeps what fits.
    pool = ["old fact one", "old fact two", "a very long newest message " * 10]
    sel = selector(embeddings=FlakyEmbeddings()).select(pool, QUERY, budget=6)
    assert sel.fell_back and sel.strategy == "lastk"
    assert sel.kept_ids == ("0", "1")
    assert sel.tokens_kept == 6 and not sel.over_budget


def placed(text: str, i: int, **kw: Any) -> Candidate:
    """A candidate that already carries its id and position (what the service sends)."""
    return Candidate(text, id=kw.pop("id", f"c{i}"), position=i, **kw)


def test_placed_candidates_are_kept_as_they_are():
    pool = [placed(t, i) for i, t in enumerate(POOL)]
    sel = selector().select(pool, QUERY, budget=40)
    assert all(a is b for a, b in zip(sel.candidates, pool))
    assert sel.candidates == tuple(pool)


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"id": "c0"}, "duplicate candidate id 'c0'"),
        ({"kind": "note"}, "candidate 2 has unknown kind 'note'"),
        ({"tokens": -3}, "candidate 'c2' has invalid tokens -3"),
        ({"tokens": True}, "candidate 'c2' has invalid tokens True"),
    ],
)
def test_placed_candidates_are_checked_like_any(bad: dict, needle: str):
    # Candidates with ids and positions take a quicker check; a bad one still gets the
    # message that names it.
    pool = [placed(t, i) for i, t in enumerate(POOL[:2])] + [placed("x y", 2, **bad)]
    with pytest.raises(ValueError, match=re.escape(needle)):
        selector().select(pool, QUERY, budget=40)
