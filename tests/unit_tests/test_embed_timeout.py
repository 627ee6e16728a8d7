"""``embed_timeout``: a stalled embedder costs one call its embeddings, never the next ones."""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from langchain_core.embeddings import Embeddings
from pacms_fakes import letter_vector, words
from script_runs import run_python

from langchain_pacms import ContextSelector
from langchain_pacms.embeddings import CachedEmbeddings

REPO = Path(__file__).resolve().parents[2]


class Sleepy(Embeddings):
    """Sleeps ``delay`` seconds per document call; holds a call on ``gate`` while ``stall``."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.stall = False
        self.gate = threading.Event()
        self.entered = threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.stall:
            self.stall = False
            self.entered.set()
            self.gate.wait(20)
        time.sleep(self.delay)
        return [letter_vector(t, 32) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return letter_vector(text, 32)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(self.delay)
        return [letter_vector(t, 32) for t in texts]


POOL = ["The staging database listens on port 6543.", "Lunch was great.", "CI is flaky again."]
QUERY = "Which port does the staging database use?"


def test_concurrent_calls_each_get_their_own_time():
    # 20 threads, each embedding for 0.1 s under a 0.5 s limit: none may wait behind another.
    selector = ContextSelector(Sleepy(delay=0.1), token_counter=words, embed_timeout=0.5)

    def one(i: int) -> bool:
        pool = [f"{text} (thread {i})" for text in POOL]
        return selector.select(pool, QUERY, budget=12).fell_back

    with ThreadPoolExecutor(max_workers=20) as threads:
        fell_back = list(threads.map(one, range(20)))
    assert fell_back.count(True) == 0


def test_a_stalled_call_does_not_poison_the_next_calls():
    model = Sleepy()
    model.stall = True
    selector = ContextSelector(model, token_counter=words, embed_timeout=0.3)
    try:
        started = time.perf_counter()
        first = selector.select(POOL, QUERY, budget=12)
        assert time.perf_counter() - started < 2
        assert first.fell_back and "embed_timeout=0.3" in (first.error or "")
        assert model.entered.is_set()  # the model call is still held
        # The same texts are still in flight in the stalled call, yet the next calls embed them.
        later = [selector.select(POOL, QUERY, budget=12) for _ in range(3)]
        assert [s.fell_back for s in later] == [False, False, False]
        assert later[0].strategy == "pacms"
    finally:
        model.gate.set()


@contextmanager
def a_stalled_flight() -> Iterator[CachedEmbeddings]:
    """A cache with "a" held in flight, without a time limit, by a call in another thread."""
    model = Sleepy()
    model.stall = True
    cached = CachedEmbeddings(model)
    owner = threading.Thread(target=cached.embed_matrix, args=(["a"],), daemon=True)
    owner.start()
    try:
        assert model.entered.wait(5)
        yield cached
    finally:
        model.gate.set()
        owner.join(5)


def test_a_waiter_on_a_stalled_flight_honours_its_own_timeout():
    # A second call needs "a" too.
    with a_stalled_flight() as cached:
        started = time.perf_counter()
        with pytest.raises(TimeoutError, match=r"timeout=0\.2s"):
            cached.embed_matrix(["a", "b"], timeout=0.2)
        assert time.perf_counter() - started < 1.5


async def test_a_waiter_on_a_stalled_flight_honours_its_own_timeout_async():
    with a_stalled_flight() as cached, pytest.raises(TimeoutError, match=r"timeout=0\.2s"):
        await cached.aembed_matrix(["a"], timeout=0.2)


async def test_async_timeout_error_names_the_timeout():
    selector = ContextSelector(
        Sleepy(delay=0.5), token_counter=words, embed_timeout=0.05, strict=True
    )
    with pytest.raises(TimeoutError, match=r"embed_timeout=0\.05"):
        await selector.aselect(POOL, QUERY, budget=12)
    soft = ContextSelector(Sleepy(delay=0.5), token_counter=words, embed_timeout=0.05)
    sel = await soft.aselect(POOL, QUERY, budget=12)
    assert sel.fell_back and "embed_timeout=0.05" in (sel.error or "")


@pytest.mark.parametrize(
    "call",
    [
        's.select(["a", "b"], "a", budget=5)',
        'asyncio.run(s.aselect(["a", "b"], "a", budget=5))',  # a sync-only model
    ],
    ids=["sync", "async"],
)
def test_a_stalled_embedding_does_not_hold_the_interpreter_at_exit(call: str):
    script = textwrap.dedent(
        """
        import asyncio
        import time
        from langchain_core.embeddings import Embeddings
        from langchain_pacms import ContextSelector

        class Stuck(Embeddings):
            def embed_documents(self, texts):
                time.sleep(20)
                return [[1.0] for _ in texts]
            def embed_query(self, text):
                return [1.0]

        s = ContextSelector(Stuck(), token_counter=len, embed_timeout=0.2)
        print(CALL.fell_back, flush=True)
        """
    ).replace("CALL", call)
    started = time.perf_counter()
    printed = run_python("-c", script, env={"PATH": "/usr/bin:/bin"}, timeout=30)
    elapsed = time.perf_counter() - started
    assert printed.strip() == "True"
    assert elapsed < 15  # exits at once, not after the 20 s stall


@pytest.mark.parametrize("bad", [0, -1, "1", True])
def test_a_bad_embed_timeout_is_rejected(bad: object):
    with pytest.raises(ValueError, match="embed_timeout"):
        ContextSelector(embed_timeout=bad)  # type: ignore[arg-type]


def test_stalled_threads_are_bounded(monkeypatch: pytest.MonkeyPatch):
    import langchain_pacms._timeout as timeouts

    monkeypatch.setattr(timeouts, "MAX_STALLED", timeouts._stalled + 1)
    gate = threading.Event()
    try:
        with pytest.raises(TimeoutError, match="took longer"):
            timeouts.call_with_timeout(lambda: gate.wait(20), 0.05, what="stuck")
        # One call is still stalled: the next fails at once instead of starting a thread.
        before = threading.active_count()
        with pytest.raises(TimeoutError, match="still running"):
            timeouts.call_with_timeout(lambda: 1, 5, what="next")
        assert threading.active_count() == before
    finally:
        gate.set()
    deadline = time.monotonic() + 5
    while timeouts._stalled >= timeouts.MAX_STALLED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert timeouts.call_with_timeout(lambda: 1, 5, what="after") == 1
