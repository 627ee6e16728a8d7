"""Token counters, wordless pools, exact copies under ``pacms`` and ``rag``'s ``k``."""

from __future__ import annotations

import logging
import re
import zlib

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import FakeListChatModel

from langchain_pacms import ContextSelector, TokenCounter
from langchain_pacms.core import Problem, solve
from langchain_pacms.integrations import StrategyOptions

FACT = "The staging Postgres database is reached through pgbouncer on port 6543."
QUERY = "How do I reach staging postgres?"


def test_a_counter_may_return_a_numpy_integer() -> None:
    counter = TokenCounter(lambda text: np.int64(len(text.split())))
    assert counter("a b c") == 3 and type(counter("a b c")) is int
    selector = ContextSelector(token_counter=lambda text: np.int64(len(text) // 4 + 1))
    chosen = selector.select(["staging port 6543", "lunch"], "port", budget=10)
    assert chosen.kept_ids == ("0", "1") and type(chosen.tokens["0"]) is int


class NoCounterModel(FakeListChatModel):
    """A chat model without a counter of its own, where LangChain's default one cannot load."""

    def get_token_ids(self, text: str) -> list[int]:
        raise ImportError("Could not import transformers python package.")


def test_a_chat_model_whose_counter_cannot_load_fails_when_the_selector_is_made() -> None:
    with pytest.raises(ImportError, match=r"NoCounterModel.*transformers.*encoding name"):
        ContextSelector(token_counter=NoCounterModel(responses=["x"]))


class ZeroDocuments(Embeddings):
    """A dense model that gives every document an all-zero vector: a real failure."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[0.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


@pytest.mark.parametrize("strict", [False, True])
async def test_a_pool_without_words_is_recency_not_a_failure(
    strict: bool, caplog: pytest.LogCaptureFixture
) -> None:
    pool = ["\N{THUMBS UP SIGN}", "\N{PARTY POPPER}\N{PARTY POPPER}", "---", ""]
    selector = ContextSelector(strict=strict)
    recency = selector.recency(pool, "Which release shipped the fix?", budget=3)
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        for chosen in (
            selector.select(pool, "Which release shipped the fix?", budget=3),
            await selector.aselect(pool, "Which release shipped the fix?", budget=3),
        ):
            assert not chosen.fell_back and chosen.error is None
            assert chosen.info["pool_has_no_words"] is True
            assert "query_has_no_words" not in chosen.info
            assert chosen.kept_ids == recency.kept_ids and chosen.strategy == "lastk"
    assert not caplog.records
    # all-zero vectors from any other embedder are still a failure
    assert ContextSelector(ZeroDocuments()).select(["a", "b"], "q", budget=3).fell_back
    with pytest.raises(ValueError, match="all zero"):
        ContextSelector(ZeroDocuments(), strict=True).select(["a", "b"], "q", budget=3)


class HashedWords(Embeddings):
    """An embedder that declares no profile (so the selector calibrates it)."""

    def _vector(self, text: str) -> list[float]:
        vector = np.zeros(256)
        vector[0] = 0.05
        for word in re.findall(r"\w+", text.lower()):
            vector[1 + zlib.crc32(word.encode()) % 255] += 1.0
        return (vector / np.linalg.norm(vector)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def test_pacms_keeps_one_of_exact_copies_where_coverage_is_meaningless() -> None:
    chosen = ContextSelector(HashedWords()).select([FACT] * 4, QUERY, budget=1000)
    assert chosen.info["coverage"] == "meaningless"
    assert len(chosen.kept_ids) == 1
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.99, 0.14]])
    problem = Problem.build(vectors, [1.0, 0.0], tokens=[1, 1, 1], budget=3)
    pick = solve(problem, "pacms", calibrate=True)
    assert pick.info["coverage"] == "meaningless" and pick.order.tolist() == [0, 2]


def test_pacms_keeps_chunks_without_words_while_the_budget_has_room() -> None:
    # the built-in embedder tells none of them apart (all-zero vectors), so none is taken
    # for a copy of another: distinct ones ("[]", "{}") must not be lost
    pool = ["[]", "{}", "\N{THUMBS UP SIGN}", FACT]
    chosen = ContextSelector().select(pool, QUERY, budget=1000)
    assert chosen.strategy == "pacms" and chosen.kept_ids == ("0", "1", "2", "3")


@pytest.mark.parametrize("k", [True, 2.5, 0])
def test_rag_takes_a_positive_int_k(k: object) -> None:
    with pytest.raises(ValueError, match=r"strategy 'rag' rejects .*an int k >= 1"):
        StrategyOptions("rag", k=k)
    assert StrategyOptions("rag", k=2).options == {"k": 2}


@pytest.mark.parametrize("k", [2.5, True, "3"])
def test_a_selector_refuses_a_rag_k_that_is_no_int_when_made(k: object) -> None:
    # a float k raised a raw "slice indices must be integers" on every selection
    with pytest.raises(ValueError, match="rag needs an int k"):
        ContextSelector(strategy="rag", strategy_options={"k": k})
