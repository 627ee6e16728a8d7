"""Memories from a store without a vector index: the namespace is scanned, the selector ranks."""

from __future__ import annotations

import logging

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import HumanMessage
from langgraph.store.memory import InMemoryStore

from langchain_pacms.integrations import MemoryOptions, create_pacms_hook
from langchain_pacms.integrations.middleware import PACMSMiddleware

FACT = "The staging database of project Heron listens on port 6543."
QUESTION = "Which port does the Heron staging database listen on?"


def filler(i: int) -> str:
    return f"Note {i}: the team lunch on day {i} was at the usual place."


def fill(store: InMemoryStore, n: int = 300, fact_at: int = 150) -> None:
    for i in range(n):
        store.put(("memories", "u1"), f"k{i:04d}", {"content": FACT if i == fact_at else filler(i)})


@pytest.mark.parametrize("use_async", [False, True])
async def test_the_relevant_memory_is_found_far_past_memory_limit(use_async):
    store = InMemoryStore()  # no index: store.search cannot rank by the query
    fill(store)
    hook = create_pacms_hook(
        120, memory=MemoryOptions([("memories", "{user_id}")], store=store, limit=5)
    )
    inputs = {"messages": [HumanMessage(QUESTION)]}
    config = {"configurable": {"user_id": "u1"}}
    out = await hook.ainvoke(inputs, config) if use_async else hook.invoke(inputs, config)
    out = out["llm_input_messages"]
    memories = [c for c in hook.last_selection.candidates if c.kind == "memory"]
    assert len(memories) == 300  # read in pages, all of them, for the selector to rank
    assert FACT in out[0].content  # item #150 reached the model


def test_the_scan_cap_is_announced_when_it_cuts_a_namespace_short(caplog):
    store = InMemoryStore()
    fill(store)
    hook = create_pacms_hook(
        120, memory=MemoryOptions([("memories", "u1")], store=store, scan_limit=100)
    )
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        hook.invoke({"messages": [HumanMessage(QUESTION)]})
    assert "scan_limit=100" in caplog.text and "no vector index" in caplog.text
    memories = [c for c in hook.last_selection.candidates if c.kind == "memory"]
    assert len(memories) == 100
    caplog.clear()
    exact = InMemoryStore()
    fill(exact, n=100, fact_at=50)
    hook = create_pacms_hook(
        120, memory=MemoryOptions([("memories", "u1")], store=exact, scan_limit=100)
    )
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        hook.invoke({"messages": [HumanMessage(QUESTION)]})
    assert "scan_limit" not in caplog.text  # exactly the cap: nothing was cut


def test_a_store_with_a_vector_index_is_asked_for_memory_limit_nearest_items():
    store = InMemoryStore(index={"dims": 16, "embed": DeterministicFakeEmbedding(size=16)})
    fill(store, n=40, fact_at=20)
    mw = PACMSMiddleware(120, memory=MemoryOptions([("memories", "u1")], store=store, limit=5))
    mw.runner.run([HumanMessage(QUESTION)])
    memories = [c for c in mw.last_selection.candidates if c.kind == "memory"]
    assert len(memories) == 5


def test_bad_scan_limit_rejected():
    with pytest.raises(ValueError, match="scan_limit must be a positive int"):
        MemoryOptions([("memories", "u1")], scan_limit=0)
