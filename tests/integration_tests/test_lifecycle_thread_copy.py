"""A thread copied to a new thread id, with its sidecars, recovers what was folded before.

LangGraph's ``threads.copy`` (or a thread's state written into a new thread) copies the stubs
but not the store, and ``recover_context`` reads only the thread's own namespace. Without
``copy_thread_sidecars`` the copy's old stubs fail as errors (never another thread's payload);
with it the copy recovers every stub byte for byte, its own later folds too, also after the
original thread's sidecars are deleted.
"""

from __future__ import annotations

import json
import re

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from pacms_fakes import RecordingChatModel, call

from langchain_pacms.lifecycle import (
    RECOVER_TOOL_NAME,
    LifecycleMiddleware,
    acopy_thread_sidecars,
    adelete_thread_sidecars,
    copy_thread_sidecars,
    delete_thread_sidecars,
)

STUB = re.compile(r'recover_context\("([^"]+)"\)')
MODULES = {
    f"mod_{i}.py": "\n".join(f"mod_{i} line {k}: value_{i}_{k} = {1000 * i + k}" for k in range(40))
    for i in range(12)
}


@tool
def search(query: str) -> str:
    """Search the code base."""
    return MODULES[query]


def script(messages, index):
    """Reads modules up to the number asked; asked to recover, recovers every stub in view."""
    last = messages[-1]
    if isinstance(last, ToolMessage) and last.name == RECOVER_TOOL_NAME:
        return AIMessage("recovered")
    task = next(m for m in reversed(messages) if isinstance(m, HumanMessage)).text
    if task.startswith("recover"):
        ids = [f.group(1) for m in messages if (f := STUB.search(str(m.content)))]
        calls = [
            call(RECOVER_TOOL_NAME, {"object_id": oid}, f"r{index}-{k}")
            for k, oid in enumerate(ids)
        ]
        return AIMessage("", tool_calls=calls)
    n = sum(1 for m in messages if isinstance(m, ToolMessage) and m.name == "search")
    if n < int(task.split()[1]):  # "read N": until N modules are read
        return AIMessage(
            f"step {n}", tool_calls=[call("search", {"query": f"mod_{n}.py"}, f"c{n}")]
        )
    return AIMessage("read them")


def recoveries(state: dict) -> dict[str, ToolMessage]:
    """The newest recovery of each object id, by id."""
    calls = {
        c["id"]: c["args"]["object_id"]
        for m in state["messages"]
        if isinstance(m, AIMessage)
        for c in m.tool_calls
        if c["name"] == RECOVER_TOOL_NAME
    }
    out = {}
    for m in state["messages"]:
        if isinstance(m, ToolMessage) and m.name == RECOVER_TOOL_NAME:
            out[calls[m.tool_call_id]] = m
    return out


def assert_exact(found: dict[str, ToolMessage]) -> int:
    """Every recovery succeeded and each module read came back exact; how many were reads."""
    reads = 0
    for oid, message in found.items():
        assert message.status == "success", (oid, message.content)
        try:
            span = json.loads(message.content)  # a span's payload: its call and its results
        except ValueError:  # a result alone
            assert message.content in MODULES.values(), oid
            reads += 1
            continue
        if isinstance(span, dict) and span["tool_calls"][0]["name"] == "search":
            assert span["results"] == MODULES[span["tool_calls"][0]["args"]["query"]], oid
            reads += 1
    return reads


def stub_ids(state: dict) -> set[str]:
    return {f.group(1) for m in state["messages"] if (f := STUB.search(str(m.content)))}


def agent_and_store():
    store = InMemoryStore()
    agent = create_agent(
        RecordingChatModel(script=script),
        [search],
        middleware=[LifecycleMiddleware()],  # the agent's store, by default
        checkpointer=InMemorySaver(),
        store=store,
    )
    return agent, store


def test_a_copied_thread_recovers_stubs_folded_before_and_after_the_copy():
    agent, store = agent_and_store()
    a, b, c = ({"configurable": {"thread_id": t}, "recursion_limit": 200} for t in "ABC")
    agent.invoke({"messages": [HumanMessage("read 8")]}, a)
    copied = agent.get_state(a).values
    before = stub_ids(copied)
    agent.update_state(c, copied, as_node="model")  # a copy without its sidecars
    alone = recoveries(agent.invoke({"messages": [HumanMessage("recover all")]}, c))
    assert {oid for oid, m in alone.items() if m.status == "error"} == before
    agent.update_state(b, copied, as_node="model")  # the copy, and its sidecars
    assert copy_thread_sidecars(store, "A", "B") >= len(before)
    agent.invoke({"messages": [HumanMessage("read 12")]}, b)  # more reads: its own folds
    found = recoveries(agent.invoke({"messages": [HumanMessage("recover all")]}, b))
    assert before < set(found)  # stubs folded in A, and in B after the copy
    assert assert_exact(found) >= 10
    assert delete_thread_sidecars(store, "A") > 0  # the copy keeps its own
    assert (
        assert_exact(recoveries(agent.invoke({"messages": [HumanMessage("recover again")]}, b)))
        >= 10
    )


@pytest.mark.asyncio
async def test_a_copied_thread_recovers_async():
    agent, store = agent_and_store()
    a, b = ({"configurable": {"thread_id": t}, "recursion_limit": 200} for t in ("A", "B"))
    await agent.ainvoke({"messages": [HumanMessage("read 8")]}, a)
    copied = (await agent.aget_state(a)).values
    await agent.aupdate_state(b, copied, as_node="model")
    assert await acopy_thread_sidecars(store, "A", "B") >= len(stub_ids(copied))
    await adelete_thread_sidecars(store, "A")
    found = recoveries(await agent.ainvoke({"messages": [HumanMessage("recover all")]}, b))
    assert stub_ids(copied) <= set(found) and assert_exact(found) >= 7
