"""What the hook looks up: placeholders from config and context, items and documents once each."""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.retrievers import BaseRetriever
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore
from typing_extensions import TypedDict

from langchain_pacms.integrations import MemoryOptions, create_pacms_hook

PORT = "The staging database listens on port 6543."
UNITS = "The user prefers metric units."
QUESTION = "what is the staging port, and in which units?"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    llm_input_messages: list[AnyMessage]


def context_text(hook: Any, config: dict[str, Any] | None = None, context: Any = None) -> str:
    """The context message the hook sends for ``QUESTION`` in a graph (empty without one)."""
    graph = StateGraph(State, context_schema=Deps).add_node("select", hook)
    app = graph.add_edge(START, "select").compile()
    out = app.invoke({"messages": [HumanMessage(QUESTION)]}, config, context=context)
    return "\n".join(str(m.content) for m in out["llm_input_messages"] if m.id == "pacms-context")


def user_store() -> InMemoryStore:
    store = InMemoryStore()
    store.put(("memories", "u1"), "port", {"content": PORT})
    store.put(("memories", "None"), "other", {"content": "Someone else's port is 1111."})
    return store


@dataclass
class Deps:
    """A runtime context that carries dependencies, as LangGraph's ``context_schema`` does."""

    user_id: str | None = None
    db: Any = field(default_factory=lambda: sqlite3.connect(":memory:", check_same_thread=False))
    lock: Any = field(default_factory=threading.Lock)


def test_a_dataclass_context_with_dependencies_fills_placeholders() -> None:
    hook = create_pacms_hook(
        400, memory=MemoryOptions([("memories", "{user_id}")], store=user_store())
    )
    assert PORT in context_text(hook, context=Deps(user_id="u1"))  # it was deep-copied: failed
    assert hook.last_selection is not None and not hook.last_selection.fell_back


def test_none_is_no_value_for_a_placeholder() -> None:
    hook = create_pacms_hook(
        400, memory=MemoryOptions([("memories", "{user_id}")], store=user_store())
    )
    # a context field left None does not hide the configured id
    assert PORT in context_text(hook, {"configurable": {"user_id": "u1"}}, context=Deps())
    # nor does a None id read the namespace ("memories", "None")
    assert context_text(hook, {"configurable": {"user_id": None}}) == ""


def test_overlapping_namespaces_send_each_item_once() -> None:
    store = user_store()
    store.put(("memories", "u1", "prefs"), "units", {"content": UNITS})
    spaces = [("memories", "{user_id}"), ("memories", "{user_id}", "prefs"), ("memories", "u1")]
    for strategy in ("topk", "lastk", "pacms"):
        hook = create_pacms_hook(400, strategy=strategy, memory=MemoryOptions(spaces, store=store))
        sent = context_text(hook, {"configurable": {"user_id": "u1"}})
        assert sent.count(PORT) == 1 and sent.count(UNITS) == 1, strategy


def test_a_document_returned_twice_is_one_candidate() -> None:
    class Twice(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            same = Document(PORT, id="d1")
            # the same id with another text is another document
            return [same, same, Document(PORT), Document(PORT), Document(UNITS, id="d1")]

    hook = create_pacms_hook(400, strategy="topk", retriever=Twice())
    sent = context_text(hook)
    assert sent.count(PORT) == 2 and sent.count(UNITS) == 1


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_sync_only_store_serves_the_async_path(tmp_path: Path, use_async: bool) -> None:
    sqlite = pytest.importorskip("langgraph.store.sqlite")
    with sqlite.SqliteStore.from_conn_string(str(tmp_path / "memories.db")) as store:
        store.setup()
        store.put(("memories", "u1"), "port", {"content": PORT})
        hook = create_pacms_hook(400, memory=MemoryOptions([("memories", "u1")], store=store))
        inputs = {"messages": [HumanMessage(QUESTION)]}
        out = await hook.ainvoke(inputs) if use_async else hook.invoke(inputs)
        assert PORT in str(out["llm_input_messages"][0].content)
        assert hook.last_selection is not None and not hook.last_selection.fell_back


@pytest.mark.parametrize("template", ["{user_id", "{user_id!z}", "x{user_id}}"])
def test_a_malformed_namespace_template_fails_when_made(template: str) -> None:
    with pytest.raises(ValueError, match="is not a template"):
        MemoryOptions([("memories", template)])
    MemoryOptions([("memories", "a}b"), ("memories", "{{literal}}", "{user_id}")])  # fine
