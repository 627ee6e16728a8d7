"""``OllamaEmbeddings`` end to end against a fake Ollama server on loopback.

The server speaks the part of Ollama's HTTP API that ``langchain_ollama.OllamaEmbeddings`` uses
(``POST /api/embed``; plus ``GET /``, ``/api/version`` and ``/api/tags`` for completeness), with
keep-alive connections like the real one, and deterministic hashed bag-of-words vectors. It is
stopped mid-conversation (listening socket and open connections closed, like a crash) and
restarted on the same port, to check that selection falls back to recency and then recovers
without re-embedding what the cache already holds.

Nothing here leaves 127.0.0.1: the clients are built with ``trust_env=False`` so that proxy
variables in the environment cannot reroute loopback traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_ollama import OllamaEmbeddings

from langchain_pacms import ContextSelector
from langchain_pacms.integrations.compressor import PACMSCompressor

MODEL = "nomic-embed-text"
DIM = 256
_WORD = re.compile(r"[a-z0-9]+")


def fake_vector(text: str, dim: int = DIM) -> list[float]:
    """Deterministic unit vector: signed hashed bag of words (plus a constant bias feature)."""
    vec = np.zeros(dim)
    vec[0] = 0.05
    for word in _WORD.findall(text.lower()):
        h = zlib.crc32(word.encode())
        vec[1 + h % (dim - 1)] += 1.0 if h & 0x8000_0000 else -1.0
    return (vec / np.linalg.norm(vec)).tolist()


class _Server(ThreadingHTTPServer):
    """Loopback server that stays quiet when a client hangs up before the reply (timeouts)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # the client gave up, as the timeout tests make it do
        super().handle_error(request, client_address)


class FakeOllama:
    """A minimal Ollama HTTP server on 127.0.0.1 that counts what it is asked to embed.

    Args:
        port: Port to bind (0: an ephemeral one, kept across :meth:`stop`/:meth:`start`).
        stall: Seconds to hold every ``/api/embed`` request before answering (bounded;
            :meth:`release` ends a stall early).
    """

    def __init__(self, port: int = 0, stall: float = 0.0) -> None:
        self.port = port
        self.stall = stall
        self.requests: list[dict[str, Any]] = []  # /api/embed bodies, in arrival order
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def embedded(self) -> list[str]:
        """Every text the server has embedded, in order (one entry per text per request)."""
        with self._lock:
            out: list[str] = []
            for body in self.requests:
                inp = body["input"]
                out.extend([inp] if isinstance(inp, str) else inp)
            return out

    def release(self) -> None:
        """End any stall now (and skip future ones)."""
        self.stall = 0.0
        self._released.set()

    def start(self) -> FakeOllama:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Ollama's Go server does

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake._conns.add(self.connection)

            def finish(self) -> None:
                with fake._lock:
                    fake._conns.discard(self.connection)
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/":
                    data = b"Ollama is running"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path == "/api/version":
                    self._reply(200, {"version": "0.0.0-fake"})
                elif self.path == "/api/tags":
                    self._reply(200, {"models": [{"name": f"{MODEL}:latest", "model": MODEL}]})
                else:
                    self._reply(404, {"error": "not found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/api/embed":
                    self._reply(404, {"error": "not found"})
                    return
                model = str(body.get("model", "")).removesuffix(":latest")
                if model != MODEL:
                    msg = f'model "{body.get("model")}" not found, try pulling it first'
                    self._reply(404, {"error": msg})
                    return
                with fake._lock:
                    fake.requests.append(body)
                if fake.stall:
                    fake._released.wait(fake.stall)
                inputs = body.get("input", [])
                texts = [inputs] if isinstance(inputs, str) else list(inputs)
                self._reply(
                    200,
                    {
                        "model": body["model"],
                        "embeddings": [fake_vector(t) for t in texts],
                        "total_duration": 1000,
                        "load_duration": 10,
                        "prompt_eval_count": sum(len(t.split()) for t in texts),
                    },
                )

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop like a crash: close the listening socket and every open connection."""
        self._released.set()
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        assert self._thread is not None
        self._thread.join(5)
        self._server = None
        self._released = threading.Event()


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
    return selector.select(history, question, budget_tokens=BUDGET)


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
    compressor = PACMSCompressor(embeddings=ollama(server), budget_tokens=BUDGET)
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
        sel = await selector.aselect(TURNS, QUESTIONS[0][0], budget_tokens=BUDGET)
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
        return [asyncio.run(selector.aselect(TURNS, q, budget_tokens=BUDGET)) for q, _ in QUESTIONS]

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
