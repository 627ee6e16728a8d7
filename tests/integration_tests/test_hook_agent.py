"""The LangGraph pre-model hook in real graphs: create_react_agent and a hand-built StateGraph."""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import Embeddings
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore
from pacms_fakes import (
    BIG,
    FACT,
    SECRET,
    EventCollector,
    RecordingChatModel,
    answer_from_context,
    assert_pacms_keeps_the_early_fact_lastk_loses_it,
    assert_provider_valid,
    call,
    create_react_agent,
    long_conversation,
    search,
    tool_calling_script,
)
from typing_extensions import TypedDict

from langchain_pacms import (
    Budget,
    ContextSelector,
    MemoryOptions,
    Pacms,
    SelectionConfig,
    StrategyOptions,
    ToolLoopOptions,
)
from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.messages import CONTEXT_MEMORIES_HEADER

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def texts(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages]


# -- create_react_agent ------------------------------------------------------------------------
def test_react_agent_model_receives_selected_messages_and_state_is_untouched(tmp_path):
    model = RecordingChatModel(script=tool_calling_script("search", "invoices"))
    log = tmp_path / "selections.jsonl"
    hook = create_pacms_hook(2500, log=log)
    agent = create_react_agent(model, [search], pre_model_hook=hook)
    history = long_conversation(30, fact=FACT)
    question = HumanMessage("Search the archive for invoices.")
    result = agent.invoke({"messages": [*history, question]})

    # two model calls: tool call, then answer after the (huge) tool result
    assert len(model.received) == 2
    full = result["messages"]
    assert full[: len(history) + 1] == [*history, question]  # transcript kept whole in state
    assert len(full) == len(history) + 4
    for received in model.received:
        assert_provider_valid(received)
        assert question in received
        assert len(received) < len(history)
    # second call: the fresh tool call + its big result are the current turn, hence mandatory
    second = model.received[1]
    assert isinstance(second[-1], ToolMessage) and BIG in second[-1].content
    assert second[-2].tool_calls[0]["name"] == "search"

    # the model received exactly what the hook selected, one JSONL record per model call
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2
    # the query is the task, then (inside the tool loop) the task plus the agent's latest call
    assert records[0]["query"] == question.content
    assert records[1]["query"] == f'{question.content}\nsearch {{"query": "invoices"}}'
    for rec in records:
        assert rec["strategy"] == "pacms"
        assert "timestamp" in rec and rec["kept"] + rec["dropped"] == len(rec["candidates"])
        kept = [c for c in rec["candidates"] if c["kept"]]
        assert {"relevance", "gain", "pick_rank", "tokens"} <= set(kept[0])
        assert rec["tokens_kept"] <= rec["budget"] or rec["over_budget"]
    assert records[0]["tokens_kept"] <= 2500


def test_200_turns_early_fact_pacms_keeps_it_lastk_loses_it():
    hooks = []

    def agent_for(strategy: str, model: RecordingChatModel) -> Any:
        hooks.append(create_pacms_hook(budget=600, strategy=strategy))
        return create_react_agent(model, [search], pre_model_hook=hooks[-1])

    assert_pacms_keeps_the_early_fact_lastk_loses_it(agent_for)
    assert len(hooks) == 2 and all(h.last_selection.tokens_kept <= 600 for h in hooks)


async def test_react_agent_async_path(tmp_path):
    model = RecordingChatModel(script=tool_calling_script("search", "x"))
    log = tmp_path / "a.jsonl"
    hook = create_pacms_hook(2500, log=log)
    agent = create_react_agent(model, [search], pre_model_hook=hook)
    history = long_conversation(40, fact=FACT)
    collector = EventCollector()
    result = await agent.ainvoke(
        {"messages": [*history, HumanMessage("search x")]}, {"callbacks": [collector]}
    )
    assert len(model.received) == 2
    for received in model.received:
        assert_provider_valid(received)
    assert len(result["messages"]) == len(history) + 4
    assert len(log.read_text().splitlines()) == 2
    events = collector.selections
    assert len(events) == 2 and all(e["source"] == "hook" for e in events)


def test_custom_events_and_debug_log(caplog):
    model = RecordingChatModel(script=[AIMessage("ok")])
    hook = create_pacms_hook(budget=300)
    agent = create_react_agent(model, [search], pre_model_hook=hook)
    collector = EventCollector()
    with caplog.at_level(logging.DEBUG, logger="langchain_pacms.messages.report"):
        agent.invoke(
            {"messages": [*long_conversation(20, fact=FACT), HumanMessage("hi")]},
            {"callbacks": [collector]},
        )
    (event,) = collector.selections
    assert event["kept"] > 0 and event["dropped"] > 0
    assert event["tokens_kept"] <= event["budget"] == 300
    assert event["strategy"] == "pacms" and event["fell_back"] is False
    assert set(event["kept_by_kind"]) <= {"turn", "tool"}
    assert any("pacms hook: pacms kept" in r.getMessage() for r in caplog.records)


async def test_astream_events_carry_the_selection():
    model = RecordingChatModel(script=[AIMessage("ok")])
    agent = create_react_agent(model, [search], pre_model_hook=create_pacms_hook(budget=200))
    names = [
        ev["name"]
        async for ev in agent.astream_events({"messages": [HumanMessage("hi")]}, version="v2")
        if ev["event"] == "on_custom_event"
    ]
    assert names == ["pacms_selection"]


# -- memories from a LangGraph store ------------------------------------------------------------
MEMORIES = {
    "m1": "The user's dog is called Biscuit.",
    "m2": "The user prefers answers in metric units.",
    "m3": "The user's staging database listens on port 6543.",
    "m4": "The user is allergic to peanuts.",
    "m5": "The user's favourite colour is teal.",
}


def memory_store() -> InMemoryStore:
    store = InMemoryStore()
    for key, value in MEMORIES.items():
        store.put(("memories", "u1"), key, {"content": value})
    store.put(("memories", "u2"), "other", {"content": "Another user's staging port is 1111."})
    return store


def context_messages(received: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in received if str(m.content).startswith(CONTEXT_MEMORIES_HEADER)]


@pytest.mark.parametrize("explicit_store", [False, True])
def test_store_memories_pooled_and_delivered_as_one_message(explicit_store):
    store = memory_store()
    model = RecordingChatModel(script=[AIMessage("6543")])
    hook = create_pacms_hook(
        32,
        strategy="topk",  # the context header is charged too
        memory=MemoryOptions([("memories", "{user_id}")], store=store if explicit_store else None),
    )
    agent = create_react_agent(
        model, [search], pre_model_hook=hook, store=None if explicit_store else store
    )
    messages = [
        SystemMessage("You are a helpful assistant."),
        HumanMessage("I went hiking yesterday, it was lovely " * 5),
        AIMessage("Sounds great!"),
        HumanMessage("Which port does my staging database listen on?"),
    ]
    agent.invoke({"messages": messages}, {"configurable": {"user_id": "u1"}})
    (received,) = model.received
    (context,) = context_messages(received)
    assert received[0].content == "You are a helpful assistant."
    assert received[1] is not None and received[1] == context  # right after the system prompt
    assert isinstance(context, SystemMessage)
    assert "- The user's staging database listens on port 6543." in context.content
    selection = hook.last_selection
    kept_memories = [c.text for c in selection.kept if c.kind == "memory"]
    dropped_memories = [
        c.text
        for c in selection.candidates
        if c.kind == "memory" and c.id not in selection.kept_ids
    ]
    assert dropped_memories, "the budget should leave some memories out"
    for text in kept_memories:
        assert text in context.content
    for text in dropped_memories:
        assert text not in context.content
    assert "Another user's" not in context.content  # namespace filled from the config
    assert len([c for c in selection.candidates if c.kind == "memory"]) == len(MEMORIES)


def test_budget_ratio_is_a_fraction_of_the_conversation_not_of_memories():
    conversation = [HumanMessage("Which port does my staging database listen on?")]
    budgets = []
    for extra in (0, 40):
        store = memory_store()
        for i in range(extra):
            store.put(("memories", "u1"), f"x{i}", {"content": f"Unrelated note {i} " * 10})
        hook = create_pacms_hook(
            ("ratio", 0.5), memory=MemoryOptions([("memories", "u1")], store=store, limit=100)
        )
        hook.invoke({"messages": conversation})
        selection = hook.last_selection
        counter = ContextSelector().token_counter
        asked = sum(counter(c.text) for c in selection.candidates if c.kind == "turn")
        assert selection.budget == max(1, asked // 2)
        budgets.append(selection.budget)
    assert budgets[0] == budgets[1]  # 40 more memories do not raise the budget


def test_output_key_messages_replaces_the_stored_history():
    store = memory_store()
    received: dict[str, list[list[BaseMessage]]] = {}
    states = {}
    for key in ("llm_input_messages", "messages"):
        model = RecordingChatModel(script=[AIMessage(f"answer {i}") for i in range(3)])
        memory = MemoryOptions([("memories", "u1")], store=store)
        hook = create_pacms_hook(config=SelectionConfig(budget=60, memory=memory, output_key=key))
        agent = create_react_agent(
            model, [search], pre_model_hook=hook, checkpointer=InMemorySaver()
        )
        config = {"configurable": {"thread_id": key}}
        for question in (
            "I went hiking yesterday, it was lovely " * 8,
            "Is my dog allergic to anything?",
            "Which port does my staging database listen on?",
        ):
            state = agent.invoke({"messages": [HumanMessage(question)]}, config)
        received[key], states[key] = model.received, state["messages"]

    # The model saw the same conversation either way. (Which memories fill the rest may differ:
    # the written-back history no longer holds the dropped turns, and the lexical embedder
    # weights terms by their frequency in the pool.)
    def conversation(calls: list[list[BaseMessage]]) -> list[list[str]]:
        return [texts([m for m in r if m not in context_messages(r)]) for r in calls]

    assert conversation(received["messages"]) == conversation(received["llm_input_messages"])
    assert all(len(context_messages(r)) <= 1 for r in received["messages"])
    # Written back, the history is what the model saw plus its reply: trimmed, and with at
    # most one memory message (each call replaces the last one).
    kept = states["messages"]
    assert len(kept) < len(states["llm_input_messages"])
    assert len(context_messages(kept)) == 1
    assert texts(kept[:-1]) == texts(received["messages"][-1])


async def test_store_memories_async():
    store = memory_store()
    model = RecordingChatModel(script=[AIMessage("ok")])
    hook = create_pacms_hook(
        40, strategy="topk", memory=MemoryOptions([("memories", "{user_id}")], limit=3)
    )
    agent = create_react_agent(model, [search], pre_model_hook=hook, store=store)
    await agent.ainvoke(
        {"messages": [HumanMessage("Is my dog Biscuit allergic to peanuts?")]},
        {"configurable": {"user_id": "u1"}},
    )
    (received,) = model.received
    (context,) = context_messages(received)
    memory_cands = [c for c in hook.last_selection.candidates if c.kind == "memory"]
    assert len(memory_cands) == len(MEMORIES)  # no vector index: the namespace is scanned
    assert context.content.count("\n- ") >= 1


def test_store_failure_is_soft():
    class Broken(InMemoryStore):
        def search(self, *args, **kwargs):
            raise ConnectionError("store down")

    model = RecordingChatModel(script=[AIMessage("ok")])
    memory = MemoryOptions([("memories",)], store=Broken())
    hook = create_pacms_hook(100, memory=memory)
    agent = create_react_agent(model, [search], pre_model_hook=hook)
    agent.invoke({"messages": [HumanMessage("hi")]})
    assert [m.content for m in model.received[0]] == ["hi"]
    strict = create_pacms_hook(config=SelectionConfig(budget=100, memory=memory, strict=True))
    with pytest.raises(ConnectionError):
        strict.invoke({"messages": [HumanMessage("hi")]})


def test_memory_without_a_store_is_reported_and_strict_raises():
    # the lookup was skipped in silence, strict or not, when the graph had no store
    events = EventCollector()
    model = RecordingChatModel(script=[AIMessage("ok")])
    hook = create_pacms_hook(100, memory=MemoryOptions([("memories",)]))
    agent = create_react_agent(model, [search], pre_model_hook=hook)
    agent.invoke({"messages": [HumanMessage("hi")]}, {"callbacks": [events]})
    assert "no store" in events.selections[-1]["memory_error"]
    strict = SelectionConfig(budget=100, memory=MemoryOptions([("memories",)]), strict=True)
    with pytest.raises(ValueError, match="no store"):
        create_pacms_hook(config=strict).invoke({"messages": [HumanMessage("hi")]})
    placeholder = MemoryOptions([("memories", "{user_id}")], store=InMemoryStore())
    strict = SelectionConfig(budget=100, memory=placeholder, strict=True)
    with pytest.raises(ValueError, match="user_id"):
        create_pacms_hook(config=strict).invoke({"messages": [HumanMessage("hi")]})


# -- fail soft ----------------------------------------------------------------------------------
class FailingEmbeddings(Embeddings):
    def embed_documents(self, texts):
        raise RuntimeError("embedding service unavailable")

    def embed_query(self, text):
        raise RuntimeError("embedding service unavailable")


def test_embedding_failure_falls_back_to_recency_and_agent_keeps_running(tmp_path):
    log = tmp_path / "f.jsonl"
    model = RecordingChatModel(script=tool_calling_script("search", "x"))
    hook = create_pacms_hook(2500, selector=FailingEmbeddings(), log=log)
    agent = create_react_agent(model, [search], pre_model_hook=hook)
    history = long_conversation(30, fact=FACT)
    result = agent.invoke({"messages": [*history, HumanMessage("search x")]})
    assert result["messages"][-1].content.startswith("Tool said")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2
    assert all(r["fell_back"] and r["strategy"] == "lastk" for r in records)
    assert "embedding service unavailable" in records[0]["error"]
    for received in model.received:
        assert_provider_valid(received)
    assert hook.last_selection.tokens_kept <= 2500 or hook.last_selection.over_budget


async def test_async_recovery_does_not_block_on_the_sync_selector():
    class AsyncOnly(ContextSelector):
        def select(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the blocking select ran on the event loop")

    hook = create_pacms_hook(
        config=SelectionConfig(budget=30, selector=AsyncOnly(), query=lambda state: 123)
    )  # not a str: the selection fails
    conversation = [HumanMessage("first question " * 40), AIMessage("ok"), HumanMessage("next?")]
    out = await hook.ainvoke({"messages": conversation})
    kept = out["llm_input_messages"]
    assert kept[-1] is conversation[-1] and len(kept) < len(conversation)  # recency, in budget


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_failed_selection_is_reported_like_any_call(
    tmp_path, caplog: pytest.LogCaptureFixture, use_async: bool
):
    log = tmp_path / "f.jsonl"
    events: list[dict[str, Any]] = []

    class Events(BaseCallbackHandler):
        def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
            events.append(data)

    def broken(state: Any) -> str:
        raise RuntimeError("query callable broke")

    hook = create_pacms_hook(config=SelectionConfig(budget=100, log=log, query=broken))
    conversation = [HumanMessage("first question " * 40), AIMessage("ok"), HumanMessage("next?")]
    config = {"callbacks": [Events()]}
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        if use_async:
            out = await hook.ainvoke({"messages": conversation}, config)
        else:
            out = hook.invoke({"messages": conversation}, config)
    assert out["llm_input_messages"][-1] is conversation[-1]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "fell back to recency (RuntimeError: query callable broke)" in warning  # said once
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    (event,) = events
    for seen in (record, event):
        assert seen["fell_back"] and "query callable broke" in seen["error"]
    sel = hook.last_selection
    assert sel is not None and sel.fell_back and "query callable broke" in (sel.error or "")
    assert sel.tokens_kept <= 100


def test_strict_raises_on_embedding_failure():
    hook = create_pacms_hook(
        config=SelectionConfig(budget=100, selector=FailingEmbeddings(), strict=True)
    )
    with pytest.raises(RuntimeError, match="unavailable"):
        hook.invoke({"messages": [HumanMessage("a"), HumanMessage("b")]})
    # a non-strict selector under a strict hook still raises (flagged fallback)
    lax = ContextSelector(FailingEmbeddings())
    hook = create_pacms_hook(config=SelectionConfig(budget=100, selector=lax, strict=True))
    with pytest.raises(RuntimeError, match="fell back"):
        hook.invoke({"messages": [HumanMessage("a"), HumanMessage("b")]})


# -- budgets and options ------------------------------------------------------------------------
def test_budget_from_context_window():
    msgs = {"messages": [*long_conversation(10, fact=FACT), HumanMessage("q")]}
    hook = create_pacms_hook(Budget(context_window=5000, answer_reserve=4000, fill=0.5))
    hook.invoke(msgs)
    assert hook.last_selection.budget == 500
    hook = create_pacms_hook(Budget(context_window=1200, answer_reserve=200))
    hook.invoke(msgs)
    assert hook.last_selection.budget == 1000
    hook = create_pacms_hook(budget=("ratio", 0.25))
    hook.invoke(msgs)
    assert hook.last_selection.budget == hook.last_selection.tokens_total // 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "needs a budget"),
        ({"budget": ("ratio", 0.5), "config": SelectionConfig(budget=5)}, "not both"),
        ({"budget": ("window", 100)}, "budget must be"),
        ({"budget": 5, "strategy": "nope"}, "unknown strategy"),
        ({"budget": ("ratio", 1.5)}, "ratio"),
    ],
)
def test_bad_options_fail_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        create_pacms_hook(**kwargs)
    with pytest.raises(ValueError, match="must exceed"):
        Budget(context_window=100, answer_reserve=100)


def test_strategy_options_reach_the_strategy():
    hook = create_pacms_hook(100, strategy=Pacms(relevance_weight=0.3))
    hook.invoke({"messages": [*long_conversation(10, fact=FACT), HumanMessage("q")]})
    assert hook.last_selection.info["relevance_weight"] == 0.3
    hook = create_pacms_hook(100, strategy=StrategyOptions("rag", k=2))
    hook.invoke({"messages": [*long_conversation(10, fact=FACT), HumanMessage("q")]})
    assert len(hook.last_selection.kept_ids) <= 3  # 2 + the mandatory question


def test_query_callable_used():
    hook = create_pacms_hook(
        config=SelectionConfig(budget=40, strategy="topk", query=lambda state: state["topic"])
    )
    history = [
        HumanMessage("the cache latency is 12 ms"),
        HumanMessage("lunch is at noon"),
        HumanMessage("next"),
    ]
    out = hook.invoke({"messages": history, "topic": "cache latency"})["llm_input_messages"]
    assert history[0] in out


def test_tool_placeholders_keep_provider_valid_calls_in_agent():
    model = RecordingChatModel(script=[AIMessage("ok")])
    hook = create_pacms_hook(300, strategy="topk", tool_loop=ToolLoopOptions(placeholders=True))
    agent = create_react_agent(model, [search], pre_model_hook=hook)
    messages = [
        HumanMessage("look up the invoices archive"),
        AIMessage("", tool_calls=[call("search", {"query": "invoices archive"}, "c1")]),
        ToolMessage(
            "Archive results for invoices archive: " + BIG, tool_call_id="c1", name="search"
        ),
        AIMessage("Found 3 invoices."),
        HumanMessage("which archive search did you run for invoices?"),
    ]
    agent.invoke({"messages": messages})
    (received,) = model.received
    assert_provider_valid(received)
    results = [m for m in received if isinstance(m, ToolMessage)]
    assert len(results) == 1 and "omitted" in results[0].content


# -- a hand-built StateGraph --------------------------------------------------------------------
class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    llm_input_messages: list[AnyMessage]


def build_graph(model: RecordingChatModel, hook: Any, **compile_kwargs: Any):
    def call_model(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["llm_input_messages"])]}

    async def acall_model(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["llm_input_messages"])]}

    from langchain_core.runnables import RunnableLambda

    graph = StateGraph(State)
    graph.add_node("select", hook)
    graph.add_node("model", RunnableLambda(call_model, afunc=acall_model))
    graph.add_edge(START, "select")
    graph.add_edge("select", "model")
    return graph.compile(**compile_kwargs)


def test_hook_as_node_of_a_state_graph_with_checkpointer_and_store():
    model = RecordingChatModel(script=answer_from_context)
    store = memory_store()
    hook = create_pacms_hook(600, memory=MemoryOptions([("memories", "{user_id}")]))
    app = build_graph(model, hook, checkpointer=InMemorySaver(), store=store)
    config = {"configurable": {"thread_id": "t1", "user_id": "u1"}}
    history = long_conversation(120, fact=FACT, early_at=1)
    app.invoke({"messages": history}, config)
    out = app.invoke({"messages": [HumanMessage("What is my locker combination?")]}, config)
    assert SECRET in out["messages"][-1].content
    assert len(out["messages"]) == len(history) + 3  # nothing removed from the checkpoint
    received = model.received[-1]
    assert_provider_valid(received)
    assert len(context_messages(received)) <= 1


async def test_hook_as_node_async():
    model = RecordingChatModel(script=answer_from_context)
    hook = create_pacms_hook(budget=600)
    app = build_graph(model, hook)
    history = long_conversation(120, fact=FACT, early_at=1)
    out = await app.ainvoke(
        {"messages": [*history, HumanMessage("What is my locker combination?")]}
    )
    assert SECRET in out["messages"][-1].content


async def test_store_found_from_the_passed_config_when_get_runtime_fails(monkeypatch):
    # Python 3.10 async code does not carry the config context variable get_runtime reads.
    from langchain_pacms.integrations import graph

    def no_context() -> None:
        raise RuntimeError("Called get_config outside of a runnable context")

    monkeypatch.setattr(graph, "get_runtime", no_context)
    model = RecordingChatModel(script=[AIMessage("ok")])
    hook = create_pacms_hook(200, memory=MemoryOptions([("memories", "u1")]))
    agent = create_react_agent(model, [search], pre_model_hook=hook, store=memory_store())
    await agent.ainvoke({"messages": [HumanMessage("What is my dog called?")]})
    (received,) = model.received
    assert context_messages(received), "the graph's store was not found"
