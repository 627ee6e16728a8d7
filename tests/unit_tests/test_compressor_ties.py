"""Among copies of a document the compressor keeps the one the retriever ranked higher."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document

from langchain_pacms.integrations.compressor import PACMSCompressor

QUERY = "Which port does the staging DB use?"
FACT = "The staging DB listens on port 6543."


def ranked_pool() -> list[Document]:
    return [
        Document(FACT, metadata={"rank": 0, "source": "wiki/db.md"}),
        Document("Lunch was great.", metadata={"rank": 1}),
        Document(FACT, metadata={"rank": 2, "source": "old/db.md"}),
        Document("the staging db  listens on PORT 6543.", metadata={"rank": 3}),
    ]


@pytest.mark.parametrize("strategy", ["pacms", "topk", "rag", "mmr"])
def test_the_higher_ranked_copy_is_kept_with_its_metadata(strategy: str) -> None:
    compressor = PACMSCompressor(budget=14, strategy=strategy)
    kept, selection = compressor.compress_with_selection(ranked_pool(), QUERY)
    facts = [d for d in kept if "6543" in d.page_content]
    assert [d.metadata["rank"] for d in facts] == [0]
    assert facts[0].metadata["source"] == "wiki/db.md"
    assert selection.kept_ids == tuple(str(d.metadata["rank"]) for d in kept)
    assert sorted(selection.pick_order) == sorted(selection.kept_ids)
    assert set(selection.gains) == set(selection.kept_ids)
    assert selection.tokens_kept == sum(selection.tokens[i] for i in selection.kept_ids)
    assert selection.tokens_kept + selection.tokens_dropped == selection.tokens_total
    assert facts[0].metadata["pacms_pick_rank"] == selection.pick_order.index("0")


async def test_async_keeps_the_same_copy() -> None:
    compressor = PACMSCompressor(budget=14)
    kept = await compressor.acompress_documents(ranked_pool(), QUERY)
    assert [d.metadata["rank"] for d in kept if "6543" in d.page_content] == [0]


def test_two_copies_kept_are_the_two_highest_ranked() -> None:
    compressor = PACMSCompressor(budget=20, strategy="topk")
    docs = [Document(FACT, metadata={"rank": r}) for r in range(4)]
    kept = compressor.compress_documents(docs, QUERY)
    assert [d.metadata["rank"] for d in kept] == [0, 1]


def test_a_longer_copy_is_not_swapped_in_past_the_budget() -> None:
    # the higher-ranked copy costs more tokens and the budget has no room for the difference
    docs = [Document(FACT + " " + "!" * 40, metadata={"rank": 0}), Document(FACT)]
    compressor = PACMSCompressor(budget=10, strategy="topk")
    kept, selection = compressor.compress_with_selection(docs, QUERY)
    assert [d.page_content for d in kept] == [FACT]
    assert selection.tokens_kept <= selection.budget


def test_chronological_order_is_left_to_the_strategy() -> None:
    docs = [Document(FACT, metadata={"rank": r}) for r in range(2)]
    compressor = PACMSCompressor(budget=10, strategy="topk", input_order="chronological")
    kept = compressor.compress_documents(docs, QUERY)
    assert [d.metadata["rank"] for d in kept] == [0]  # the older copy, as for messages


WORDS = ["port", "db", "lunch", "deploy", "staging"]


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(
        st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), st.booleans()),
        min_size=1,
        max_size=8,
    ),
    budget=st.integers(min_value=1, max_value=30),
    strategy=st.sampled_from(["pacms", "topk", "mmr"]),
)
def test_no_dropped_copy_outranks_a_kept_one(
    texts: list[tuple[list[str], bool]], budget: int, strategy: str
) -> None:
    docs = [  # copies differ in case and spacing
        Document("  ".join(w).upper() if upper else " ".join(w), metadata={"rank": r})
        for r, (w, upper) in enumerate(texts)
    ]
    compressor = PACMSCompressor(budget=budget, strategy=strategy)
    kept, selection = compressor.compress_with_selection(docs, "staging db port")
    assert selection.tokens_kept <= selection.budget
    kept_ranks = {d.metadata["rank"] for d in kept}

    def words(doc: Document) -> tuple[str, ...]:
        return tuple(doc.page_content.casefold().split())

    for i in kept_ranks:
        for j in range(i):
            same_cost = selection.tokens[str(j)] <= selection.tokens[str(i)]
            if j not in kept_ranks and words(docs[j]) == words(docs[i]):
                assert not same_cost, (i, j, selection.kept_ids)
