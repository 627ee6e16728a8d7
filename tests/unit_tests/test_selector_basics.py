import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from pacms_fakes import TableEmbeddings

from langchain_pacms import Candidate, ContextSelector, HashedTfidfEmbeddings, available_strategies
from langchain_pacms.selector import DENSE_SIMILARITY_THRESHOLD, EmbedderProfile, EmbeddingError


def test_builtin_strategies_registered():
    assert {"pacms", "topk", "lastk", "mmr", "rag"} <= set(available_strategies())


def test_relevant_fact_kept_under_tight_budget():
    pool = ["The staging DB listens on port 6543.", "Lunch was great.", "CI is flaky again."]
    sel = ContextSelector().select(pool, "Which port does the staging DB use?", budget=12)
    assert sel.kept_ids == ("0",)
    assert sel.tokens_kept <= sel.budget == 12
    assert sel.tokens_dropped == sel.tokens_total - sel.tokens_kept


def test_duplicate_ids_rejected():
    with pytest.raises(ValueError, match="duplicate candidate id"):
        ContextSelector().select([Candidate("a", id="x"), Candidate("b", id="x")], "q", budget=5)


def test_integrations_are_exported_lazily():
    import subprocess
    import sys

    code = (
        "import sys, langchain_pacms as lp;"
        "assert 'langchain_pacms.integrations.graph' not in sys.modules;"
        "hook = lp.create_pacms_hook(100);"
        "assert callable(hook.invoke);"
        "assert lp.PACMSCompressor.__name__ == 'PACMSCompressor';"
        "assert 'PACMSMiddleware' in lp.__all__"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no attribute"):
        _ = __import__("langchain_pacms").not_a_thing


# ---------------------------------------------- the kernel threshold follows the embedder


class _Declares(TableEmbeddings):
    pacms_profile = EmbedderProfile(name="table", similarity_threshold=0.7, min_gain=0.02)


def _related_pool() -> tuple[dict[str, list[float]], list[Candidate]]:
    # Cosines: query-A 0.9, query-B 0.85, query-C 0.6, A-B 0.75 (related, not copies), A-C and
    # B-C 0.4. At tau = 0.6 A "covers" a quarter of B, so pacms takes C second; at 0.85 A and B
    # are unrelated to the kernel and B, the more relevant one, is kept.
    gram = np.array(
        [
            [1.0, 0.9, 0.85, 0.6],
            [0.9, 1.0, 0.75, 0.4],
            [0.85, 0.75, 1.0, 0.4],
            [0.6, 0.4, 0.4, 1.0],
        ]
    )
    vectors = np.linalg.cholesky(gram)
    names = ["query", "A", "B", "C"]
    table = {n: v.tolist() for n, v in zip(names, vectors)}
    return table, [Candidate(n, id=n, tokens=10) for n in names[1:]]


def test_similarity_threshold_and_min_gain_come_from_the_declared_profile() -> None:
    table, _ = _related_pool()
    lexical = HashedTfidfEmbeddings.pacms_profile
    assert ContextSelector().similarity_threshold == lexical.similarity_threshold == 0.85
    assert ContextSelector().min_gain == lexical.min_gain == 0.01
    dense = ContextSelector(TableEmbeddings(table))
    assert (dense.similarity_threshold, dense.min_gain) == (DENSE_SIMILARITY_THRESHOLD, 0.0)
    declared = ContextSelector(_Declares(table))
    assert (declared.similarity_threshold, declared.min_gain) == (0.7, 0.02)
    # Loose attributes are not guessed at: only a declared profile counts.
    loose = TableEmbeddings(table)
    loose.similarity_threshold = 0.5  # type: ignore[attr-defined]
    loose.min_gain = 0.3  # type: ignore[attr-defined]
    assert ContextSelector(loose).profile == EmbedderProfile(name="calibrated", calibration="pool")


def test_resolve_options_fills_only_pacms_embedder_settings() -> None:
    selector = ContextSelector(strategy_options={"gain_floor": 0.1})
    assert selector.resolve_options() == (
        "pacms",
        {
            "gain_floor": 0.1,
            "similarity_threshold": 0.85,
            "min_gain": 0.01,
            "relevance_feedback": 0.6,
        },
    )
    assert selector.resolve_options("pacms", {"similarity_threshold": 0.3})[1] == {
        "gain_floor": 0.1,
        "similarity_threshold": 0.3,
        "min_gain": 0.01,
        "relevance_feedback": 0.6,
    }
    assert selector.resolve_options("topk") == ("topk", {})
    assert selector.resolve_options("pacms_paper", {}) == ("pacms_paper", {})
    pinned = ContextSelector(
        strategy_options={"similarity_threshold": 0.5, "min_gain": 0.0, "relevance_feedback": 0.0}
    )
    assert pinned.resolve_options()[1] == {
        "similarity_threshold": 0.5,
        "min_gain": 0.0,
        "relevance_feedback": 0.0,
    }


def test_dense_embedder_selects_with_its_threshold() -> None:
    table, pool = _related_pool()
    # the dense scale as declared (an undeclared embedder is calibrated on each pool)
    selector = ContextSelector(TableEmbeddings(table), profile=EmbedderProfile())
    chosen = selector.select(pool, "query", budget=20)
    assert set(chosen.kept_ids) == {"A", "B"}
    assert (
        chosen.kept_ids
        == selector.select(
            pool, "query", budget=20, similarity_threshold=DENSE_SIMILARITY_THRESHOLD
        ).kept_ids
    )
    at_lexical_scale = selector.select(pool, "query", budget=20, similarity_threshold=0.6)
    assert set(at_lexical_scale.kept_ids) == {"A", "C"}


async def test_aselect_uses_the_same_threshold() -> None:
    table, pool = _related_pool()
    selector = ContextSelector(TableEmbeddings(table), profile=EmbedderProfile())
    chosen = await selector.aselect(pool, "query", budget=20)
    assert set(chosen.kept_ids) == {"A", "B"}


def test_count_tokens_is_the_count_a_selection_uses() -> None:
    selector = ContextSelector(token_counter=lambda text: len(text.split()))
    pool = ["one two three", Candidate("four five", tokens=9), Candidate("six", id="s")]
    counts = selector.count_tokens(pool)
    assert counts == [3, 9, 1]
    selection = selector.select(pool, "two", budget=("ratio", 1.0))
    assert [selection.tokens[c.id] for c in selection.candidates] == counts
    with pytest.raises(ValueError, match="invalid tokens"):
        selector.count_tokens([Candidate("x", tokens=-1)])


class _BadEmbeddings(Embeddings):
    """Returns one fixed vector for every text (to model a broken backend)."""

    def __init__(self, value: list[float]) -> None:
        self.value = value
        self.cache_identity = f"bad-{value}"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [list(self.value) for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return list(self.value)


@pytest.mark.parametrize(
    "value", [[float("nan"), 1.0], [float("inf"), 0.0], [0.0, 0.0]], ids=["nan", "inf", "zero"]
)
async def test_unscorable_vectors_are_an_embedding_failure(value: list[float]) -> None:
    texts = ["alpha one", "beta two", "gamma three"]
    selector = ContextSelector(_BadEmbeddings(value))
    for sel in (
        selector.select(texts, "alpha", budget=4),
        await selector.aselect(texts, "alpha", budget=4),
    ):
        assert sel.fell_back and sel.strategy == "lastk"
        assert "EmbeddingError" in str(sel.error)
        assert sel.kept_ids == ("1", "2")  # recency within the budget
    with pytest.raises(EmbeddingError):
        ContextSelector(_BadEmbeddings(value), strict=True).select(texts, "alpha", budget=4)
