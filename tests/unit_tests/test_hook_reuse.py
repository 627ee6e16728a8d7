"""What the hook's per-call speed rests on gives the same picks as computing everything afresh.

* :class:`MessageMemo`: texts and counts remembered per message object, bounded, and forgotten
  when a message is edited in place;
* the selector's reuse of the last pool's problem when the texts and the query are the same;
* feature compaction of sparse lexical vectors (``_used_features``) and ``unit_rows`` without
  float64 matrix copies: ``pacms`` and ``topk`` keep what they kept before these changes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

import langchain_pacms.selector.pool as selector_module
from langchain_pacms import ContextSelector
from langchain_pacms.core import Problem, unit_rows
from langchain_pacms.embeddings import EmbedderProfile, HashedTfidfEmbeddings
from langchain_pacms.integrations import StrategyOptions, ToolLoopOptions, create_pacms_hook
from langchain_pacms.messages import MessageMemo, messages_to_candidates, sent_tokens
from langchain_pacms.selector import EmbeddingError

BENCH_HOOK = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_hook.py"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "port",
    "db",
    "staging",
    "error",
    "deploy",
    "queue",
    "cache",
    "auth",
    "retry",
]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_hook", BENCH_HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _words(text: str) -> int:
    return len(text.split())


# -- MessageMemo ---------------------------------------------------------------------------------
def test_memo_counts_each_message_once_and_matches_the_plain_count() -> None:
    memo = MessageMemo()
    calls = [0]

    def counter(text: str) -> int:
        calls[0] += 1
        return len(text.split())

    msgs = _bench().conversation(3)
    first = sent_tokens(msgs, counter, memo=memo)
    seen = calls[0]
    assert sent_tokens(msgs, counter, memo=memo) == first == sent_tokens(msgs, _words)
    assert calls[0] == seen == len(msgs)  # the second pass counted nothing
    assert memo.hits == len(msgs)


def test_memo_sees_in_place_edits() -> None:
    memo = MessageMemo()
    tool = AIMessage("", tool_calls=[{"name": "read", "args": {"p": "a"}, "id": "c1"}])
    blocks = HumanMessage([{"type": "text", "text": "one two"}])
    for msg in (tool, blocks):
        assert memo.tokens(msg, _words) == sent_tokens([msg], _words)
    tool.tool_calls[0]["args"]["p"] = "a b c d"  # nested edit of the same list
    blocks.content[0]["text"] = "one two three four"  # type: ignore[index]
    blocks.name = "someone"
    for msg in (tool, blocks):
        assert memo.tokens(msg, _words) == sent_tokens([msg], _words)
    assert memo.hits == 0


def test_memo_is_bounded_and_holds_no_message_alive() -> None:
    memo = MessageMemo(max_entries=3)
    msgs = [HumanMessage(f"message {i}") for i in range(10)]
    for msg in msgs:
        memo.text(msg)
    assert len(memo) == 3
    assert memo.text(msgs[-1]) == "message 9" and memo.hits == 1
    gone = HumanMessage("short lived")
    memo.text(gone)
    del gone
    # A new object may take the dead one's id: it must not get the old text.
    assert all(memo.text(HumanMessage(f"new {i}")) == f"new {i}" for i in range(20))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_memo_rejects_a_bad_size(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        MessageMemo(max_entries=bad)


def _conversation(ops: list[int], seed: int) -> list[BaseMessage]:
    """A conversation from a list of op codes (human, answer, tool round, lost result, ...)."""
    rng = random.Random(seed)
    out: list[BaseMessage] = []
    for k, op in enumerate(ops):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        if op == 0:
            out.append(HumanMessage(text))
        elif op == 1:
            out.append(AIMessage(text))
        else:
            calls = [
                {"name": "read", "args": {"q": text}, "id": f"c{k}-{j}"}
                for j in range(1 + (op in (3, 5)))
            ]
            if op == 4:
                calls.append({"name": "lost", "args": {}, "id": None})
            out.append(AIMessage("", tool_calls=calls))
            answered = calls[:1] if op == 5 else [c for c in calls if c["id"]]
            out += [ToolMessage(text * 3, tool_call_id=c["id"], name="read") for c in answered]
    return out


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    seed=st.integers(0, 10**6),
    placeholders=st.booleans(),
    keep=st.booleans(),
)
def test_candidates_with_a_memo_equal_those_without(
    ops: list[int], seed: int, placeholders: bool, keep: bool
) -> None:
    msgs = _conversation(ops, seed)
    memo = MessageMemo()
    options = {"tool_placeholders": placeholders, "keep_latest_turn": keep, "token_counter": _words}
    plain, _ = messages_to_candidates(msgs, **options)
    for end in range(1, len(msgs) + 1):  # a growing conversation: the memo carries over
        plain, plain_spans = messages_to_candidates(msgs[:end], **options)
        memoised, spans = messages_to_candidates(msgs[:end], memo=memo, **options)
        assert memoised == plain and spans == plain_spans
        assert [c.tokens for c in memoised] == [c.tokens for c in plain]


# -- the hook over a growing conversation --------------------------------------------------------
def test_hook_keeps_what_a_fresh_hook_keeps_over_a_growing_conversation() -> None:
    bench = _bench()
    warm = create_pacms_hook(budget=3000)
    stream = bench.conversation(24)
    for step in range(6):
        state = {
            "messages": [
                *stream[4 * step : 4 * step + 60],
                HumanMessage(f"What changed in round {step}?"),
            ]
        }
        fresh = create_pacms_hook(budget=3000)
        fresh.invoke(state)
        for _ in range(2):  # the second call reuses the memo and the last pool's problem
            warm.invoke(state)
            assert warm.last_selection is not None and fresh.last_selection is not None
            assert warm.last_selection.kept_ids == fresh.last_selection.kept_ids
            assert warm.last_selection.tokens == fresh.last_selection.tokens


# The bench conversation's kept ids before the speed work (main at 29330df), as digests; the
# relevance then came from the dense vectors (``relevance_buckets=None`` today) and the
# built-in profile's near-duplicate threshold was 0.6. ``pacms`` filled with the diversity fill
# then (its default at the time), so it is asked for it by name.
BEFORE = {
    "pacms": "a1f2cdb0feb6895f",
    "topk": "a57214be2156d325",
}


@pytest.mark.parametrize("strategy", sorted(BEFORE))
def test_bench_conversation_picks_are_unchanged(strategy: str) -> None:
    bench = _bench()
    then = EmbedderProfile(
        name="hashed-tfidf", similarity_threshold=0.6, min_gain=0.01, idf_reweighting=True
    )
    dense = ContextSelector(HashedTfidfEmbeddings(relevance_buckets=None), profile=then)
    options = {"fill": "diverse"} if strategy == "pacms" else {}
    hook = create_pacms_hook(
        8000,
        strategy=StrategyOptions(strategy, **options),
        selector=dense,
        tool_loop=ToolLoopOptions(cover_values=False),  # the embeddings' coverage, as then
    )
    messages = [*bench.conversation(75), HumanMessage("Which service had the highest latency?")]
    hook.invoke({"messages": messages})
    assert hook.last_selection is not None
    kept = json.dumps(list(hook.last_selection.kept_ids)).encode()
    assert hashlib.sha256(kept).hexdigest()[:16] == BEFORE[strategy]


# -- the selector's reuse of the last pool -------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), strategy=st.sampled_from(["pacms", "mmr", "topk"]))
def test_same_pool_again_picks_as_a_fresh_selector(seed: int, strategy: str) -> None:
    rng = random.Random(seed)
    texts = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20)))
        for _ in range(rng.randint(2, 40))
    ]
    query = " ".join(rng.choice(WORDS) for _ in range(3))
    warm = ContextSelector()
    for ratio in (0.2, 0.5, 0.2):  # the same texts under other budgets and mandatory flags
        pool = [selector_module.Candidate(t, mandatory=rng.random() < 0.1) for t in texts]
        got = warm.select(pool, query, budget=("ratio", ratio), strategy=strategy)
        want = ContextSelector().select(pool, query, budget=("ratio", ratio), strategy=strategy)
        assert got.kept_ids == want.kept_ids and got.gains == want.gains
    assert warm._last_pool is not None and warm._last_pool.texts == tuple(texts)
    other = warm.select(texts, query + " port", budget=("ratio", 0.3), strategy=strategy)
    fresh = ContextSelector().select(
        texts, query + " port", budget=("ratio", 0.3), strategy=strategy
    )
    assert other.kept_ids == fresh.kept_ids


def test_with_costs_shares_the_memo_and_validates() -> None:
    p = Problem.build(np.eye(3), np.ones(3), tokens=[1, 2, 3], budget=3)
    p.precompute_cosines()
    q = p.with_costs(tokens=[3, 2, 1], budget=4, mandatory=[True, False, False])
    assert q.cosine_matrix is p.cosine_matrix and q.vectors is p.vectors
    assert (q.tokens.tolist(), q.budget, q.positions.tolist()) == ([3, 2, 1], 4, [0, 1, 2])
    with pytest.raises(ValueError, match="one entry per candidate"):
        p.with_costs(tokens=[1, 2], budget=3)
    with pytest.raises(ValueError, match="budget"):
        p.with_costs(tokens=[1, 2, 3], budget=0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), dim=st.sampled_from([64, 4096]))
def test_rows_lent_by_the_last_pool_give_the_same_vectors(seed: int, dim: int) -> None:
    rng = random.Random(seed)
    vocabulary = [*WORDS, *(f"w{i}" for i in range(40))]

    def text() -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 8)))

    def selector() -> ContextSelector:  # 64 features: pools turn dense as they grow
        return ContextSelector(HashedTfidfEmbeddings(dim=dim))

    texts = [text() for _ in range(rng.randint(1, 12))]
    warm = selector()
    for _ in range(5):  # the pool drops some texts, keeps the rest in order, gains new ones
        query = text() + " alpha"
        kept = [t for t in texts if rng.random() < 0.8]
        texts = kept + [text() for _ in range(rng.randint(0 if kept else 1, 6))]
        try:
            want = selector().prepare(texts, query, budget=("ratio", 0.3))
        except EmbeddingError:  # e.g. only empty texts: the warm selector refuses them too
            with pytest.raises(EmbeddingError):
                warm.prepare(texts, query, budget=("ratio", 0.3))
            continue
        got = warm.prepare(texts, query, budget=("ratio", 0.3))
        assert np.array_equal(got.vectors, want.vectors)
        assert np.array_equal(got.query, want.query)
        warm.select(texts, query, budget=("ratio", 0.3))  # the pool the next one borrows from


# -- compaction and unit rows --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lex", "dense"])
def test_compaction_keeps_the_picks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    pools = [
        (
            [
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
                for _ in range(rng.randint(5, 120))
            ],
            " ".join(rng.choice(WORDS) for _ in range(4)),
        )
        for _ in range(10)
    ]

    def kept() -> list[tuple[str, ...]]:
        embeddings = None if name == "lex" else DeterministicFakeEmbedding(size=64)
        selector = ContextSelector(embeddings)
        return [
            selector.select(texts, query, budget=("ratio", r), strategy=s).kept_ids
            for texts, query in pools
            for r in (0.1, 0.4)
            for s in ("pacms", "topk")
        ]

    compacted = kept()
    monkeypatch.setattr(selector_module, "_used_features", lambda v, q: (v, q, None))
    assert compacted == kept()


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 8),
    dim=st.integers(1, 40),
    seed=st.integers(0, 10**6),
    zero=st.booleans(),
    nan=st.booleans(),
)
def test_unit_rows_rounds_the_float64_quotient_once(
    rows: int, dim: int, seed: int, zero: bool, nan: bool
) -> None:
    x = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    if zero:
        x[0] = 0.0
    if nan:
        x[-1, 0] = np.nan
    x64 = x.astype(np.float64)
    norms = np.linalg.norm(x64, axis=1)
    ok = np.isfinite(norms) & (norms > 0)
    want = np.zeros_like(x)
    want[ok] = (x64[ok] / norms[ok, None]).astype(np.float32)
    got = unit_rows(x)
    assert got.dtype == np.float32
    # The norm's sum may add in another order: at most one float32 step apart.
    assert np.array_equal(got == 0, want == 0)
    assert (np.abs(got.view(np.int32) - want.view(np.int32)) <= 1).all()
    assert np.array_equal(unit_rows(x[0]), got[0])
