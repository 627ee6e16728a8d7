"""Fault injection for the lifecycle's promise: nothing lost, nothing crossed.

Forked threads (a real checkpointer, time travel), runs without a thread id, every action
sequence over one shared store (hypothesis), and a recovery tool whose store fails (flaky
calls, a locked SQLite file, hostile ids, PostgreSQL connections killed under a running store).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from pacms_fakes import slow_examples, span_messages, tool_round

from langchain_pacms.lifecycle import (
    Action,
    LifecycleHarness,
    Plan,
    SidecarRecord,
    SidecarStore,
    create_lifecycle_node,
    make_recover_tool,
)
from langchain_pacms.lifecycle.objects import index_messages
from langchain_pacms.lifecycle.sidecar import SidecarAmbiguousError, SidecarError
from langchain_pacms.messages import payload_of, run_thread

POSTGRES_URI = os.environ.get("PACMS_TEST_POSTGRES_URI")


class FoldEverything:
    """Folds every tool object that is not the newest."""

    name = "fold-everything"

    def plan(self, index, messages) -> Plan:
        return Plan(
            "fold",
            tuple(
                Action("fold", o.id, "old")
                for o in index.objects
                if o.kind == "tool" and o.state == "active" and not o.latest
            ),
        )

    async def aplan(self, index, messages) -> Plan:
        return self.plan(index, messages)


class Scripted:
    """Proposes the next action of a script at each step."""

    name = "scripted"

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)

    def plan(self, index, messages) -> Plan:
        return Plan("script", (self.actions.pop(0),)) if self.actions else Plan("nothing")

    async def aplan(self, index, messages) -> Plan:
        return self.plan(index, messages)


def span(n: int, output: str, tag: str = "") -> list[BaseMessage]:
    return tool_round("read_file", {"path": f"src/m{n}.py"}, output, f"{n}{tag}")


def body(label: str, n: int) -> str:
    return "\n".join(f"{label} line {i}: value_{label}_{n}_{i} = {i * n}" for i in range(60))


def recover(tool: Any, messages: list[BaseMessage], object_id: str, config: Any) -> ToolMessage:
    """Call the tool through LangGraph's ToolNode, which injects the graph state."""
    call = {"name": "recover_context", "args": {"object_id": object_id}, "id": "r1"}
    asked = [*messages, AIMessage("", tool_calls=[call], id="ask")]
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([tool]))
    graph.add_edge(START, "tools")
    out = graph.compile().invoke({"messages": asked}, config)
    message = out["messages"][-1]
    assert isinstance(message, ToolMessage) and message.tool_call_id == "r1"
    return message


def lifecycle_graph(store: BaseStore, checkpointer: Any = None) -> Any:
    class State(MessagesState):
        pacms_lifecycle_ids: dict[str, str]

    graph = StateGraph(State)
    graph.add_node(
        "lifecycle",
        create_lifecycle_node(store=store, planner=FoldEverything()),
    )
    graph.add_edge(START, "lifecycle")
    return graph.compile(checkpointer=checkpointer)


# -- forks -----------------------------------------------------------------------------------


def test_a_forked_thread_keeps_both_branches_payloads_apart():
    store, saver = InMemoryStore(), InMemorySaver()
    app = lifecycle_graph(store, saver)
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"messages": [HumanMessage("review the modules", id="h0")]}, config)
    fork_point = app.get_state(config).config
    tail_a = [*span(1, body("A", 1)), *span(2, body("A", 2)), HumanMessage("next", id="hA")]
    tail_b = [*span(1, body("B", 1), "b"), *span(2, body("B", 2), "b")]
    tail_b.append(HumanMessage("other", id="hB"))
    branch_a = app.invoke({"messages": tail_a}, config)["messages"]
    branch_b = app.invoke({"messages": tail_b}, fork_point)["messages"]  # time travel: a fork
    tool = make_recover_tool(store)
    for branch, label in ((branch_a, "A"), (branch_b, "B")):
        folded = [o for o in index_messages(branch).objects if o.state == "folded"]
        assert [o.id for o in folded] == ["function:tool:1", "function:tool:2"]
        for n in (1, 2):
            result = recover(tool, branch, f"function:tool:{n}", config)
            assert result.status == "success" and result.content == body(label, n)
    # without the state nothing says which branch: an error, never a guess
    plain = make_recover_tool(store).invoke({"object_id": "function:tool:1"}, config)
    assert "2 different payloads" in plain and "value_" not in plain
    with pytest.raises(SidecarAmbiguousError):
        SidecarStore(store, "t").get("function:tool:1")
    # restore brings each branch its own original back
    harness = app.get_graph().nodes["lifecycle"].data.harness
    for branch, label in ((branch_a, "A"), (branch_b, "B")):
        restored = harness.reactivate(branch, "function:tool:1", thread_id="t")
        assert [m.content for m in restored if isinstance(m, ToolMessage)] == [body(label, 1)]


async def test_a_stub_whose_payload_was_replaced_is_reported_not_returned():
    store = InMemoryStore()
    history = [HumanMessage("go", id="h"), *span(1, body("A", 1)), *span(2, "x"), HumanMessage("n")]
    harness = LifecycleHarness(FoldEverything(), store=store)
    commit = harness.step(history, thread_id="t")
    assert commit is not None
    (record,) = commit.sidecars
    forged = SidecarRecord.of(record.object_id, "forged", record.kind)
    # a different payload under the stub's own key, as a faulty writer could leave it
    namespace = SidecarStore(store, "t").namespace
    store.put(namespace, f"{record.object_id}@{record.sha256[:16]}", _encoded(forged), index=False)
    result = recover(make_recover_tool(store), commit.messages, "function:tool:1", _cfg("t"))
    assert result.status == "error" and "forged" not in result.content
    assert "sha256" in result.content


def _encoded(record: SidecarRecord) -> dict[str, Any]:
    scratch = InMemoryStore()
    sidecars = SidecarStore(scratch, "scratch")
    sidecars.put(record)
    (item,) = scratch.search(sidecars.namespace)
    return dict(item.value)


def _cfg(thread: str | None) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}} if thread is not None else {}


# -- runs without a thread id ----------------------------------------------------------------


def test_runs_without_a_thread_id_never_share_payloads():
    store = InMemoryStore()
    app = lifecycle_graph(store)  # no checkpointer, no thread id
    alice = [HumanMessage("alice's task"), *span(1, body("alice", 1)), *span(2, "y")]
    bob = [HumanMessage("bob's task"), *span(1, body("bob", 1)), *span(2, "z")]
    out_a = app.invoke({"messages": [*alice, HumanMessage("more")]})["messages"]
    out_b = app.invoke({"messages": [*bob, HumanMessage("more")]})["messages"]
    assert run_thread(out_a) != run_thread(out_b)
    tool = make_recover_tool(store)
    assert recover(tool, out_a, "function:tool:1", {}).content == body("alice", 1)
    assert recover(tool, out_b, "function:tool:1", {}).content == body("bob", 1)
    # each run's own namespace holds its own payload only
    assert SidecarStore(store, run_thread(out_a)).get("function:tool:1").payload == body("alice", 1)


def test_a_thread_id_with_dots_and_unicode_commits():
    store = InMemoryStore()
    harness = LifecycleHarness(FoldEverything(), store=store)
    history = [HumanMessage("go", id="h"), *span(1, body("A", 1)), *span(2, "x"), HumanMessage("n")]
    for thread in ("alice@example.com", "ü.ñ\x00", "~x", "a/b c"):
        commit = harness.step(history, thread_id=thread)
        assert commit is not None, thread
        assert harness.sidecars(thread).get("function:tool:1").payload == body("A", 1)
        back = recover(make_recover_tool(store), commit.messages, "function:tool:1", _cfg(thread))
        assert back.status == "success" and back.content == body("A", 1), thread
    assert harness.stats.commit_failures == 0


# -- every action sequence over one shared store ---------------------------------------------

ACTIONS = st.lists(
    st.tuples(st.sampled_from(["fold", "mask", "prune", "restore"]), st.integers(1, 4)),
    min_size=1,
    max_size=8,
)


@slow_examples(60)
@given(
    script_a=ACTIONS,
    script_b=ACTIONS,
    thread=st.sampled_from(["t-1", "alice@example.com", None]),
    seed=st.integers(0, 3),
)
def test_no_payload_is_lost_or_crossed(script_a, script_b, thread, seed):
    store = InMemoryStore()  # shared by both branches of one thread (a fork), or two runs
    prefix = [HumanMessage("task", id="h0")]
    branches = {}
    for label, script in (("A", script_a), ("B", script_b)):
        tag = label.lower()
        history: list[BaseMessage] = list(prefix)
        for n in range(1, 5):
            history += span(n, body(f"{label}{seed}", n), tag)
        history.append(HumanMessage("now", id=f"h{tag}"))
        originals = {
            o.id: payload_of(history, o.indices)
            for o in index_messages(history).objects
            if o.kind == "tool"
        }
        branches[label] = _play(store, history, script, thread, originals)
    for label, (history, known, originals) in branches.items():
        _check_nothing_lost(store, history, known, originals, thread, label)


def _play(store, history, script, thread, originals):
    known: dict[str, str] = {}
    for op, n in script:
        target = f"function:tool:{n}"
        harness = LifecycleHarness(
            Scripted([Action(op, target, "test")] if op != "restore" else []),
            store=store,
        )
        if op == "restore":
            try:
                restored = harness.reactivate(history, target, thread_id=thread, known_ids=known)
            except (LookupError, ValueError):
                continue  # not folded (any more)
            by_id = {m.id: m for m in restored}
            history = [by_id.get(m.id, m) for m in history]
            continue
        commit = harness.step(history, thread_id=thread, known_ids=known)
        if commit is not None:
            history, known = list(commit.messages), dict(commit.known_ids)
    return history, known, originals


def _check_nothing_lost(store, history, known, originals, thread, label):
    index = index_messages(history, known_ids=known)
    name = thread if thread is not None else run_thread(history)
    sidecars = SidecarStore(store, name)
    audit = SidecarStore(store, name, namespace="pacms_audit")
    audited = [
        m.content
        for item in store.search(audit.namespace, limit=1000)
        for m in span_messages(_decoded(audit, item))
        if isinstance(m, ToolMessage)
    ]
    tool = make_recover_tool(store)
    for object_id, payload in originals.items():
        obj = index.by_id.get(object_id)
        if obj is not None and obj.state == "active":
            assert payload_of(history, obj.indices) == payload
            continue
        if obj is not None and obj.state == "folded":
            result = recover(tool, history, object_id, _cfg(thread))
            assert result.status == "success", result.content
            assert result.content == payload, (label, object_id)  # never the other branch's
            continue
        # masked or pruned: the original is in the audit, or (folded first) in the sidecars
        sha = SidecarRecord.of(object_id, payload, "tool").sha256
        try:
            kept = sidecars.get(object_id, sha).payload == payload
        except SidecarError:
            kept = False
        assert kept or payload in audited, (label, object_id, obj and obj.state)


def _decoded(sidecars: SidecarStore, item: Any) -> str:
    return sidecars.get(item.key).payload


# -- the recovery tool when the store fails ----------------------------------------------------


class FlakyStore(InMemoryStore):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error: BaseException | None = error

    def batch(self, ops):
        if self.error is not None:
            raise self.error
        return super().batch(ops)

    async def abatch(self, ops):
        if self.error is not None:
            raise self.error
        return await super().abatch(ops)


ERRORS = [
    sqlite3.OperationalError("database is locked"),
    ConnectionResetError("server closed the connection unexpectedly"),
    RuntimeError("pool exhausted"),
    UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
async def test_store_failures_are_error_results_never_raised(error):
    store = FlakyStore(error)
    tool = make_recover_tool(store, thread_id="t")
    for result in (
        tool.invoke({"object_id": "function:tool:1"}),
        await tool.ainvoke({"object_id": "function:tool:1"}),
    ):
        assert result.startswith("recover_context failed: the sidecar store could not be read")
    store.error = None  # the store is back: the tool works again
    SidecarStore(store, "t").put(SidecarRecord.of("function:tool:1", "back", "tool"))
    assert tool.invoke({"object_id": "function:tool:1"}) == "back"


@pytest.mark.parametrize("object_id", ["\x00", "a\ud800b", "x" * 5000, "../../etc", "", "@", "a@"])
def test_hostile_ids_are_error_results_on_sqlite(tmp_path, object_id):
    from langgraph.store.sqlite import SqliteStore

    with SqliteStore.from_conn_string(str(tmp_path / "s.db")) as store:
        store.setup()
        SidecarStore(store, "t").put(SidecarRecord.of("function:tool:1", "p", "tool"))
        tool = make_recover_tool(store, thread_id="t")
        out = tool.invoke({"object_id": object_id})
        assert out.startswith("recover_context failed"), out


def test_a_locked_sqlite_file_is_an_error_result(tmp_path):
    from langgraph.store.sqlite import SqliteStore

    path = tmp_path / "s.db"
    conn = sqlite3.connect(path, timeout=0.05, check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    SidecarStore(store, "t").put(SidecarRecord.of("function:tool:1", "p", "tool"))
    tool = make_recover_tool(store, thread_id="t")
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        out = tool.invoke({"object_id": "function:tool:1"})
        assert out.startswith("recover_context failed: the sidecar store could not be read")
        assert "locked" in out
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert tool.invoke({"object_id": "function:tool:1"}) == "p"
    conn.close()


@pytest.mark.skipif(POSTGRES_URI is None, reason="PACMS_TEST_POSTGRES_URI is not set")
def test_postgres_connections_killed_under_a_pooled_store():
    import psycopg
    from langgraph.store.postgres import PostgresStore

    assert POSTGRES_URI is not None
    with PostgresStore.from_conn_string(
        POSTGRES_URI, pool_config={"min_size": 1, "max_size": 2}
    ) as store:
        store.setup()
        thread = f"kill-{os.getpid()}"
        SidecarStore(store, thread).put(SidecarRecord.of("function:tool:1", "payload", "tool"))
        tool = make_recover_tool(store, thread_id=thread)
        assert tool.invoke({"object_id": "function:tool:1"}) == "payload"
        with psycopg.connect(POSTGRES_URI, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database()"
            )
        outcomes = [tool.invoke({"object_id": "function:tool:1"}) for _ in range(3)]
        # a call may fail while the pool finds its connection dead; it never raises, and the
        # pool reconnects
        assert all(o == "payload" or o.startswith("recover_context failed") for o in outcomes)
        assert outcomes[-1] == "payload"
