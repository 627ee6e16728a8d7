"""PACMSCompressor inside LangChain's own retrieval machinery (langchain-classic)."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_classic.retrievers.document_compressors import (
    DocumentCompressorPipeline,
    LLMChainFilter,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.llms import LLM
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from langchain_pacms import Budget, ContextSelector, HashedTfidfEmbeddings, Pacms, StrategyOptions
from langchain_pacms.integrations.compressor import PACMSCompressor

KEYS = {"pacms_relevance", "pacms_gain", "pacms_pick_rank", "pacms_strategy"}
QUERY = "How do I rotate the staging database password?"

# Crafted so that the three strategies disagree under a budget of ~2 relevant documents:
# topk keeps the two near-duplicate "vault rotate" lines, pacms keeps one of them plus the
# distinct "restart the api pods" fact, lastk (ranked input: head of the list) keeps the head.
CRAFTED = [
    "The office coffee machine was repaired on Monday.",
    "Team lunch is moved to Thursday this week.",
    "Rotate the staging database password with: vault rotate staging-db.",
    "Rotate the staging database password with: vault rotate staging-db (runbook).",
    "After you rotate the staging database password, restart the api pods so they reconnect.",
    "The marketing site uses a new font.",
]
A, A_DUP, B = 2, 3, 4

CORPUS = [
    *CRAFTED,
    "The staging database listens on port 6543 behind pgbouncer.",
    "Production database backups run nightly at 02:00 UTC.",
    "CI is flaky again: the integration job times out on the arm runners.",
    "The api pods read the database password from the staging-db vault secret.",
    "Password policy: rotate every 90 days and never reuse the last five.",
    "Grafana dashboards for the staging cluster live in the ops folder.",
]


def _docs(texts: list[str]) -> list[Document]:
    return [
        Document(t, id=f"doc-{i}", metadata={"source": f"kb/{i}.md", "tags": ["kb"]})
        for i, t in enumerate(texts)
    ]


def _tokens(compressor: PACMSCompressor, docs: list[Document]) -> int:
    assert compressor.selector is not None
    return sum(compressor.selector.token_counter(d.page_content) for d in docs)


@pytest.fixture
def store() -> InMemoryVectorStore:
    vs = InMemoryVectorStore(HashedTfidfEmbeddings())
    vs.add_documents(_docs(CORPUS))
    return vs


def await_(coro):  # run a coroutine from a sync test
    return asyncio.run(coro)


def _is_subsequence(sub: list[str], full: list[str]) -> bool:
    it = iter(full)
    return all(x in it for x in sub)


def _check_output(
    compressor: PACMSCompressor, kept: list[Document], pool: list[Document], budget: int
) -> None:
    assert kept, "nothing kept"
    assert _is_subsequence([d.id for d in kept], [d.id for d in pool])  # type: ignore[misc]
    assert _tokens(compressor, kept) <= budget
    for d in kept:
        assert d.metadata.keys() >= KEYS
        assert d.metadata["source"].startswith("kb/")
        assert 0.0 <= d.metadata["pacms_relevance"] <= 1.0
        assert isinstance(d.metadata["pacms_pick_rank"], int)
        assert d.metadata["pacms_strategy"] == "pacms"
    ranks = sorted(d.metadata["pacms_pick_rank"] for d in kept)
    assert ranks == list(range(len(kept)))


# -- ContextualCompressionRetriever --------------------------------------------------------
def test_retriever_sync(store: InMemoryVectorStore) -> None:
    base = store.as_retriever(search_kwargs={"k": 8})
    compressor = PACMSCompressor(40, selector=HashedTfidfEmbeddings())
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    pool = base.invoke(QUERY)
    kept = retriever.invoke(QUERY)
    _check_output(compressor, kept, pool, 40)
    assert len(kept) < len(pool)
    texts = [d.page_content for d in kept]
    assert CRAFTED[B] in texts  # the distinct fact survives
    assert not (CRAFTED[A] in texts and CRAFTED[A_DUP] in texts)  # one copy is enough


async def test_retriever_async_matches_sync_and_uses_aselect(
    store: InMemoryVectorStore,
) -> None:
    base = store.as_retriever(search_kwargs={"k": 8})
    compressor = PACMSCompressor(budget=40)
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    expected = retriever.invoke(QUERY)

    def _no_sync(*args: object, **kwargs: object) -> None:
        raise AssertionError("acompress_documents must not call the sync select")

    assert compressor.selector is not None
    compressor.selector.select = _no_sync  # type: ignore[method-assign]
    kept = await retriever.ainvoke(QUERY)
    assert [(d.id, d.metadata) for d in kept] == [(d.id, d.metadata) for d in expected]
    _check_output(compressor, kept, await base.ainvoke(QUERY), 40)


def test_budget_ratio_respected(store: InMemoryVectorStore) -> None:
    base = store.as_retriever(search_kwargs={"k": 10})
    compressor = PACMSCompressor(budget=("ratio", 0.3))
    pool = base.invoke(QUERY)
    kept = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base).invoke(
        QUERY
    )
    _check_output(compressor, kept, pool, int(0.3 * _tokens(compressor, pool)))


# -- DocumentCompressorPipeline ------------------------------------------------------------
LONG = [
    Document(" ".join(CORPUS[i : i + 4]), id=f"long-{i}", metadata={"source": f"kb/long-{i}.md"})
    for i in range(0, len(CORPUS), 4)
]


def test_pipeline_after_splitter_sync_and_async() -> None:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=120, chunk_overlap=0, separators=[". ", " "], keep_separator="end"
    )
    compressor = PACMSCompressor(budget=45)
    pipeline = DocumentCompressorPipeline(transformers=[splitter, compressor])
    chunks = splitter.transform_documents(LONG)
    assert len(chunks) > len(LONG)
    kept = list(pipeline.compress_documents(LONG, QUERY))
    assert kept and len(kept) < len(chunks)
    assert _tokens(compressor, kept) <= 45
    pos = [[c.page_content for c in chunks].index(d.page_content) for d in kept]
    assert pos == sorted(pos)  # chunk order preserved
    assert all(d.metadata.keys() >= KEYS and "source" in d.metadata for d in kept)
    assert any("restart the api pods" in d.page_content for d in kept)
    akept = list(await_(pipeline.acompress_documents(LONG, QUERY)))
    assert [d.page_content for d in akept] == [d.page_content for d in kept]
    assert all("pacms_relevance" not in d.metadata for d in LONG)


class _KeywordJudge(LLM):
    """A fake LLM for ``LLMChainFilter``: YES when the context mentions a keyword."""

    keywords: tuple[str, ...] = ("database", "password", "db")

    @property
    def _llm_type(self) -> str:
        return "keyword-judge"

    def _call(
        self, prompt: str, stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> str:
        context = prompt.split(">>>")[1].lower()
        return "YES" if any(k in context for k in self.keywords) else "NO"


async def test_pipeline_after_llm_filter(store: InMemoryVectorStore) -> None:
    judge = LLMChainFilter.from_llm(_KeywordJudge())
    compressor = PACMSCompressor(budget=30)
    pipeline = DocumentCompressorPipeline(transformers=[judge, compressor])
    pool = store.similarity_search(QUERY, k=len(CORPUS))
    filtered = list(judge.compress_documents(pool, QUERY))
    assert 2 < len(filtered) < len(pool)
    for kept in (
        list(pipeline.compress_documents(pool, QUERY)),
        list(await pipeline.acompress_documents(pool, QUERY)),
    ):
        assert kept and len(kept) < len(filtered)
        assert _tokens(compressor, kept) <= 30
        assert {d.id for d in kept} <= {d.id for d in filtered}
        assert _is_subsequence([d.id for d in kept], [d.id for d in pool])  # type: ignore[misc]
        assert all(d.metadata.keys() >= KEYS and "source" in d.metadata for d in kept)


# -- strategies ----------------------------------------------------------------------------
def test_strategy_option_changes_outcome() -> None:
    docs = _docs(CRAFTED)
    kept = {}
    for strategy in ("pacms", "topk", "lastk"):
        compressor = PACMSCompressor(budget=30, strategy=strategy)
        out = compressor.compress_documents(docs, QUERY)
        assert _tokens(compressor, list(out)) <= 30
        assert {d.metadata["pacms_strategy"] for d in out} == {strategy}
        kept[strategy] = {int(d.id.split("-")[1]) for d in out}  # type: ignore[union-attr]
    assert {A, B} <= kept["pacms"] and A_DUP not in kept["pacms"]
    assert {A, A_DUP} <= kept["topk"] and B not in kept["topk"]
    assert kept["lastk"] >= {0, 1} and B not in kept["lastk"]  # ranked input: head of the list
    assert len({frozenset(v) for v in kept.values()}) == 3


def test_strategy_options_reach_the_strategy() -> None:
    docs = _docs(CRAFTED)
    rag1 = PACMSCompressor(200, strategy=StrategyOptions("rag", k=1))
    rag3 = PACMSCompressor(200, strategy=StrategyOptions("rag", k=3))
    assert len(rag1.compress_documents(docs, QUERY)) == 1
    assert len(rag3.compress_documents(docs, QUERY)) == 3


def test_a_selector_passed_in_gives_its_defaults_and_merges_options() -> None:
    selector = ContextSelector(strategy="rag", strategy_options={"k": 2})
    docs = _docs(CRAFTED)
    default = PACMSCompressor(200, selector=selector)
    assert default.selector is selector
    assert len(default.compress_documents(docs, QUERY)) == 2
    merged = PACMSCompressor(200, selector=selector, strategy=StrategyOptions("rag", k=4))
    assert len(merged.compress_documents(docs, QUERY)) == 4
    other = PACMSCompressor(30, selector=selector, strategy="topk")
    assert {d.metadata["pacms_strategy"] for d in other.compress_documents(docs, QUERY)} == {"topk"}


# -- documents in, documents out -----------------------------------------------------------
def test_inputs_untouched_and_outputs_new() -> None:
    docs = _docs(CRAFTED)
    before = copy.deepcopy(docs)
    meta_ids = [id(d.metadata) for d in docs]
    kept = PACMSCompressor(budget=30).compress_documents(docs, QUERY)
    assert docs == before
    assert [id(d.metadata) for d in docs] == meta_ids
    assert all("pacms_relevance" not in d.metadata for d in docs)
    assert all(k is not d for k in kept for d in docs)
    assert all(k.metadata is not d.metadata for k in kept for d in docs)


def test_duplicate_and_missing_ids_are_mapped_by_index() -> None:
    texts = [CRAFTED[A], CRAFTED[A], CRAFTED[B], CRAFTED[0]]
    docs = [
        Document(texts[0], id="same"),
        Document(texts[1], id="same"),
        Document(texts[2]),
        Document(texts[3]),
    ]
    # Everything fits; the diversity fill then keeps every document, the exact copy included.
    compressor = PACMSCompressor(200, strategy=Pacms(fill="diverse"))
    kept = compressor.compress_documents(docs, QUERY)
    assert [(d.id, d.page_content) for d in kept] == [(d.id, d.page_content) for d in docs]
    _, selection = compressor.compress_with_selection(docs, QUERY)
    assert selection.kept_ids == ("0", "1", "2", "3")
    # The default distinct fill never keeps a near-copy of what it kept, even with room left:
    # one of the two "same" documents goes, and the others keep their own ids.
    default = PACMSCompressor(budget=200)
    kept, selection = default.compress_with_selection(docs, QUERY)
    assert [(d.id, d.page_content) for d in kept] == [
        (d.id, d.page_content) for d in (docs[0], docs[2], docs[3])
    ]
    assert len(selection.kept_ids) == 3 and selection.kept_ids[0] in ("0", "1")
    assert selection.kept_ids[1:] == ("2", "3")


def test_subclass_and_pacms_keys_overwritten_on_second_pass() -> None:
    class MyDoc(Document):
        pass

    docs = [MyDoc(t, metadata={"pacms_strategy": "stale"}) for t in CRAFTED]
    first = PACMSCompressor(budget=40, strategy="topk").compress_documents(docs, QUERY)
    second = PACMSCompressor(budget=20).compress_documents(first, QUERY)
    assert all(type(d) is MyDoc for d in second)
    assert {d.metadata["pacms_strategy"] for d in first} == {"topk"}
    assert {d.metadata["pacms_strategy"] for d in second} == {"pacms"}
    assert docs[0].metadata == {"pacms_strategy": "stale"}


def test_empty_input_and_cache_stays_warm() -> None:
    compressor = PACMSCompressor(budget=30)
    assert compressor.compress_documents([], QUERY) == []
    assert await_(compressor.acompress_documents([], QUERY)) == []
    docs = _docs(CRAFTED)
    compressor.compress_documents(docs, QUERY)
    assert compressor.selector is not None
    cache = compressor.selector.embeddings
    misses = cache.misses
    compressor.compress_documents(docs, QUERY)
    await_(compressor.acompress_documents(docs, QUERY))
    assert cache.misses == misses  # the same pool again: nothing is embedded twice
    assert cache.misses == len(docs) + 1


# -- fail soft -----------------------------------------------------------------------------
class _Broken(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding server down")

    def embed_query(self, text: str) -> list[float]:
        raise ConnectionError("embedding server down")


@pytest.mark.parametrize(
    ("input_order", "expected"), [("ranked", {0, 1, 2}), ("chronological", {4, 5})]
)
def test_fallback_keeps_recent_end_within_budget(
    input_order: str, expected: set[int], caplog: pytest.LogCaptureFixture
) -> None:
    compressor = PACMSCompressor(30, selector=_Broken(), input_order=input_order)
    docs = _docs(CRAFTED)
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        kept = compressor.compress_documents(docs, QUERY)
        again = await_(compressor.acompress_documents(docs, QUERY))
    assert {int(d.id.split("-")[1]) for d in kept} == expected  # type: ignore[union-attr]
    assert [d.id for d in again] == [d.id for d in kept]
    assert _tokens(compressor, list(kept)) <= 30
    assert {d.metadata["pacms_strategy"] for d in kept} == {"lastk"}
    assert {d.metadata["pacms_relevance"] for d in kept} == {0.0}
    warnings = [r for r in caplog.records if "falling back" in r.getMessage()]
    assert len(warnings) == 1


def test_strict_selector_raises() -> None:
    compressor = PACMSCompressor(30, selector=ContextSelector(_Broken(), strict=True))
    with pytest.raises(ConnectionError):
        compressor.compress_documents(_docs(CRAFTED), QUERY)


# -- argument validation -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a budget"),
        (lambda: {"budget": Budget(tokens=10, ratio=0.5)}, "not tokens and ratio"),
        ({"budget": 0}, r"Budget\(tokens=...\) must be a positive int"),
        ({"budget": True}, "budget must be a Budget"),
        ({"budget": "10"}, "budget must be a Budget"),
        ({"budget": ("ratio", 0)}, r"Budget\(ratio=...\) must be a number in \(0, 1\]"),
        ({"budget": ("ratio", 1.5)}, r"Budget\(ratio=...\) must be a number in \(0, 1\]"),
        ({"budget": 10, "strategy": "nope"}, "unknown strategy 'nope'"),
        (
            lambda: {"budget": 10, "strategy": StrategyOptions("pacms", relevence_weight=0.3)},
            "rejects its options.*relevence_weight",
        ),
        (lambda: {"budget": 10, "strategy": StrategyOptions("rag", k=0)}, "k >= 1"),
        ({"budget": 10, "selector": "nomic-embed-text"}, "a Selector or LangChain Embeddings"),
        ({"budget": 10, "input_order": "random"}, "input_order"),
    ],
)
def test_bad_arguments(kwargs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PACMSCompressor(**(kwargs() if callable(kwargs) else kwargs))


@pytest.mark.parametrize("old", ["budget_tokens", "embeddings", "strategy_options", "k"])
def test_an_unknown_keyword_lists_the_valid_ones(old: str) -> None:
    with pytest.raises(TypeError, match=f"unknown keyword: {old}.*budget, strategy, selector"):
        PACMSCompressor(10, **{old: 1})


def test_bad_call_arguments() -> None:
    compressor = PACMSCompressor(budget=10)
    with pytest.raises(ValueError, match="query is empty"):
        compressor.compress_documents(_docs(CRAFTED), "  ")
    with pytest.raises(ValueError, match="expected Document"):
        compressor.compress_documents(["plain text"], QUERY)  # type: ignore[list-item]


def test_a_longer_note_is_a_copy_only_at_a_lower_threshold() -> None:
    # A one-line chunk with "(see the runbook)" appended has pool cosine about 0.82 with the
    # line: below the built-in threshold 0.85, so both stay candidates; at 0.6 they are copies.
    noted = "Rotate the staging database password with: vault rotate staging-db (see the runbook)."
    docs = _docs([*CRAFTED[:A_DUP], noted, *CRAFTED[A_DUP + 1 :]])
    default = PACMSCompressor(budget=30).compress_documents(docs, QUERY)
    kept = {int(d.id.split("-")[1]) for d in default}  # type: ignore[union-attr]
    assert {A, A_DUP} <= kept and B not in kept
    loose = PACMSCompressor(30, strategy=Pacms(similarity_threshold=0.6))
    kept = {int(d.id.split("-")[1]) for d in loose.compress_documents(docs, QUERY)}  # type: ignore[union-attr]
    assert {A, B} <= kept and A_DUP not in kept
