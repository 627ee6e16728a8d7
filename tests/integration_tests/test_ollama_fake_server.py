"""``OllamaEmbeddings`` end to end against a fake Ollama server on loopback.

The server (:class:`fake_ollama.FakeOllama`) answers ``POST /api/embed`` with deterministic
hashed bag-of-words vectors over keep-alive connections, like the real one. It is stopped
mid-conversation (listening socket and open connections closed, like a crash) and
restarted on the same port, to check that selection falls back to recency and then recovers
without re-embedding what the cache already holds.

Nothing here leaves 127.0.0.1: the clients are built with ``trust_env=False`` so that proxy
variables in the environment cannot reroute loopback traffic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fake_ollama import DIM, MODEL, FakeOllama, fake_vector
from langchain_core.documents import Document
from langchain_ollama import OllamaEmbeddings

from langchain_pacms import ContextSelector
from langchain_pacms.integrations.compressor import PACMSCompressor


def ollama(server: FakeOllama, **kwargs: Any) -> OllamaEmbeddings:
    assert urlsplit(server.url).hostname == "127.0.0.1"
    return OllamaEmbeddings(
        model=MODEL, base_url=server.url, client_kwargs={"trust_env": False, **kwargs}
    )


@pytest.fixture
def server() -> Iterator[FakeOllama]:
    fake = FakeOllama().start()
    yield fake
    fake.stop()


# A conversation where each question needs one older turn; filler turns pad the pool.
TURNS = [
    "We deploy the billing service with helm from the infra repo.",
    "The staging database listens on port 6543 behind pgbouncer.",
    "Lunch today was a very long pizza discussion about toppings and crusts.",
    "The api pods read the database password from the vault secret staging-db.",
    "Someone asked about the office plants and the watering rota for the weekend.",
    "CI runs on the arm runners and the integration job is flaky this week.",
    "The weekly retro moved to Friday afternoon because of the offsite planning.",
    "Grafana dashboards for staging live in the ops folder.",
]
QUESTIONS = [
    ("Which port does the staging database use?", "port 6543"),
    ("Where do the api pods get the database password?", "vault secret"),
    ("How do we deploy the billing service?", "helm"),
    ("Where are the staging Grafana dashboards?", "ops folder"),
    ("Which runners does CI use?", "arm runners"),
]
BUDGET = 60


def _select(selector: ContextSelector, history: list[str], question: str):
    return selector.select(history, question, budget=BUDGET)


# -- the conversation ----------------------------------------------------------------------
def test_embed_request_shape(server: FakeOllama) -> None:
    emb = ollama(server)
    vectors = emb.embed_documents(["alpha beta", "gamma"])
    assert len(vectors) == 2 and len(vectors[0]) == DIM
    assert vectors[0] == pytest.approx(fake_vector("alpha beta"))
    assert emb.embed_query("alpha beta") == pytest.approx(vectors[0])
    body = server.requests[0]
    assert body["model"] == MODEL and body["input"] == ["alpha beta", "gamma"]
    with pytest.raises(Exception, match="not found, try pulling it first"):
        OllamaEmbeddings(
            model="missing-model", base_url=server.url, client_kwargs={"trust_env": False}
        ).embed_query("x")


def test_conversation_outage_and_recovery(
    server: FakeOllama, caplog: pytest.LogCaptureFixture
) -> None:
    selector = ContextSelector(embeddings=ollama(server))
    history = list(TURNS)
    docs_done: set[str] = set()  # texts the server embedded as documents
    queries_done: set[str] = set()  # ... and as queries

    def turn(question: str, answer_fact: str, *, expect_fallback: bool):
        before = len(server.embedded)
        sel = _select(selector, history, question)
        assert sel.tokens_kept <= BUDGET
        new = server.embedded[before:]
        if expect_fallback:
            assert sel.fell_back and sel.strategy == "lastk"
            assert sel.kept_ids[-1] == str(len(history) - 1)  # recency window
        else:
            assert not sel.fell_back and sel.strategy == "pacms"
            kept_text = " ".join(c.text for c in sel.kept)
            assert answer_fact in kept_text, (question, kept_text)
            # only texts never embedded before reach the server: new documents in one batch,
            # then the question
            expected = [t for t in dict.fromkeys(history) if t not in docs_done]
            expected += [question] if question not in queries_done else []
            assert new == expected
            docs_done.update(history)
            queries_done.add(question)
        history.append(question)
        history.append(f"Answer: {answer_fact}.")
        return sel

    # Turns 1-2 with the server up.
    turn(*QUESTIONS[0], expect_fallback=False)
    assert len(server.requests) == 2  # one batch of documents + one query
    turn(*QUESTIONS[1], expect_fallback=False)

    # The server dies mid-conversation: two turns fall back, one warning.
    server.stop()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        t0 = time.perf_counter()
        down = turn(*QUESTIONS[2], expect_fallback=True)
        elapsed = time.perf_counter() - t0
        turn(*QUESTIONS[3], expect_fallback=True)
    assert elapsed < 2.0, f"fallback took {elapsed:.2f}s"
    assert down.error is not None and down.error.startswith("ConnectionError")
    assert "Failed to connect to Ollama" in down.error
    warnings = [r for r in caplog.records if "falling back" in r.getMessage()]
    assert len(warnings) == 1

    # Restart on the same port: recovery, and only never-embedded texts are requested.
    requests_before = len(server.requests)
    server.start()
    sel = turn(*QUESTIONS[4], expect_fallback=False)
    assert sel.error is None
    assert len(server.requests) == requests_before + 2
    # A second identical call costs no request at all (the cache is warm).
    n = len(server.requests)
    again = _select(selector, history[:-2], QUESTIONS[4][0])
    assert len(server.requests) == n and again.kept_ids == sel.kept_ids


async def test_async_outage_and_recovery(server: FakeOllama) -> None:
    compressor = PACMSCompressor(BUDGET, selector=ollama(server))
    docs = [Document(t, metadata={"turn": i}) for i, t in enumerate(TURNS)]
    question = QUESTIONS[0][0]
    kept = await compressor.acompress_documents(docs, question)
    assert any("6543" in d.page_content for d in kept)
    assert {d.metadata["pacms_strategy"] for d in kept} == {"pacms"}
    n = len(server.requests)
    assert n == 2

    server.stop()
    extra = [*docs, Document("The cache sits in front of the staging database.")]
    down = await compressor.acompress_documents(extra, question)
    assert {d.metadata["pacms_strategy"] for d in down} == {"lastk"}
    assert down[0].metadata["turn"] == 0  # ranked input: the head of the list is kept
    assert compressor.selector is not None
    counter = compressor.selector.token_counter
    assert sum(counter(d.page_content) for d in down) <= BUDGET

    server.start()
    back = await compressor.acompress_documents(extra, question)
    assert {d.metadata["pacms_strategy"] for d in back} == {"pacms"}
    assert server.embedded[-1:] == [extra[-1].page_content]  # only the new text
    assert len(server.requests) == n + 1  # the question was cached before the outage


# -- a stalling server ---------------------------------------------------------------------
def test_embed_timeout_on_stalled_server() -> None:
    stall = 10.0
    fake = FakeOllama(stall=stall).start()
    try:
        selector = ContextSelector(embeddings=ollama(fake), embed_timeout=0.3)
        question = QUESTIONS[0][0]
        t0 = time.perf_counter()
        sel = _select(selector, TURNS, question)
        first = time.perf_counter() - t0
        assert sel.fell_back and sel.strategy == "lastk" and sel.tokens_kept <= BUDGET
        assert sel.error is not None and sel.error.startswith("TimeoutError")
        assert first < 3.0, f"fallback took {first:.2f}s"

        # The stalled request still occupies the selector's embedding worker: the next call
        # waits its embed_timeout and falls back too, instead of piling up.
        t0 = time.perf_counter()
        assert _select(selector, TURNS, question).fell_back
        assert time.perf_counter() - t0 < 3.0

        # The server answers after all: the late vectors land in the cache and are used.
        fake.release()
        deadline = time.monotonic() + 5
        while len(fake.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        n = len(fake.requests)
        sel = _select(selector, TURNS, question)
        assert not sel.fell_back
        assert "port 6543" in " ".join(c.text for c in sel.kept)
        assert len(fake.requests) == n  # everything came from the cache
    finally:
        fake.stop()


async def test_async_embed_timeout_on_stalled_server() -> None:
    fake = FakeOllama(stall=10.0).start()
    try:
        selector = ContextSelector(embeddings=ollama(fake), embed_timeout=0.3)
        t0 = time.perf_counter()
        sel = await selector.aselect(TURNS, QUESTIONS[0][0], budget=BUDGET)
        assert time.perf_counter() - t0 < 3.0
        assert sel.fell_back and sel.strategy == "lastk" and sel.tokens_kept <= BUDGET
        assert sel.error is not None and sel.error.startswith("TimeoutError")
    finally:
        fake.stop()


def test_client_timeout_without_embed_timeout() -> None:
    """The ollama client has no timeout by default; an httpx one surfaces as ReadTimeout."""
    fake = FakeOllama(stall=10.0).start()
    try:
        selector = ContextSelector(embeddings=ollama(fake, timeout=0.3))
        t0 = time.perf_counter()
        sel = _select(selector, TURNS, QUESTIONS[0][0])
        assert time.perf_counter() - t0 < 3.0
        assert sel.fell_back and sel.error is not None
        assert sel.error.startswith("ReadTimeout")  # httpx's, not wrapped by ollama
    finally:
        fake.stop()


# -- one selector, several event loops -----------------------------------------------------
def test_async_client_across_event_loops(server: FakeOllama) -> None:
    """``OllamaEmbeddings`` keeps one httpx ``AsyncClient``; its pooled keep-alive connection is
    bound to the loop that opened it, so reusing the model from a new loop (``asyncio.run`` per
    request) fails every other call with ``RuntimeError: Event loop is closed``. The selector
    stays up (it falls back), and a client without keep-alive pooling avoids the problem.
    """

    def run_turns(selector: ContextSelector) -> list[Any]:
        return [asyncio.run(selector.aselect(TURNS, q, budget=BUDGET)) for q, _ in QUESTIONS]

    default = run_turns(ContextSelector(ollama(server)))
    assert all(s.tokens_kept <= BUDGET for s in default)
    assert all(not s.fell_back or "Event loop is closed" in str(s.error) for s in default)

    no_pool = OllamaEmbeddings(
        model=MODEL,
        base_url=server.url,
        client_kwargs={"trust_env": False},
        async_client_kwargs={"limits": httpx.Limits(max_keepalive_connections=0)},
    )
    assert not any(s.fell_back for s in run_turns(ContextSelector(no_pool)))
