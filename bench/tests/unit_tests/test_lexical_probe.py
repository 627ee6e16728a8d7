import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_pacms import ContextSelector
from langchain_pacms.embeddings import HashedTfidfEmbeddings
from pacms_bench.cli import main
from pacms_bench.lexical_probe import (
    RECIPES,
    LexicalRecipe,
    lexical_relevance,
    probe_topk,
    topk_recall,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lme_mini"
WORDS = ["port", "staging", "postgres", "cat", "dog", "6543", "deploy", "role", "admin", "the"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), min_size=1, max_size=12),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
)
def test_recipes_equal_the_selectors_relevance(docs: list[list[str]], q: list[str]) -> None:
    texts = [" ".join(d) for d in docs]
    query = " ".join(q)
    sparse = ContextSelector().prepare(texts, query, budget=("ratio", 1.0)).relevance
    assert np.allclose(lexical_relevance(texts, query, RECIPES["2^18 buckets"]), sparse, atol=1e-6)
    dense = ContextSelector(HashedTfidfEmbeddings(relevance_buckets=None))
    four_k = dense.prepare(texts, query, budget=("ratio", 1.0)).relevance
    assert np.allclose(lexical_relevance(texts, query, RECIPES["builtin-4096"]), four_k, atol=1e-5)


def _colliding_words() -> tuple[str, str]:
    """Two words in one signed bucket of 4,096 (same sign) and in two buckets of 2^18."""
    seen: dict[int, str] = {}
    for i in range(100_000):
        word = f"w{i}x"
        h = zlib.crc32(word.encode())
        key = (h & 4095) | (h & 0x80000000)
        if key in seen and (zlib.crc32(seen[key].encode()) ^ h) & ((1 << 18) - 1):
            return seen[key], word
        seen[key] = word
    raise AssertionError("no collision found")


def test_the_selector_ranks_by_sparse_rows_where_dense_buckets_collide() -> None:
    a, b = _colliding_words()
    texts = [f"{a} report", f"{b} report", "unrelated filler words", "more filler text"]
    dense = ContextSelector(HashedTfidfEmbeddings(relevance_buckets=None))
    four_k = dense.prepare(texts, a, budget=("ratio", 1.0)).relevance
    assert four_k[1] > 0.3  # the other word looks like the query in the shared bucket
    sparse = ContextSelector().prepare(texts, a, budget=("ratio", 1.0)).relevance
    assert sparse[0] > 0.3 and sparse[1] == 0.0
    selector = ContextSelector()
    room = max(selector.count_tokens(texts[:2]))
    for strategy in ("topk", "pacms", "mmr"):
        picked = selector.select(texts, a, budget=room, strategy=strategy)
        assert picked.kept_ids == ("0",), strategy


def test_more_buckets_separate_a_colliding_feature() -> None:
    # two distinct words in one bucket of a 2-bucket table look alike; 2^18 buckets tell them apart
    texts = ["alpha", "omega"]
    tiny = lexical_relevance(texts, "alpha", LexicalRecipe(buckets=2, signed=False))
    wide = lexical_relevance(texts, "alpha", LexicalRecipe(signed=False))
    assert tiny[1] > 0.0
    assert wide.tolist() == [1.0, 0.0]


def test_empty_query_and_texts_score_zero() -> None:
    assert lexical_relevance(["a b", ""], "!!", RECIPES["reference"]).tolist() == [0.0, 0.0]
    assert lexical_relevance([], "x", RECIPES["reference"]).shape == (0,)


def test_bad_recipe_is_refused() -> None:
    with pytest.raises(ValueError, match="power of two"):
        LexicalRecipe(buckets=1000)
    with pytest.raises(ValueError, match="idf_scope"):
        LexicalRecipe(idf_scope="pool")  # type: ignore[arg-type]


def test_topk_recall_walks_by_relevance_then_position() -> None:
    rel = np.array([0.5, 0.5, 0.9])
    assert topk_recall(rel, [4, 4, 4], 8, {0}) == 1.0  # the tie goes to the earlier item
    assert topk_recall(rel, [4, 4, 4], 8, {1}) == 0.0
    assert topk_recall(rel, [4, 9, 4], 8, {0, 1}) == 0.5  # a misfit is skipped, not a stop


def test_probe_table_has_every_recipe_and_budget() -> None:
    pools = [(["red apple", "green pear", "blue sky"], "red", [3, 3, 3], {0})]
    table = probe_topk(pools, [0.4, 1.0], RECIPES, builtin=lambda t, q: np.array([0.0, 1.0, 0.5]))
    assert list(table) == ["selector", *RECIPES]
    assert table["selector"] == [0.0, 1.0]  # the builtin ranks the evidence last
    assert all(row == [1.0, 1.0] for name, row in table.items() if name != "selector")


def test_cli_probe_writes_its_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "longmemeval",
            "probe",
            "--data",
            str(FIXTURES),
            "--all",
            "--budgets",
            "1.0",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "lexical-probe.json").read_text())
    assert report["meta"]["questions"] == 2
    assert all(row == [1.0] for row in report["recall"].values())  # the whole pool fits
    assert "| reference | 1.000 |" in (tmp_path / "lexical-probe.md").read_text()
    assert "top-k evidence recall" in capsys.readouterr().out
