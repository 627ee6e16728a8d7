"""Relevance from sparse rows: the embedder's pool relevance, the problem's given scores, MMR."""

from __future__ import annotations

import copy
import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import langchain_pacms.embeddings.lexical as lexical
from langchain_pacms import ContextSelector
from langchain_pacms.core import Problem, mmr_ranking, solve
from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.embeddings.sparse import PoolRelevance, idf_cosines, sparse_row

WORDS = ["port", "staging", "postgres", "cat", "dog", "6543", "deploy", "role", "admin", "the"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(WORDS), max_size=10), min_size=1, max_size=10),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
)
@example([["staging", "port", "postgres"]], ["staging", "port", "postgres"])
@example([["staging", "port", "postgres"]], ["port", "staging", "postgres"])
def test_pool_relevance_is_a_clipped_cosine_of_idf_rows(docs: list[list[str]], q: list[str]):
    texts = [" ".join(d) for d in docs]
    rel = idf_cosines([sparse_row(t) for t in texts], sparse_row(" ".join(q)))
    assert rel.shape == (len(texts),)
    assert ((rel >= 0.0) & (rel <= 1.0 + 1e-9)).all()
    for text, r in zip(texts, rel.tolist()):
        if not set(text.split()) & set(q):  # no shared word: nothing to match
            assert r == 0.0
        if text and text.split() == q and len(set(q)) == len(q):
            # the same words in the same order, once each: the same row (word pairs count too,
            # so the same words in another order are not)
            assert r == pytest.approx(1.0)


def test_the_row_store_is_bounded_and_reused() -> None:
    emb = HashedTfidfEmbeddings()
    assert emb._rows.max_bytes == lexical.SPARSE_ROWS_BYTES
    texts = [f"message number {i} about the staging port" for i in range(50)]
    first = emb.pool_relevance(texts, "staging port")
    assert len(emb._rows) == 50
    assert np.array_equal(emb.pool_relevance(texts, "staging port"), first)  # from the store
    emb._rows.max_bytes = 3_000
    emb.pool_relevance([f"another text {i}" for i in range(20)], "text")
    assert 0 < emb._rows.nbytes <= 3_000 and len(emb._rows) < 20
    assert emb._rows.nbytes == sum(lexical._row_bytes(t, r) for t, r in emb._rows.items())


def test_the_embedder_copies_and_pickles_without_its_row_store() -> None:
    emb = HashedTfidfEmbeddings(dim=64)
    emb.pool_relevance(["a b", "c d"], "a")
    for twin in (copy.deepcopy(emb), pickle.loads(pickle.dumps(emb))):
        assert twin.dim == 64 and twin.relevance_buckets == emb.relevance_buckets
        assert len(twin._rows) == 0
        assert (
            twin.pool_relevance(["a b", "c d"], "a").tolist()
            == emb.pool_relevance(["a b", "c d"], "a").tolist()
        )


def test_concurrent_pools_score_as_one_thread_does() -> None:
    emb = HashedTfidfEmbeddings()
    pools = [[f"turn {i} of pool {p} with word{i % 7}" for i in range(40)] for p in range(8)]
    alone = [HashedTfidfEmbeddings().pool_relevance(pool, "word3 pool") for pool in pools]
    with ThreadPoolExecutor(4) as ex:
        together = list(ex.map(lambda pool: emb.pool_relevance(pool, "word3 pool"), pools * 3))
    for i, got in enumerate(together):
        assert np.array_equal(got, alone[i % 8])


def test_relevance_buckets_none_declines_and_bad_values_raise() -> None:
    emb = HashedTfidfEmbeddings(relevance_buckets=None)
    assert isinstance(emb, PoolRelevance) and emb.pool_relevance(["a"], "a") is None
    assert ContextSelector(emb).pool_relevance(["a"], "a") is None
    for bad in (3, 0, True, 2.0):
        with pytest.raises(ValueError, match="relevance_buckets"):
            HashedTfidfEmbeddings(relevance_buckets=bad)  # type: ignore[arg-type]


def test_the_selector_finds_the_scorer_under_its_cache_wrapper() -> None:
    wrapped = ContextSelector(CachedEmbeddings(HashedTfidfEmbeddings()))
    plain = ContextSelector()
    texts = ["red apples and pears", "green pears", "a red car"]
    assert wrapped.pool_relevance(texts, "red") is not None
    assert np.array_equal(
        wrapped.select(texts, "red", budget=("ratio", 1.0)).relevance["0"],
        plain.select(texts, "red", budget=("ratio", 1.0)).relevance["0"],
    )


def test_a_scorer_with_the_wrong_shape_is_an_embedding_error() -> None:
    class Broken(HashedTfidfEmbeddings):
        def pool_relevance(self, texts, query):  # type: ignore[no-untyped-def]
            return np.ones(len(texts) + 1, dtype=np.float32)

    selector = ContextSelector(Broken())
    sel = selector.select(["a", "b"], "a", budget=1)
    assert sel.fell_back and "pool_relevance" in (sel.error or "")
    with pytest.raises(Exception, match="pool_relevance"):
        ContextSelector(Broken(), strict=True).select(["a", "b"], "a", budget=1)


def test_given_relevance_is_validated_and_ranks_every_strategy() -> None:
    vectors = np.eye(3, dtype=np.float32)
    query = np.array([1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="relevance must hold 3"):
        Problem.build(vectors, query, tokens=[1, 1, 1], budget=1, relevance=[0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):
        Problem.build(vectors, query, tokens=[1, 1, 1], budget=1, relevance=[0.1, np.nan, 0])
    p = Problem.build(vectors, query, tokens=[1, 1, 1], budget=1, relevance=[0.1, 0.9, 0.0])
    assert p.with_budget(2).relevance.tolist() == p.relevance.tolist()
    for strategy in ("topk", "pacms", "mmr", "rag"):
        assert solve(p, strategy).order.tolist()[:1] == [1], strategy


def test_mmr_ranking_with_relevance_uses_it_for_the_query_term_only() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 5)).astype(np.float32)
    q = rng.standard_normal(5).astype(np.float32)
    cos = (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
    same, _ = mmr_ranking(x, q, 0.5, relevance=cos.astype(np.float32))
    plain, _ = mmr_ranking(x, q, 0.5)
    assert same.tolist() == plain.tolist()
    flipped, _ = mmr_ranking(x, q, 0.5, relevance=(-cos).astype(np.float32))
    assert flipped[0] == int(np.argmin(cos))


def test_scoring_leaves_this_threads_tables_zero() -> None:
    from langchain_pacms.embeddings.sparse import RELEVANCE_BUCKETS, _scratch

    HashedTfidfEmbeddings().pool_relevance(["red apples", "red pears", "green"], "red pears")
    counts, lookup = _scratch(RELEVANCE_BUCKETS)
    assert not counts.any() and not lookup.any()
