"""The embedder profile: declared once, seen through wrappers, shown by the selector."""

from __future__ import annotations

import logging

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.stores import InMemoryByteStore
from pydantic import BaseModel

from langchain_pacms import ContextSelector, EmbedderProfile, HashedTfidfEmbeddings
from langchain_pacms.demo import load_demo_session
from langchain_pacms.embeddings import PrefixedEmbeddings

cache_module = pytest.importorskip("langchain_classic.embeddings")
CacheBackedEmbeddings = cache_module.CacheBackedEmbeddings


def demo_kept_ids(selector: ContextSelector) -> dict[str, tuple[str, ...]]:
    session = load_demo_session()
    return {
        name: selector.select(
            session.candidates, session.query, budget=("ratio", 0.015), strategy=name
        ).kept_ids
        for name in ("pacms", "topk", "mmr")
    }


def test_cache_backed_embeddings_keep_the_built_in_profile_and_the_demo_picks():
    plain = ContextSelector()
    wrapped = ContextSelector(
        CacheBackedEmbeddings.from_bytes_store(
            HashedTfidfEmbeddings(), InMemoryByteStore(), key_encoder="sha256"
        )
    )
    assert wrapped.profile == plain.profile
    assert plain.profile.name == "hashed-tfidf" and plain.profile.idf_reweighting
    assert (plain.similarity_threshold, plain.min_gain, plain.relevance_feedback) == (
        0.85,
        0.01,
        0.6,
    )
    assert demo_kept_ids(wrapped) == demo_kept_ids(plain)


def test_prefixed_and_nested_wrappers_are_seen_through():
    inner = HashedTfidfEmbeddings(dim=256)
    nested = CacheBackedEmbeddings.from_bytes_store(
        PrefixedEmbeddings(inner, query_prefix="q: "), InMemoryByteStore(), key_encoder="sha256"
    )
    assert ContextSelector(nested).profile == ContextSelector(inner).profile


def test_an_explicit_profile_wins_and_is_shown():
    profile = EmbedderProfile(
        name="my-model", similarity_threshold=0.7, min_gain=0.02, relevance_feedback=0.3
    )
    selector = ContextSelector(DeterministicFakeEmbedding(size=8), profile=profile)
    assert selector.profile is profile
    assert selector.resolve_options("pacms")[1] == {
        "similarity_threshold": 0.7,
        "min_gain": 0.02,
        "relevance_feedback": 0.3,
    }
    # an option given for the call wins over the profile's
    assert (
        selector.resolve_options("pacms", {"relevance_feedback": 0.0})[1]["relevance_feedback"]
        == 0.0
    )
    shown = repr(selector)
    assert "EmbedderProfile(name='my-model'" in shown and "DeterministicFakeEmbedding" in shown
    assert "memory_ceiling_bytes=268435456" in shown and "blas_threads=1" in shown
    assert "HashedTfidfEmbeddings(dim=4096, bigrams=True, relevance_buckets=262144)" in repr(
        ContextSelector()
    )


def test_a_dense_model_gets_the_calibrated_profile_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        selector = ContextSelector(DeterministicFakeEmbedding(size=8))
    assert selector.profile == EmbedderProfile(name="calibrated", calibration="pool")
    assert selector.profile.similarity_threshold == 0.85 and not selector.profile.idf_reweighting
    assert selector.profile.relevance_feedback == 0.0
    assert not caplog.records


class OpaqueWrapper(Embeddings):
    """A wrapper whose inner model sits under a name the selector does not know."""

    def __init__(self, inner: Embeddings) -> None:
        self._inner = inner

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._inner.embed_query(text)


def test_a_wrapper_it_cannot_see_through_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        selector = ContextSelector(OpaqueWrapper(HashedTfidfEmbeddings()))
    assert selector.profile == EmbedderProfile(name="calibrated", calibration="pool")
    assert any("profile=" in r.getMessage() for r in caplog.records)
    quiet = ContextSelector(
        OpaqueWrapper(HashedTfidfEmbeddings()), profile=HashedTfidfEmbeddings.pacms_profile
    )
    assert quiet.profile.name == "hashed-tfidf"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("similarity_threshold", 1.0),
        ("similarity_threshold", -0.1),
        ("min_gain", 1.5),
        ("relevance_feedback", 1.0),
        ("relevance_feedback", True),
        ("idf_reweighting", "yes"),
        ("name", ""),
    ],
)
def test_bad_profiles_are_rejected(field: str, value: object):
    with pytest.raises(ValueError, match=field):
        EmbedderProfile(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="profile"):
        ContextSelector(profile={"similarity_threshold": 0.5})  # type: ignore[arg-type]


class FieldProfile(Embeddings, BaseModel):
    """A pydantic embedder that declares its profile as a field, the way its settings are."""

    pacms_profile: EmbedderProfile = EmbedderProfile(name="mine", similarity_threshold=0.7)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, float(len(t))] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, float(len(text))]


def test_a_profile_declared_on_the_instance_or_as_a_field_is_used():
    # before the fix: only a class attribute was read; these fell back to "calibrated" silently
    assert ContextSelector(FieldProfile()).profile.name == "mine"
    model = OpaqueWrapper(HashedTfidfEmbeddings())
    model.pacms_profile = EmbedderProfile(name="set-on-it")  # type: ignore[attr-defined]
    assert ContextSelector(model).profile.name == "set-on-it"
