"""Copies and pickles of the selection's parts work and select as the original does."""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage

from langchain_pacms import ContextSelector, PACMSCompressor
from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.integrations import PACMSMiddleware, create_pacms_hook
from langchain_pacms.tokens import TokenCounter

COPIES: dict[str, Callable[[Any], Any]] = {
    "deepcopy": copy.deepcopy,
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
}
DOCS = [
    Document(f"note {i}: {word} {i * 7}") for i, word in enumerate(["red", "blue", "red", "green"])
]


@pytest.mark.parametrize("how", COPIES)
def test_a_used_compressor_and_selector_copy_and_select_alike(how: str) -> None:
    compressor = PACMSCompressor(budget=12)
    before = compressor.compress_documents(DOCS, "red")
    copied = COPIES[how](compressor)
    assert copied.compress_documents(DOCS, "red") == before
    selector = ContextSelector()
    selection = selector.select([d.page_content for d in DOCS], "red", budget=9)
    again = COPIES[how](selector).select([d.page_content for d in DOCS], "red", budget=9)
    assert again.kept_ids == selection.kept_ids and again.relevance == selection.relevance


@pytest.mark.parametrize("how", COPIES)
def test_a_selection_copies_whole_with_read_only_maps(how: str) -> None:
    selection = ContextSelector().select(["blue plums", "red apples"], "red", budget=3)
    copied = COPIES[how](selection)
    assert copied == selection
    assert isinstance(copied.relevance, MappingProxyType) and isinstance(copied.info, Mapping)
    with pytest.raises(TypeError):
        copied.relevance["1"] = 0.0  # type: ignore[index]


@pytest.mark.parametrize("how", COPIES)
def test_a_cache_copy_has_locks_of_its_own_and_no_vectors(how: str) -> None:
    cached = CachedEmbeddings(HashedTfidfEmbeddings(dim=32))
    cached.embed_matrix(["a b", "c d"])
    copied = COPIES[how](cached)
    assert copied._lock is not cached._lock and not copied._lock.locked()
    with cached._lock:  # the original's lock held: the copy still embeds
        done = threading.Event()
        threading.Thread(target=lambda: (copied.embed_matrix(["a b"]), done.set())).start()
        assert done.wait(10)
    assert copied.misses == cached.misses + 1  # embedded again: no vectors came with it


@pytest.mark.parametrize("how", COPIES)
def test_a_token_counter_copies_by_its_encoding(how: str) -> None:
    counter = TokenCounter("cl100k_base")
    assert COPIES[how](counter).count_many(["a b", "c"]) == [2, 1]
    assert len(pickle.dumps(counter)) < 10_000  # the encoding's name, not its ranks


def test_the_integrations_copy_after_use() -> None:
    messages = [
        HumanMessage("red " * 9, id="1"),
        AIMessage("blue " * 9, id="2"),
        HumanMessage("red?", id="3"),
    ]
    hook = create_pacms_hook(14)
    sent = hook.invoke({"messages": messages})
    assert copy.deepcopy(hook).invoke({"messages": messages}) == sent
    middleware = PACMSMiddleware(14)
    for how in COPIES.values():
        assert how(middleware).runner.run(messages) == middleware.runner.run(messages)


@pytest.mark.parametrize("how", COPIES)
def test_a_lifecycle_harness_copy_reads_the_stores_of_the_original(how: str) -> None:
    from langgraph.store.memory import InMemoryStore

    from langchain_pacms.lifecycle import GraphStore, LifecycleHarness

    harness = LifecycleHarness()  # sidecars in the process's store, shared by every agent
    key = f"copy-{how}"
    harness.store.put(("pacms-test",), key, {"v": 1})
    assert COPIES[how](harness).store.get(("pacms-test",), key).value == {"v": 1}
    own = InMemoryStore()
    routed = copy.deepcopy(GraphStore(own))
    routed.put(("pacms-test",), key, {"v": 2})  # a copy sends to the same fallback
    assert own.get(("pacms-test",), key).value == {"v": 2}
