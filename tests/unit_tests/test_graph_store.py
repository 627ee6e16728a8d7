"""GraphStore: the running graph's store inside a run, its fallback outside one."""

import asyncio
import sqlite3
from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore
from typing_extensions import TypedDict

from langchain_pacms.lifecycle import GraphStore, SidecarRecord, SidecarStore


class State(TypedDict):
    n: int


def _graph(node: Any, store: Any) -> Any:
    return StateGraph(State).add_node("node", node).add_edge(START, "node").compile(store=store)


def test_outside_a_run_and_in_a_graph_without_a_store_it_is_the_fallback():
    fallback = InMemoryStore()
    sidecars = GraphStore(fallback)
    sidecars.put(("a",), "k", {"v": 1})
    assert fallback.get(("a",), "k").value == {"v": 1}  # type: ignore[union-attr]

    def node(state: State) -> State:
        sidecars.put(("a",), "in-run", {"v": 2})
        return state

    _graph(node, None).invoke({"n": 0})
    assert fallback.get(("a",), "in-run").value == {"v": 2}  # type: ignore[union-attr]
    assert isinstance(GraphStore().fallback, InMemoryStore)
    assert repr(sidecars) == "GraphStore(fallback=InMemoryStore)"


def test_inside_a_graph_with_a_store_every_operation_goes_to_it():
    agents, fallback = InMemoryStore(), InMemoryStore()
    sidecars = GraphStore(fallback)
    record = SidecarRecord.of("function:tool:1", "exact \x00 payload é", "tool")

    def node(state: State) -> State:
        SidecarStore(sidecars, "t1").put(record)
        assert SidecarStore(sidecars, "t1").get("function:tool:1") == record
        return state

    _graph(node, agents).invoke({"n": 0})
    assert SidecarStore(agents, "t1").get("function:tool:1") == record
    assert SidecarStore(fallback, "t1").list_ids() == []


def test_async_nodes_reach_a_sync_only_store_through_a_thread(tmp_path):
    # SidecarStore runs a sync-only store's batch in an executor thread: it still sees the run
    conn = sqlite3.connect(tmp_path / "s.db", check_same_thread=False, isolation_level=None)
    agents = SqliteStore(conn)
    agents.setup()
    sidecars = GraphStore()
    record = SidecarRecord.of("function:tool:2", "payload", "tool")

    async def node(state: State) -> State:
        await SidecarStore(sidecars, "t2").aput(record)
        return state

    asyncio.run(_graph(node, agents).ainvoke({"n": 0}))
    assert SidecarStore(agents, "t2").get("function:tool:2") == record
    assert SidecarStore(sidecars.fallback, "t2").list_ids() == []


def test_a_graph_given_the_graph_store_itself_does_not_loop():
    sidecars = GraphStore()

    def node(state: State) -> State:
        sidecars.put(("a",), "k", {"v": 3})
        return state

    _graph(node, sidecars).invoke({"n": 0})
    assert sidecars.fallback.get(("a",), "k").value == {"v": 3}  # type: ignore[union-attr]


def test_a_fallback_that_is_no_store_is_refused():
    with pytest.raises(TypeError, match="fallback must be a BaseStore, got dict"):
        GraphStore({})  # type: ignore[arg-type]
