"""The compressor's copies are texts alike up to case and spacing; a fraction budget is refused."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_pacms import Budget, ContextSelector
from langchain_pacms.integrations.compressor import PACMSCompressor


class CharTrigrams(Embeddings):
    """Hashed character trigrams: an embedder that sees symbols, as neural ones do."""

    def _vector(self, text: str) -> list[float]:
        padded = f"  {text.lower()}  "
        vector = np.zeros(512)
        for i in range(len(padded) - 2):
            vector[zlib.crc32(padded[i : i + 3].encode()) % 512] += 1.0
        return (vector / np.linalg.norm(vector)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


@pytest.mark.parametrize("strategy", ["pacms", "topk", "rag", "mmr"])
def test_texts_that_differ_in_symbols_are_not_copies(strategy: str) -> None:
    docs = [
        Document("The plugin SDK is written in C#.", metadata={"rank": 0}),
        Document("The plugin SDK is written in C++.", metadata={"rank": 1}),
    ]
    query = "Which plugin SDK is written in C++?"
    selector = ContextSelector(CharTrigrams())
    chosen = selector.select([d.page_content for d in docs], query, budget=10, strategy=strategy)
    assert chosen.kept_ids == ("1",)  # the strategy keeps the C++ document ...
    kept, selection = PACMSCompressor(
        10, selector=selector, strategy=strategy
    ).compress_with_selection(docs, query)
    # ... and the compressor returns it, with its own gain and pick rank
    assert [d.metadata["rank"] for d in kept] == [1]
    assert selection.kept_ids == ("1",) and set(selection.gains) == {"1"}
    assert kept[0].metadata["pacms_pick_rank"] == 0


@pytest.mark.parametrize("budget", [("fraction", 0.5), Budget(fraction=0.5)])
def test_a_fraction_budget_is_refused_when_the_compressor_is_made(budget: object) -> None:
    with pytest.raises(ValueError, match="needs a budget in tokens or a ratio"):
        PACMSCompressor(budget)  # type: ignore[arg-type]
