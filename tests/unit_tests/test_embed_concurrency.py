"""Concurrent embedding calls never wait on what their own waiting holds up.

* sync ``select`` callers in the loop's default executor (a sync node of an async LangGraph
  graph) and ``aselect`` callers share one selector without deadlocking;
* a sync-only embedder that stalls costs the async path only the stalled calls: the stalled
  model calls run on daemon threads, not on the default executor, and the next call works;
* a synchronous call embeds a text an async call holds in flight itself, instead of waiting;
* a synchronous call waiting for a text another thread's call holds wakes when that call fails.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from pacms_fakes import letter_vector, words

from langchain_pacms import ContextSelector
from langchain_pacms.embeddings import CachedEmbeddings, PrefixedEmbeddings


class CountingExecutor(ThreadPoolExecutor):
    """A default executor that counts the jobs it was given."""

    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers=max_workers)
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


async def test_sync_callers_in_the_default_executor_and_async_callers_share_a_selector():
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
    selector = ContextSelector(token_counter=words)  # the built-in embedder
    cached = selector.embeddings
    started = time.perf_counter()
    for round_ in range(50):
        pool = [f"note {i} of round {round_}: port {i * 7} on host {i % 5}" for i in range(24)]
        query = f"which port on host {round_ % 5}?"

        def select(pool: list[str] = pool, query: str = query) -> bool:
            return selector.select(pool, query, budget=40).fell_back

        async_calls = [
            asyncio.ensure_future(selector.aselect(pool, query, budget=40)) for _ in range(3)
        ]
        sync_calls = [loop.run_in_executor(None, select) for _ in range(6)]
        try:
            done = await asyncio.wait_for(asyncio.gather(*async_calls, *sync_calls), 5)
        except asyncio.TimeoutError:
            pytest.fail(f"round {round_} deadlocked")
        selections, fell_back = done[:3], done[3:]
        assert fell_back == [False] * 6
        assert [s.fell_back for s in selections] == [False] * 3
        assert len({s.kept_ids for s in selections}) == 1
    assert time.perf_counter() - started < 30
    assert not cached._flights


class Stalling(Embeddings):
    """Sync-only model: holds its first ``stalls`` document calls on ``gate``, then recovers."""

    def __init__(self, stalls: int) -> None:
        self.stalls = stalls
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.on_daemon: list[bool] = []  # per model call: whether it ran on a daemon thread

    def _note(self) -> bool:
        with self.lock:
            self.on_daemon.append(threading.current_thread().daemon)
            stall, self.stalls = self.stalls > 0, max(0, self.stalls - 1)
        return stall

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self._note():
            self.gate.wait(20)
        return [letter_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self._note()
        return letter_vector(text)


POOL = ["The staging database listens on port 6543.", "Lunch was great.", "CI is flaky again."]
QUERY = "Which port does the staging database use?"


@pytest.mark.parametrize("wrapped", [False, True], ids=["model", "prefixed"])
async def test_a_stalled_sync_only_embedder_does_not_starve_the_async_path(wrapped: bool):
    default = CountingExecutor(max_workers=2)
    asyncio.get_running_loop().set_default_executor(default)
    model = Stalling(stalls=3)
    embedder = PrefixedEmbeddings(model, document_prefix="doc: ") if wrapped else model
    selector = ContextSelector(embedder, token_counter=words, embed_timeout=0.2)
    try:
        for i in range(3):  # more stalled calls than the default executor has threads
            pool = [f"{text} (call {i})" for text in POOL]
            stalled = await selector.aselect(pool, QUERY, budget=12)
            assert stalled.fell_back and "embed_timeout=0.2" in (stalled.error or "")
        recovered = await selector.aselect(POOL, QUERY, budget=12)
        assert not recovered.fell_back and "0" in recovered.kept_ids
        assert selector.select(POOL, "Lunch?", budget=12).fell_back is False
        assert default.submitted == 0
        assert model.on_daemon and all(model.on_daemon)
    finally:
        model.gate.set()


class GatedAsync(Embeddings):
    """Native async model holding its async document calls until ``gate`` opens."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.sync_calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.sync_calls.append(list(texts))
        return [letter_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return letter_vector(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.entered.set()
        await self.gate.wait()
        return [letter_vector(t) for t in texts]


async def test_a_sync_call_embeds_a_text_an_async_call_holds_itself():
    model = GatedAsync()
    cached = CachedEmbeddings(model)
    owner = asyncio.create_task(cached.aembed_matrix(["a", "b"]))
    await model.entered.wait()  # "a" and "b" are in flight in the async call
    started = time.perf_counter()
    out = await asyncio.to_thread(cached.embed_matrix, ["b", "c"], timeout=5)
    assert time.perf_counter() - started < 2  # did not wait for the async call
    assert [sorted(call) for call in model.sync_calls] == [["b", "c"]]
    np.testing.assert_array_equal(
        out, np.array([letter_vector("b"), letter_vector("c")], dtype=np.float32)
    )
    model.gate.set()
    np.testing.assert_array_equal(
        await owner, np.array([letter_vector("a"), letter_vector("b")], dtype=np.float32)
    )
    assert not cached._flights


def test_a_sync_waiter_embeds_itself_when_the_owning_thread_fails(waiting: threading.Event):
    gate, entered = threading.Event(), threading.Event()

    class FailsFirst(Embeddings):
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            self.calls.append(list(texts))
            if len(self.calls) == 1:  # the owner's call: held until the waiter waits, then fails
                entered.set()
                assert gate.wait(10)
                raise RuntimeError("model down")
            return [letter_vector(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return letter_vector(text)

    model = FailsFirst()
    cached = CachedEmbeddings(model)
    owner_error: list[BaseException] = []
    waiter_out: list[np.ndarray] = []

    def owner() -> None:
        try:
            cached.embed_matrix(["a"])
        except RuntimeError as err:
            owner_error.append(err)

    threads = [
        threading.Thread(target=owner, daemon=True),
        threading.Thread(target=lambda: waiter_out.append(cached.embed_matrix(["a"])), daemon=True),
    ]
    threads[0].start()
    assert entered.wait(5)
    threads[1].start()
    assert waiting.wait(5)  # the second call waits for "a", without a time limit
    gate.set()
    for thread in threads:
        thread.join(5)
    assert [str(e) for e in owner_error] == ["model down"]
    assert len(waiter_out) == 1, "the waiter still waits for the failed call"
    np.testing.assert_array_equal(waiter_out[0], np.array([letter_vector("a")], dtype=np.float32))
    assert model.calls == [["a"], ["a"]] and not cached._flights
