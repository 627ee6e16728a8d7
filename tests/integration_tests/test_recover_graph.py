"""recover_context inside a real LangGraph StateGraph: a fold node writes the sidecar to the
graph's store, a fake model calls the tool, the ToolNode returns the exact payload."""

from __future__ import annotations

import json

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore
from pacms_fakes import fold, tool_round

from langchain_pacms.lifecycle import RECOVER_TOOL_NAME, SidecarStore, make_recover_tool

PAYLOAD = json.dumps(
    {
        "path": "/srv/app/config.yaml",
        "token": "tok-\u00e9\U0001f510\x00end",
        "lines": ["x = 1"] * 400,
    },
    ensure_ascii=False,
)


def history():
    return [
        HumanMessage("read the config", id="h1"),
        *tool_round("read_file", {"path": "/srv/app/config.yaml"}, PAYLOAD),
        AIMessage("It is a YAML file.", id="a2"),
        HumanMessage("what is the exact token?", id="h2"),
    ]


def build(store, model):
    def fold_node(state: MessagesState, config: RunnableConfig, runtime: Runtime) -> dict:
        result = fold(state["messages"])
        thread = config["configurable"]["thread_id"]
        SidecarStore(runtime.store, thread).put_many(result.sidecars)  # persist before commit
        return {"messages": list(result.replaced.values())}  # replace by id

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("fold", fold_node)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([make_recover_tool(store)]))
    graph.add_edge(START, "fold")
    graph.add_edge("fold", "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver(), store=store)


def script(object_id="function:tool:1"):
    call = {"name": RECOVER_TOOL_NAME, "args": {"object_id": object_id}, "id": "r1"}
    return FakeMessagesListChatModel(
        responses=[AIMessage("", tool_calls=[call], id="m1"), AIMessage("done", id="m2")]
    )


def test_agent_recovers_the_exact_payload_in_a_graph():
    store = InMemoryStore()
    app = build(store, script())
    out = app.invoke({"messages": history()}, {"configurable": {"thread_id": "thread-A"}})
    messages = out["messages"]
    folded = next(m for m in messages if m.id == "t1")
    assert folded.content.startswith("[folded: ") and PAYLOAD not in folded.content
    recovered = next(m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == "r1")
    assert recovered.content == PAYLOAD and recovered.status == "success"
    assert [m.id for m in messages[:5]] == ["h1", "a1", "t1", "a2", "h2"]
    assert SidecarStore(store, "thread-A").list_ids() == ["function:tool:1"]


async def test_other_thread_sees_no_sidecar_async():
    store = InMemoryStore()
    app = build(store, script("function:tool:2"))
    out = await app.ainvoke({"messages": history()}, {"configurable": {"thread_id": "thread-B"}})
    result = next(m for m in out["messages"] if getattr(m, "tool_call_id", None) == "r1")
    assert result.status == "error"
    # thread B's history holds function:tool:2 whole: nothing of thread A's is read
    assert "'function:tool:2' is not folded in this conversation" in result.content
    assert PAYLOAD not in result.content
    assert out["messages"][-1].content == "done"  # the loop went on
