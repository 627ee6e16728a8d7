"""The latest turn starts at the latest user message, whatever other roles follow it."""

from __future__ import annotations

from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.store.memory import InMemoryStore

from langchain_pacms.lifecycle import LifecycleHarness, at_boundary, index_messages


def _history(after: object) -> list:
    pasted = "\n".join(f"ERROR /srv/app/mod_{i}.py:{i} value={i * 7}" for i in range(400))
    return [
        SystemMessage("You are helpful.", id="s"),
        HumanMessage("hello", id="h1"),
        AIMessage("hi", id="a1"),
        HumanMessage("Why does this fail?\n" + pasted, id="h2"),
        after,
        AIMessage("Because of mod_3.", id="a2"),
    ]


def test_a_developer_or_function_message_does_not_move_the_latest_turn() -> None:
    for after in (
        ChatMessage(role="developer", content="Answer briefly.", id="x"),
        FunctionMessage(name="f", content="done", id="x"),
    ):
        objects = {o.lineage[0]: o for o in index_messages(_history(after)).objects}
        assert objects["h2"].latest and not objects["h1"].latest


def test_the_default_harness_leaves_the_latest_user_message_whole() -> None:
    messages = _history(ChatMessage(role="developer", content="Answer briefly.", id="x"))
    commit = LifecycleHarness(store=InMemoryStore()).step(messages, thread_id="t")
    kept = {m.id: m for m in (commit.messages if commit else messages)}
    assert kept["h2"].content == messages[3].content


def test_a_chat_message_with_role_user_is_a_turn() -> None:
    call = {"name": "f", "args": {}, "id": "c"}
    messages = [
        HumanMessage("go", id="h"),
        AIMessage("", tool_calls=[call], id="a"),
        ToolMessage("1", tool_call_id="c", id="t"),
        ChatMessage(role="user", content="and now?", id="u"),
    ]
    assert at_boundary(messages, "turn")
    assert [o.latest for o in index_messages(messages).objects] == [False, False, True]
