"""CachedEmbeddings: hits and misses, batching, keys, persistence, async, threads, errors."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.stores import InMemoryByteStore

from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings, model_identity
from langchain_pacms.embeddings.cache import PROBE_TEXT

try:  # LangChain's file store moved to langchain-classic in 1.0.
    from langchain_classic.storage import LocalFileStore
except ImportError:  # pragma: no cover
    LocalFileStore = None  # type: ignore[assignment,misc]


def vector_for(text: str, kind: str = "document", dim: int = 6) -> list[float]:
    seed = sum(text.encode()) + (1000 if kind == "query" else 0)
    return np.random.default_rng(seed).standard_normal(dim).round(4).tolist()


class RecordingEmbeddings(Embeddings):
    """Deterministic fake that records every call; queries embed differently from documents."""

    def __init__(self, model: str = "fake-a", dim: int = 6, delay: float = 0.0) -> None:
        self.model = model
        self.dim = dim
        self.delay = delay
        self.document_calls: list[list[str]] = []
        self.query_calls: list[str] = []
        self._probes = 0
        self.lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if texts == [PROBE_TEXT]:  # a cache with a store asks it once: counted apart
            self._probes += 1
            return [vector_for(self.model, "document", self.dim)]
        if self.delay:
            time.sleep(self.delay)
        with self.lock:
            self.document_calls.append(list(texts))
        return [vector_for(t, "document", self.dim) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        with self.lock:
            self.query_calls.append(text)
        return vector_for(text, "query", self.dim)

    @property
    def documents_embedded(self) -> list[str]:
        return [t for call in self.document_calls for t in call]


class AsyncOnlyCounting(RecordingEmbeddings):
    """Records async calls separately so the async path is proven to be used."""

    def __init__(self) -> None:
        super().__init__()
        self.async_calls: list[list[str]] = []

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.async_calls.append(list(texts))
        return [vector_for(t, "document", self.dim) for t in texts]

    async def aembed_query(self, text: str) -> list[float]:
        self.async_calls.append([text])
        return vector_for(text, "query", self.dim)


class WrongCount(RecordingEmbeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return super().embed_documents(texts)[:-1]


class RaggedShapes(RecordingEmbeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [vector_for(t, dim=3 + i) for i, t in enumerate(texts)]


def test_hits_and_misses_and_only_misses_are_embedded():
    model = RecordingEmbeddings()
    cached = CachedEmbeddings(model)
    first = cached.embed_matrix(["a", "b", "c"])
    assert (cached.hits, cached.misses) == (0, 3)
    second = cached.embed_matrix(["b", "d", "a", "d"])
    assert (cached.hits, cached.misses) == (2, 4)  # "d" twice in one call is embedded once
    assert model.documents_embedded == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(second[0], first[1])
    np.testing.assert_array_equal(second[2], first[0])
    np.testing.assert_array_equal(second[1], second[3])
    np.testing.assert_allclose(second[1], vector_for("d"), rtol=1e-6)
    assert second.dtype == np.float32 and second.shape == (4, 6)


def test_batch_size_respected_and_only_misses_sent():
    model = RecordingEmbeddings()
    cached = CachedEmbeddings(model, batch_size=3)
    cached.embed_matrix([f"t{i}" for i in range(4)])
    assert [len(c) for c in model.document_calls] == [3, 1]
    model.document_calls.clear()
    cached.embed_matrix([f"t{i}" for i in range(10)])
    assert [len(c) for c in model.document_calls] == [3, 3]
    assert model.documents_embedded == [f"t{i}" for i in range(4, 10)]
    with pytest.raises(ValueError, match="batch_size"):
        CachedEmbeddings(model, batch_size=0)


def test_query_and_document_keys_differ():
    model = RecordingEmbeddings()
    cached = CachedEmbeddings(model)
    doc = cached.embed_documents(["same text"])[0]
    query = cached.embed_query("same text")
    assert model.query_calls == ["same text"]
    assert doc != query
    np.testing.assert_allclose(query, vector_for("same text", "query"), rtol=1e-6)
    # Both are cached now, separately.
    assert cached.embed_query("same text") == query
    assert cached.embed_documents(["same text"])[0] == doc
    assert model.query_calls == ["same text"] and len(model.document_calls) == 1


def test_embeddings_interface_round_trip():
    cached = CachedEmbeddings(RecordingEmbeddings())
    out = cached.embed_documents(["x", "y"])
    assert isinstance(out, list) and isinstance(out[0], list) and len(out[0]) == 6
    assert cached.embed_matrix([]).shape[0] == 0
    with pytest.raises(TypeError, match="str"):
        cached.embed_matrix(["ok", 3])  # type: ignore[list-item]


def test_fast_embed_matrix_path_is_used_when_available():
    model = HashedTfidfEmbeddings(dim=64)
    cached = CachedEmbeddings(model)
    out = cached.embed_matrix(["alpha beta", "gamma"])
    np.testing.assert_array_equal(out, model.embed_matrix(["alpha beta", "gamma"]))


def _persistence_round_trip(make_store) -> None:
    model_a = RecordingEmbeddings()
    first = CachedEmbeddings(model_a, store=make_store())
    vectors = first.embed_matrix(["one", "two"])
    query = first.embed_query("q")
    model_b = RecordingEmbeddings()
    second = CachedEmbeddings(model_b, store=make_store())
    again = second.embed_matrix(["two", "one"])
    assert model_b.document_calls == [] and model_b.query_calls == []
    assert (second.hits, second.misses) == (2, 0)
    np.testing.assert_array_equal(again, vectors[::-1])
    assert second.embed_query("q") == query
    # A different model must not read the first model's vectors.
    other = CachedEmbeddings(RecordingEmbeddings(model="fake-b"), store=make_store())
    other.embed_matrix(["one"])
    assert other.misses == 1


def test_persistence_through_in_memory_byte_store():
    store = InMemoryByteStore()
    _persistence_round_trip(lambda: store)
    assert all(isinstance(v, bytes) for v in store.mget(list(store.yield_keys())))


@pytest.mark.skipif(LocalFileStore is None, reason="langchain-classic not installed")
def test_persistence_through_local_file_store(tmp_path: Path):
    # Model identities contain ':' and '='; the keys must still be valid file-store keys.
    _persistence_round_trip(lambda: LocalFileStore(tmp_path))
    keys = list(LocalFileStore(tmp_path).yield_keys())
    assert len(keys) == 4  # two documents and a query for model a, one document for model b
    assert all("|" not in k and ":" not in k for k in keys)


async def test_async_twin_matches_sync_and_uses_async_api():
    model = AsyncOnlyCounting()
    cached = CachedEmbeddings(model, batch_size=2)
    texts = ["a", "b", "c", "a"]
    out = await cached.aembed_matrix(texts)
    assert model.async_calls == [["a", "b"], ["c"]]
    assert model.document_calls == []
    np.testing.assert_array_equal(out, CachedEmbeddings(RecordingEmbeddings()).embed_matrix(texts))
    assert (await cached.aembed_documents(["c"]))[0] == out[2].tolist()
    # The repeated "a" in the first call is neither a hit nor a second miss.
    assert (cached.hits, cached.misses) == (1, 3)
    query = await cached.aembed_query("q")
    np.testing.assert_allclose(query, vector_for("q", "query"), rtol=1e-6)
    assert await cached.aembed_query("q") == query
    assert model.async_calls[-1] == ["q"] and len(model.async_calls) == 3


async def test_async_uses_fast_matrix_path_off_the_event_loop():
    model = HashedTfidfEmbeddings(dim=32)
    out = await CachedEmbeddings(model).aembed_matrix(["x y", "z"])
    np.testing.assert_array_equal(out, model.embed_matrix(["x y", "z"]))


def test_thread_safety_under_a_thread_pool():
    model = RecordingEmbeddings(delay=0.001)
    cached = CachedEmbeddings(model, batch_size=4)
    texts = [f"text {i}" for i in range(40)]
    expected = CachedEmbeddings(RecordingEmbeddings()).embed_matrix(texts)
    rng = np.random.default_rng(0)
    jobs = [rng.choice(40, size=8).tolist() for _ in range(300)]

    def run(job: list[int]) -> bool:
        out = cached.embed_matrix([texts[i] for i in job])
        return bool(np.array_equal(out, expected[job]))

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, jobs))
    assert all(results)
    asked = sum(len(job) for job in jobs)
    distinct_per_job = sum(len(set(job)) for job in jobs)
    assert cached.hits + cached.misses <= asked
    assert cached.hits + cached.misses >= distinct_per_job
    # Every text was embedded; a text another job is embedding is waited for, not sent again
    # (only a job that looked a text up just before another stored it can send it twice).
    assert set(model.documents_embedded) == set(texts)
    assert cached.misses == len(model.documents_embedded)


def test_wrong_vector_count_raises():
    cached = CachedEmbeddings(WrongCount())
    with pytest.raises(ValueError, match="returned 1 vectors for 2 texts"):
        cached.embed_matrix(["a", "b"])


def test_ragged_vectors_raise():
    with pytest.raises(ValueError, match="differing shapes"):
        CachedEmbeddings(RaggedShapes()).embed_matrix(["a", "b"])


def test_model_identity_differs_across_models():
    a = model_identity(RecordingEmbeddings(model="fake-a"))
    b = model_identity(RecordingEmbeddings(model="fake-b"))
    assert a != b and "fake-a" in a
    assert model_identity(HashedTfidfEmbeddings(dim=64)) != model_identity(
        HashedTfidfEmbeddings(dim=128)
    )
    assert CachedEmbeddings(RecordingEmbeddings()).namespace == model_identity(
        RecordingEmbeddings()
    )
    assert CachedEmbeddings(RecordingEmbeddings(), namespace="mine").namespace == "mine"


def test_model_identity_sees_every_setting_and_no_secret():
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from pydantic import Field, SecretStr

    small, large = DeterministicFakeEmbedding(size=2), DeterministicFakeEmbedding(size=768)
    assert model_identity(small) != model_identity(large)  # same class, other setting

    class Remote(DeterministicFakeEmbedding):
        api_key: str = "sk-live-123"
        token: SecretStr = SecretStr("t0k3n")
        encode_kwargs: dict = Field(default_factory=lambda: {"normalize": True})

    shown = model_identity(Remote(size=4))
    assert "sk-live-123" not in shown and "t0k3n" not in shown and "api_key" not in shown
    assert 'encode_kwargs={"normalize": true}' in shown
    assert model_identity(Remote(size=4, encode_kwargs={"normalize": False})) != shown
    # Plain objects: public scalar settings only, not run-time state.
    model = RecordingEmbeddings(model="fake-a")
    before = model_identity(model)
    model.embed_documents(["x"])
    assert model_identity(model) == before and "dim=6" in before


def test_distinct_namespaces_never_share_keys():
    store = InMemoryByteStore()
    model = RecordingEmbeddings()
    # Both names sanitise to the same readable prefix; the hash keeps them apart.
    CachedEmbeddings(model, store=store, namespace="m:1").embed_matrix(["t"])
    other = CachedEmbeddings(model, store=store, namespace="m=1")
    other.embed_matrix(["t"])
    assert other.misses == 1
    assert len(list(store.yield_keys())) == 2


def test_in_memory_lru_bound_and_clear():
    model = RecordingEmbeddings()
    cached = CachedEmbeddings(model, max_entries=2)
    cached.embed_matrix(["a", "b", "c"])
    cached.embed_matrix(["a"])  # evicted: embedded again
    assert model.documents_embedded == ["a", "b", "c", "a"]
    cached.clear()
    assert (cached.hits, cached.misses) == (0, 0)
    cached.embed_matrix(["c"])
    assert cached.misses == 1


def test_wrapped_cache_keeps_the_model_identity():
    # Two caches of different models wrapped again (as ContextSelector does when given a cache
    # and a cache_store) must not share keys in one store.
    store = InMemoryByteStore()
    a = CachedEmbeddings(CachedEmbeddings(RecordingEmbeddings(model="fake-a")), store=store)
    b = CachedEmbeddings(CachedEmbeddings(RecordingEmbeddings(model="fake-b")), store=store)
    assert a.namespace == model_identity(RecordingEmbeddings(model="fake-a"))
    a.embed_matrix(["t"])
    b.embed_matrix(["t"])
    assert (b.hits, b.misses) == (0, 1)


class GatedAsync(RecordingEmbeddings):
    """Async model that holds each call until ``gate`` opens; can fail its first call."""

    def __init__(self, *, fail_first: bool = False) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.async_calls: list[list[str]] = []
        self.fail_first = fail_first

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.async_calls.append(list(texts))
        self.entered.set()
        await self.gate.wait()
        if self.fail_first and len(self.async_calls) == 1:
            raise RuntimeError("model down")
        return [vector_for(t, "document", self.dim) for t in texts]


async def test_concurrent_async_calls_embed_a_shared_text_once():
    model = GatedAsync()
    cached = CachedEmbeddings(model)
    first = asyncio.create_task(cached.aembed_matrix(["a", "b"]))
    await model.entered.wait()  # the first call holds "a" and "b" in flight
    second = asyncio.create_task(cached.aembed_matrix(["b", "c", "a"]))
    for _ in range(5):
        await asyncio.sleep(0)  # let the second call claim "c" and start waiting
    model.gate.set()
    out_first, out_second = await asyncio.gather(first, second)
    assert model.async_calls == [["a", "b"], ["c"]]
    expected = CachedEmbeddings(RecordingEmbeddings()).embed_matrix(["a", "b", "c"])
    np.testing.assert_array_equal(out_first, expected[:2])
    np.testing.assert_array_equal(out_second, expected[[1, 2, 0]])
    # "a" and "b" reached the second call without the model: they count as hits.
    assert (cached.hits, cached.misses) == (2, 3)
    assert not cached._flights


@pytest.mark.parametrize("how", ["error", "cancel"])
async def test_a_waiting_call_embeds_itself_when_the_owner_fails(how: str):
    model = GatedAsync(fail_first=how == "error")
    cached = CachedEmbeddings(model)
    owner = asyncio.create_task(cached.aembed_matrix(["a", "b"]))
    await model.entered.wait()
    waiter = asyncio.create_task(cached.aembed_matrix(["a"]))
    for _ in range(5):
        await asyncio.sleep(0)
    if how == "cancel":
        owner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await owner
    model.gate.set()
    if how == "error":
        with pytest.raises(RuntimeError, match="model down"):
            await owner
    out = await waiter
    np.testing.assert_array_equal(out[0], np.asarray(vector_for("a"), dtype=np.float32))
    assert model.async_calls == [["a", "b"], ["a"]]
    assert cached.misses == 3 and not cached._flights


def test_threads_wait_for_a_text_another_thread_is_embedding(waiting: threading.Event):
    gate, entered = threading.Event(), threading.Event()

    class Gated(RecordingEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            if "a" in texts:  # the first thread's call is held until the second one waits
                entered.set()
                assert gate.wait(10)
            return super().embed_documents(texts)

    model = Gated()
    cached = CachedEmbeddings(model)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(cached.embed_matrix, ["a", "b"])
        assert entered.wait(10)
        second = pool.submit(cached.embed_matrix, ["b", "c"])
        assert waiting.wait(10)  # "c" embedded, "b" awaited from the first thread
        gate.set()
        out_first, out_second = first.result(10), second.result(10)
    assert sorted(model.documents_embedded) == ["a", "b", "c"]
    np.testing.assert_array_equal(out_first[1], out_second[0])
    assert not cached._flights


@pytest.mark.parametrize("with_store", [False, True], ids=["memory", "store"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_text_stored_between_lookup_and_claim_is_not_embedded_again(
    with_store: bool, use_async: bool
):
    # Another call embeds "a", stores it and ends its flight after this call looked "a" up but
    # before it claimed it. The claim finds no flight, so only a second lookup avoids a resend.
    model = RecordingEmbeddings()
    cached = CachedEmbeddings(model, store=InMemoryByteStore() if with_store else None)
    real_misses = cached._misses

    def misses_then_race(texts: Any, keys: Any, found: Any) -> Any:
        planned = real_misses(texts, keys, found)
        cached._misses = real_misses  # type: ignore[method-assign]
        cached.embed_matrix(["a"])  # the other call: lookup, claim, embed, store, release
        return planned

    cached._misses = misses_then_race  # type: ignore[method-assign]
    texts = ["a", "b"]
    out = asyncio.run(cached.aembed_matrix(texts)) if use_async else cached.embed_matrix(texts)
    assert model.documents_embedded == ["a", "b"]
    np.testing.assert_array_equal(out, CachedEmbeddings(RecordingEmbeddings()).embed_matrix(texts))
    assert (cached.hits, cached.misses) == (1, 2)
    assert not cached._flights


class SyncOnly(Embeddings):
    """A model whose async methods say they are not implemented (its sync ones work)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [vector_for(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return vector_for(text, "query")

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError("no async")

    async def aembed_query(self, text: str) -> list[float]:
        raise NotImplementedError("no async")


def test_an_async_method_that_is_not_implemented_gives_way_to_the_sync_one() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_pacms import ContextSelector
    from langchain_pacms.integrations import create_pacms_hook

    cached = CachedEmbeddings(SyncOnly())
    got = asyncio.run(cached.aembed_matrix(["a b", "c d"]))
    assert np.allclose(got, [vector_for("a b"), vector_for("c d")])
    messages = [HumanMessage("alpha " * 9), AIMessage("beta " * 9), HumanMessage("alpha?")]
    sync = create_pacms_hook(14, selector=ContextSelector(SyncOnly()))
    aio = create_pacms_hook(14, selector=ContextSelector(SyncOnly()))
    sent = sync.invoke({"messages": messages})["llm_input_messages"]
    assert asyncio.run(aio.ainvoke({"messages": messages}))["llm_input_messages"] == sent
    assert aio.last_selection is not None and not aio.last_selection.fell_back
