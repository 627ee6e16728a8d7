"""PACMSMiddleware inside real langchain.agents.create_agent runs."""

from __future__ import annotations

import builtins
import importlib
import json
import sys
from dataclasses import dataclass

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore
from pacms_fakes import (
    BIG,
    FACT,
    EventCollector,
    RecordingChatModel,
    assert_pacms_keeps_the_early_fact_lastk_loses_it,
    assert_provider_valid,
    call,
    long_conversation,
    search,
    tool_calling_script,
)

from langchain_pacms import MemoryOptions, ToolLoopOptions
from langchain_pacms.integrations.middleware import PACMSMiddleware
from langchain_pacms.messages import CONTEXT_MEMORIES_HEADER

SYSTEM = "You are a careful assistant."


def test_model_receives_selection_state_untouched(tmp_path):
    log = tmp_path / "mw.jsonl"
    model = RecordingChatModel(script=tool_calling_script("search", "invoices"))
    mw = PACMSMiddleware(2500, log=log)
    agent = create_agent(model, [search], system_prompt=SYSTEM, middleware=[mw])
    history = long_conversation(30, fact=FACT)
    question = HumanMessage("Search the archive for invoices.")
    collector = EventCollector()
    result = agent.invoke({"messages": [*history, question]}, {"callbacks": [collector]})

    assert len(model.received) == 2
    assert len(result["messages"]) == len(history) + 4  # full transcript kept in state
    assert result["messages"][: len(history)] == history
    for received in model.received:
        assert isinstance(received[0], SystemMessage) and received[0].content == SYSTEM
        assert sum(isinstance(m, SystemMessage) for m in received) == 1
        assert_provider_valid(received)
        assert question in received
        assert len(received) < len(history)
    second = model.received[1]
    assert isinstance(second[-1], ToolMessage) and BIG in second[-1].content

    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2
    assert all(r["source"] == "middleware" for r in records)
    assert [r["query"] for r in records] == [  # the task, then the task and the agent's call
        question.content,
        f'{question.content}\nsearch {{"query": "invoices"}}',
    ]
    # the system prompt was budgeted as a mandatory candidate
    assert records[0]["candidates"][0]["kind"] == "system"
    assert records[0]["candidates"][0]["mandatory"] is True
    assert records[0]["tokens_kept"] <= 2500
    events = collector.selections
    assert len(events) == 2 and events[0]["source"] == "middleware"


def test_200_turns_early_fact_pacms_keeps_it_lastk_loses_it():
    assert_pacms_keeps_the_early_fact_lastk_loses_it(
        lambda strategy, model: create_agent(
            model,
            [search],
            system_prompt=SYSTEM,
            middleware=[PACMSMiddleware(budget=600, strategy=strategy)],
        )
    )


async def test_async_path(tmp_path):
    log = tmp_path / "a.jsonl"
    model = RecordingChatModel(script=tool_calling_script("search", "x"))
    agent = create_agent(
        model,
        [search],
        system_prompt=SYSTEM,
        middleware=[PACMSMiddleware(2500, log=log)],
    )
    history = long_conversation(40, fact=FACT)
    result = await agent.ainvoke({"messages": [*history, HumanMessage("search x")]})
    assert len(model.received) == 2
    for received in model.received:
        assert_provider_valid(received)
        assert received[0].content == SYSTEM
    assert len(result["messages"]) == len(history) + 4
    assert len(log.read_text().splitlines()) == 2


@dataclass
class UserContext:
    user_id: str


MEMORIES = {
    "m1": "The user's dog is called Biscuit.",
    "m2": "The user prefers answers in metric units.",
    "m3": "The user's staging database listens on port 6543.",
    "m4": "The user is allergic to peanuts.",
}


@pytest.mark.parametrize("use_async", [False, True])
async def test_store_memories_from_agent_store(use_async):
    store = InMemoryStore()
    for key, value in MEMORIES.items():
        store.put(("memories", "u1"), key, {"content": value})
    store.put(("memories", "u2"), "x", {"content": "Someone else's staging port is 1111."})
    model = RecordingChatModel(script=[AIMessage("6543")])
    schema = PACMSMiddleware(budget=1).runner.tool_tokens([search])  # charged too
    mw = PACMSMiddleware(
        30 + schema, strategy="topk", memory=MemoryOptions([("memories", "{user_id}")])
    )
    agent = create_agent(
        model,
        [search],
        system_prompt=SYSTEM,
        middleware=[mw],
        store=store,
        context_schema=UserContext,
    )
    payload = {"messages": [HumanMessage("Which port does my staging database listen on?")]}
    if use_async:
        await agent.ainvoke(payload, context=UserContext(user_id="u1"))
    else:
        agent.invoke(payload, context=UserContext(user_id="u1"))
    (received,) = model.received
    assert received[0].content == SYSTEM
    context = received[1]
    assert isinstance(context, SystemMessage)
    assert context.content.startswith(CONTEXT_MEMORIES_HEADER)
    assert "port 6543" in context.content
    assert "1111" not in context.content
    selection = mw.last_selection
    dropped = [
        c.text
        for c in selection.candidates
        if c.kind == "memory" and c.id not in selection.kept_ids
    ]
    assert dropped
    assert not any(text in context.content for text in dropped)
    assert received[2].content == payload["messages"][0].content


def test_tight_budget_with_huge_tool_outputs_stays_valid():
    model = RecordingChatModel(script=[AIMessage("ok")])
    agent = create_agent(
        model,
        [search],
        system_prompt=SYSTEM,
        middleware=[PACMSMiddleware(200, tool_loop=ToolLoopOptions(placeholders=True))],
    )
    messages = []
    for t in range(6):
        messages += [
            HumanMessage(f"search topic {t}"),
            AIMessage(
                "",
                tool_calls=[
                    call("search", {"query": f"t{t}a"}, f"a{t}"),
                    call("search", {"query": f"t{t}b"}, f"b{t}"),
                ],
            ),
            ToolMessage(BIG, tool_call_id=f"b{t}", name="search"),
            ToolMessage(BIG, tool_call_id=f"a{t}", name="search"),
            AIMessage(f"done with topic {t}"),
        ]
    messages.append(HumanMessage("what did you search for topic 3?"))
    agent.invoke({"messages": messages})
    (received,) = model.received
    assert_provider_valid(received)
    assert not any(m.content == BIG for m in received)
    conversational = [m for m in received if not isinstance(m, SystemMessage)]
    assert isinstance(conversational[0], HumanMessage)
    assert conversational[-1] is messages[-1]


@pytest.mark.parametrize("strategy", ["tool", "provider", "auto"])
def test_a_structured_output_schema_is_charged_to_the_budget(strategy):
    """create_agent(response_format=...) sends a schema outside request.tools: it is charged."""
    from langchain.agents.structured_output import AutoStrategy, ProviderStrategy, ToolStrategy
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import BaseModel, Field

    from langchain_pacms import ContextSelector
    from langchain_pacms.messages import sent_tokens

    class Report(BaseModel):
        """An incident report."""

        title: str = Field(description="Short title of the incident.")
        summary: str = Field(description="What happened and who was affected. " * 8)
        actions: list[str] = Field(description="Follow-up actions, each with an owner. " * 8)

    form = {"tool": ToolStrategy, "provider": ProviderStrategy, "auto": AutoStrategy}[strategy]
    args = {"title": "t", "summary": "s", "actions": []}
    reply = AIMessage("", tool_calls=[call("Report", args, "c1")])
    model = RecordingChatModel(script=lambda messages, index: reply)
    agent = create_agent(model, [], middleware=[PACMSMiddleware(300)], response_format=form(Report))
    history = [
        m
        for j in range(20)
        for m in (HumanMessage(f"note {j}: outage {j} " + "details " * 20), AIMessage(f"ack {j}"))
    ]
    events = EventCollector()
    agent.invoke(
        {"messages": [*history, HumanMessage("Write the report.")]}, {"callbacks": [events]}
    )
    counter = ContextSelector().token_counter
    schema = counter(json.dumps(convert_to_openai_tool(Report), sort_keys=True))
    (event,) = events.selections
    assert event["tokens_sent"] >= schema  # the schema is charged
    assert sent_tokens(model.received[0], counter) + schema <= 300 or event["over_budget"]


def test_import_error_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_langchain(name, *args, **kwargs):
        if name == "langchain" or name.startswith("langchain."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "langchain_pacms.integrations.middleware")
    for name in [n for n in sys.modules if n == "langchain" or n.startswith("langchain.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(builtins, "__import__", no_langchain)
    with pytest.raises(ImportError, match=r'pip install "langchain-pacms\[middleware\]"'):
        importlib.import_module("langchain_pacms.integrations.middleware")
    # the rest of the integrations import fine without langchain
    import langchain_pacms.integrations as integrations

    importlib.reload(integrations)
    assert callable(integrations.create_pacms_hook)
    with pytest.raises(ImportError, match="middleware"):
        _ = integrations.PACMSMiddleware
