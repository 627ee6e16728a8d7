from __future__ import annotations

import asyncio
import copy

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.embeddings import (
    CachedEmbeddings,
    HashedTfidfEmbeddings,
    PrefixedEmbeddings,
    task_prefixes,
)
from langchain_pacms.embeddings.cache import model_identity
from langchain_pacms.selector import DENSE_SIMILARITY_THRESHOLD


class Recording(Embeddings):
    """Records what it is asked to embed, by kind."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.model = DeterministicFakeEmbedding(size=16)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.seen += [("document", t) for t in texts]
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.seen.append(("query", text))
        return self.model.embed_query(text)


def test_prefixes_reach_the_model_by_kind_sync_and_async() -> None:
    inner = Recording()
    model = PrefixedEmbeddings(inner, query_prefix="q: ", document_prefix="d: ")
    assert model.embed_documents(["a", "b"]) == inner.model.embed_documents(["d: a", "d: b"])
    assert model.embed_query("c") == inner.model.embed_query("q: c")
    asyncio.run(model.aembed_documents(["e"]))
    asyncio.run(model.aembed_query("f"))
    assert inner.seen == [
        ("document", "d: a"),
        ("document", "d: b"),
        ("query", "q: c"),
        ("document", "d: e"),
        ("query", "q: f"),
    ]


def test_the_selector_sends_the_query_and_candidates_with_their_own_prefix() -> None:
    inner = Recording()
    selector = ContextSelector(PrefixedEmbeddings(inner, query_prefix="Q|", document_prefix="D|"))
    selector.select([Candidate("alpha beta"), Candidate("gamma")], query="alpha?", budget=100)
    assert sorted(inner.seen) == [
        ("document", "D|alpha beta"),
        ("document", "D|gamma"),
        ("query", "Q|alpha?"),
    ]


def test_prefixed_vectors_are_cached_apart_from_plain_ones() -> None:
    plain = DeterministicFakeEmbedding(size=8)
    a = PrefixedEmbeddings(plain, query_prefix="q: ")
    b = PrefixedEmbeddings(plain, query_prefix="q: ", document_prefix="d: ")
    identities = {model_identity(plain), model_identity(a), model_identity(b)}
    assert len(identities) == 3
    assert model_identity(a).startswith(model_identity(plain))
    assert CachedEmbeddings(a).namespace != CachedEmbeddings(plain).namespace


def test_the_wrapped_models_declarations_still_reach_the_selector() -> None:
    lexical = HashedTfidfEmbeddings(dim=256)
    wrapped = PrefixedEmbeddings(lexical, query_prefix="q: ")
    plain, prefixed = ContextSelector(lexical), ContextSelector(wrapped)
    assert prefixed.similarity_threshold == plain.similarity_threshold == 0.85
    assert prefixed.min_gain == plain.min_gain == 0.01
    assert wrapped.reweight_pool == lexical.reweight_pool
    # A fast path would skip the prefixes, so it is not passed through.
    assert hasattr(lexical, "embed_matrix") and not hasattr(wrapped, "embed_matrix")
    assert copy.deepcopy(wrapped).query_prefix == "q: "  # no recursion before __init__
    dense = PrefixedEmbeddings(DeterministicFakeEmbedding(size=8), query_prefix="q: ")
    assert ContextSelector(dense).similarity_threshold == DENSE_SIMILARITY_THRESHOLD


def test_known_prefixes_by_base_name() -> None:
    nomic = ("search_query: ", "search_document: ")
    assert task_prefixes("nomic-embed-text") == nomic
    assert task_prefixes(" library/Nomic-Embed-Text:v1.5 ") == nomic
    assert task_prefixes("nomic-embed-text-v2") is None and task_prefixes("all-minilm") is None
    with pytest.raises(ValueError, match="query_prefix"):
        PrefixedEmbeddings(DeterministicFakeEmbedding(size=4))
