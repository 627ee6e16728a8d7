"""A lifecycle stub another middleware cleared lists no locators again, and the budget holds."""

from __future__ import annotations

import json

from langchain.agents import create_agent
from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from pacms_fakes import EventCollector, RecordingChatModel, call

from langchain_pacms.integrations import PACMSMiddleware
from langchain_pacms.lifecycle import LifecycleMiddleware

BUDGET = 4_000


@tool
def get_record(key: str) -> str:
    """Fetch a JSON record by key."""
    items = [{"sku": f"SKU-{key}-{i}", "price": 3.5 * i} for i in range(40)]
    return json.dumps({"key": key, "id": f"REC-{key}", "items": items}, indent=1)


@tool
def list_dir(path: str) -> str:
    """List a directory."""
    return "\n".join(f"{path}/mod_{i:03d}.py" for i in range(40))


def fetch(messages: list[BaseMessage], index: int) -> AIMessage:
    """Fetch records (all with the same prices) and list directories in turn, then answer."""
    if index >= 30:
        return AIMessage("done")
    name, args = (
        ("get_record", {"key": f"k{index}"})
        if index % 2
        else ("list_dir", {"path": f"/w/d{index}"})
    )
    return AIMessage(f"step {index}", tool_calls=[call(name, args, f"c{index}")])


def test_cleared_stubs_list_nothing_again_and_every_call_fits_the_budget() -> None:
    """Listed first, ``ContextEditingMiddleware`` clears old stubs to ``[cleared]``, marks kept."""
    store = InMemoryStore()
    model = RecordingChatModel(script=fetch)
    edits = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=3_000, keep=3)])
    agent = create_agent(
        model,
        [get_record, list_dir],
        system_prompt="You fetch records.",
        store=store,
        checkpointer=InMemorySaver(),
        middleware=[edits, LifecycleMiddleware(store=store), PACMSMiddleware(BUDGET)],
    )
    events = EventCollector()
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": 200, "callbacks": [events]}
    agent.invoke({"messages": [HumanMessage("Check every record. Task TASK-77.")]}, config)

    cleared = [
        str(m.content)
        for sent in model.received
        for m in sent
        if isinstance(m, ToolMessage) and str(m.content).startswith("[cleared")
    ]
    assert cleared and set(cleared) == {"[cleared]"}
    assert [e["tokens_sent"] for e in events.selections if e["over_budget"]] == []
