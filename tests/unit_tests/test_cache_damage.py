"""The embedding cache never serves a bad vector twice and outlives a failing store."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.stores import InMemoryByteStore
from test_embeddings_cache import RecordingEmbeddings, vector_for

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.embeddings import CachedEmbeddings
from langchain_pacms.embeddings.cache import PROBE_TEXT

POOL = [Candidate(f"note {i} about the staging port {i}", id=str(i)) for i in range(4)]


class NanOnce(RecordingEmbeddings):
    """Returns NaN vectors on its first call, good ones after."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = super().embed_documents(texts)
        if len(self.document_calls) == 1:
            vectors[0] = [float("nan")] * self.dim
        return vectors


def test_a_nan_vector_is_asked_for_again_not_served_from_the_cache():
    # before the fix: the NaN was cached and every later selection fell back to recency
    model = NanOnce()
    store = InMemoryByteStore()
    selector = ContextSelector(model, cache_store=store)
    assert selector.select(POOL, "staging port", 30).fell_back
    again = selector.select(POOL, "staging port", 30)
    assert not again.fell_back and len(model.document_calls) == 2
    fresh = ContextSelector(RecordingEmbeddings(), cache_store=store)  # same store, new process
    assert not fresh.select(POOL, "staging port", 30).fell_back


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # cut inside a float
        lambda b: b[:-4],  # a whole float short
        lambda b: b"",
        lambda b: b[:-4] + np.float32(np.nan).tobytes(),
    ],
    ids=["cut", "short", "empty", "nan"],
)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_damaged_entry_is_a_miss_and_is_embedded_again(damage, use_async):
    store = InMemoryByteStore()
    texts = ["alpha", "beta", "gamma"]
    good = CachedEmbeddings(RecordingEmbeddings(), store=store).embed_matrix(texts)
    (key,) = [k for k in store.yield_keys() if k.endswith(_digest("beta"))]
    store.mset([(key, damage(store.mget([key])[0]))])
    model = RecordingEmbeddings()
    cached = CachedEmbeddings(model, store=store)
    run = cached.aembed_matrix(texts) if use_async else None
    out = asyncio.run(run) if run is not None else cached.embed_matrix(texts)
    np.testing.assert_array_equal(out, good)
    assert model.documents_embedded == ["beta"]
    assert np.isfinite(np.frombuffer(store.mget([key])[0], dtype=np.float32)).all()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class BrokenStore(InMemoryByteStore):
    """A store whose every operation fails, as a full disk or a stopped Redis does."""

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        raise OSError(28, "No space left on device")

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        raise OSError(28, "No space left on device")


def test_a_failing_store_is_skipped_with_one_warning(caplog):
    # before the fix: every selection fell back to recency although the model worked
    selector = ContextSelector(RecordingEmbeddings(), cache_store=BrokenStore())
    with caplog.at_level(logging.DEBUG, logger="langchain_pacms.embeddings.cache"):
        picks = [selector.select(POOL, f"staging port {i}", 30) for i in range(3)]
    assert not any(p.fell_back for p in picks)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()


class AsyncOnlyStore(InMemoryByteStore):
    """A store an async caller must reach through ``amget``/``amset`` (sync use fails)."""

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        raise AssertionError("the event loop called the store's blocking mget")

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        raise AssertionError("the event loop called the store's blocking mset")

    async def amget(self, keys: Sequence[str]) -> list[bytes | None]:
        return InMemoryByteStore.mget(self, keys)

    async def amset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        InMemoryByteStore.mset(self, key_value_pairs)


def test_async_embedding_reads_and_writes_the_store_asynchronously():
    # before the fix: aembed_matrix called mget/mset on the event loop (a hung Redis froze it
    # past embed_timeout)
    store = AsyncOnlyStore()
    model = RecordingEmbeddings()
    cached = CachedEmbeddings(model, store=store)
    first = asyncio.run(cached.aembed_matrix(["a", "b"]))
    second = asyncio.run(CachedEmbeddings(model, store=store).aembed_matrix(["a", "b"]))
    np.testing.assert_array_equal(first, second)
    assert model.documents_embedded == ["a", "b"]  # the second read both from the store


class Held:
    """A model object the wrapper holds, as a hand-written wrapper holds a SentenceTransformer."""

    def __init__(self, name: str) -> None:
        self.name = name


class HoldingEmbeddings(Embeddings):
    """Its model is an object, so its class path is all model_identity can tell."""

    def __init__(self, name: str) -> None:
        self.held = Held(name)
        self._probes = 0
        self._texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if texts == [PROBE_TEXT]:
            self._probes += 1
        else:
            self._texts += texts
        return [vector_for(f"{self.held.name}|{t}") for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_two_models_the_identity_cannot_tell_apart_never_share_vectors(use_async):
    # before the fix: B was served A's vector from the shared store (same namespace, no error)
    store = InMemoryByteStore()
    a, b = HoldingEmbeddings("model-A"), HoldingEmbeddings("model-B")

    def embed(model: HoldingEmbeddings) -> np.ndarray:
        cached = CachedEmbeddings(model, store=store)
        run = cached.aembed_matrix(["hello"]) if use_async else None
        return asyncio.run(run) if run is not None else cached.embed_matrix(["hello"])

    from_a, from_b = embed(a), embed(b)
    np.testing.assert_array_equal(from_b[0], np.float32(vector_for("model-B|hello")))
    assert not np.array_equal(from_a, from_b)
    again = HoldingEmbeddings("model-A")
    np.testing.assert_array_equal(embed(again), from_a)  # the same model still shares
    assert again._texts == [] and again._probes == 1


def test_a_given_namespace_or_identity_needs_no_probe():
    model = RecordingEmbeddings()
    CachedEmbeddings(model, store=InMemoryByteStore(), namespace="mine").embed_matrix(["x"])
    CachedEmbeddings(model).embed_matrix(["x"])  # no store: nothing shared, nothing asked
    assert model._probes == 0


class Noisy(RecordingEmbeddings):
    """A model whose vectors carry noise in the last digits, as GPU models and APIs' do."""

    def __init__(self, seed: int) -> None:
        super().__init__(dim=384)
        self._noise = np.random.default_rng(seed)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        seeds = [int(_digest(t)[:8], 16) for t in texts]
        clean = np.stack([np.random.default_rng(s).standard_normal(self.dim) for s in seeds])
        return (clean + self._noise.normal(0, 1e-6, clean.shape)).tolist()


def test_noise_in_the_last_digits_does_not_move_the_namespace():
    # before the fix: the probe's vector rounded to 4 decimals named the namespace, so 40
    # instances of a noisy model made 40 namespaces and re-embedded everything each time
    store = InMemoryByteStore()
    names = set()
    for seed in range(20):
        cached = CachedEmbeddings(Noisy(seed), store=store)
        cached.embed_matrix(["alpha", "beta"])
        names.add(cached.namespace)
    assert len(names) == 1


def test_a_fresh_cache_knows_the_size_from_its_probe():
    # before the fix: a new instance trusted the size it read most, so an entry cut to half
    # (a whole number of floats) came back as a hit of the wrong size
    store = InMemoryByteStore()
    CachedEmbeddings(RecordingEmbeddings(dim=8), store=store).embed_matrix(["alpha"])
    (key,) = [k for k in store.yield_keys() if k.endswith(_digest("alpha"))]
    store.mset([(key, store.mget([key])[0][:16])])  # four floats of eight
    model = RecordingEmbeddings(dim=8)
    out = CachedEmbeddings(model, store=store).embed_matrix(["alpha"])
    assert out.shape == (1, 8) and model.documents_embedded == ["alpha"]


def test_concurrent_first_calls_probe_once():
    from concurrent.futures import ThreadPoolExecutor

    model = RecordingEmbeddings()
    cached = CachedEmbeddings(model, store=InMemoryByteStore())
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: cached.embed_matrix([f"text {i}"]), range(16)))

    async def burst() -> None:
        fresh = CachedEmbeddings(model, store=InMemoryByteStore())
        await asyncio.gather(*(fresh.aembed_matrix([f"t {i}"]) for i in range(16)))

    asyncio.run(burst())
    assert model._probes == 2  # one per cache


class ProbeFailsOnce(RecordingEmbeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if texts == [PROBE_TEXT] and not self._probes:
            self._probes += 1
            raise RuntimeError("backend 503")
        return super().embed_documents(texts)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_failed_probe_embeds_without_the_store_and_probes_again(use_async, caplog):
    # before the fix: the probe's error failed the whole call (the selection fell back)
    store = InMemoryByteStore()
    model = ProbeFailsOnce()
    cached = CachedEmbeddings(model, store=store)

    def embed(texts: list[str]) -> np.ndarray:
        run = cached.aembed_matrix(texts) if use_async else None
        return asyncio.run(run) if run is not None else cached.embed_matrix(texts)

    with caplog.at_level(logging.WARNING, logger="langchain_pacms.embeddings.cache"):
        first = embed(["alpha", "beta"])
    assert first.shape == (2, 6) and not list(store.yield_keys())  # nothing stored unnamed
    assert "probe" in caplog.text
    np.testing.assert_array_equal(embed(["alpha", "beta"]), first)
    assert model._probes == 2 and len(list(store.yield_keys())) == 2
