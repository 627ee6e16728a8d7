"""A ``RemoveMessage`` in the history is applied before selection: it and its target stay home."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents.middleware import ModelRequest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from pacms_fakes import assert_provider_valid
from test_messages import SELECTOR

from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.integrations.middleware import PACMSMiddleware
from langchain_pacms.messages import apply_removals


def snapshot(messages: list[BaseMessage]) -> list[dict]:
    return [m.model_dump() for m in messages]


def test_a_removal_deletes_the_earlier_message_with_its_id():
    msgs = [
        HumanMessage("a", id="h1"),
        AIMessage("b", id="a1"),
        HumanMessage("c"),
        RemoveMessage(id="a1"),
        AIMessage("b again", id="a1"),  # after the removal: stays
        RemoveMessage(id="nowhere"),  # matches nothing: dropped
    ]
    before = snapshot(msgs)
    out = apply_removals(msgs)
    assert [m.content for m in out] == ["a", "c", "b again"]
    assert out[1] is msgs[2] and out[1].id is None  # no id is assigned
    assert snapshot(msgs) == before


def test_remove_all_clears_everything_before_it():
    msgs = [
        HumanMessage("old"),
        AIMessage("older"),
        RemoveMessage(id=REMOVE_ALL_MESSAGES),
        HumanMessage("new"),
    ]
    assert apply_removals(msgs) == [msgs[3]]
    assert apply_removals(msgs[:2]) == msgs[:2]


def test_the_hook_sends_no_removal_and_no_removed_message():
    call = {"name": "search", "args": {"q": "ports"}, "id": "c1", "type": "tool_call"}
    msgs = [
        SystemMessage("Be brief."),
        HumanMessage("the staging port is 6543", id="h1"),
        AIMessage("Noted.", id="a1"),
        AIMessage("", tool_calls=[call], id="a2"),
        ToolMessage("port list", tool_call_id="c1", id="t1"),
        RemoveMessage(id="a1"),
        RemoveMessage(id="a2"),  # its result is left an orphan: dropped too
        HumanMessage("which port?", id="h2"),
    ]
    hook = create_pacms_hook(2000, selector=SELECTOR)
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert [m.content for m in out] == ["Be brief.", "the staging port is 6543", "which port?"]
    convert_to_openai_messages(out)  # raised "Unknown BaseMessage type" before the fix


def test_the_middleware_sends_no_removal():
    msgs = [
        HumanMessage("first", id="h1"),
        AIMessage("reply", id="a1"),
        RemoveMessage(id=REMOVE_ALL_MESSAGES),
        HumanMessage("fresh start"),
    ]
    mw = PACMSMiddleware(2000, selector=SELECTOR)
    seen: list[ModelRequest] = []
    request = ModelRequest(
        model=FakeMessagesListChatModel(responses=[AIMessage("ok")]), messages=msgs
    )
    mw.wrap_model_call(request, lambda r: seen.append(r) or AIMessage("ok"))
    assert [m.content for m in seen[0].messages] == ["fresh start"]


# -- the property: the same history as LangGraph's reducer leaves -------------------------------
@st.composite
def histories(draw: st.DrawFn) -> list[BaseMessage]:
    """Messages with unique ids, and removals of messages still there (as a reducer allows)."""
    messages: list[BaseMessage] = []
    present: list[str] = []
    for k in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["human", "ai", "remove", "remove", "remove_all"]))
        if kind == "remove" and present:
            target = draw(st.sampled_from(present))
            present.remove(target)
            messages.append(RemoveMessage(id=target))
        elif kind == "remove_all" and draw(st.integers(0, 4)) == 0:
            present.clear()
            messages.append(RemoveMessage(id=REMOVE_ALL_MESSAGES))
        else:
            kind = "human" if kind != "ai" else "ai"
            message = (HumanMessage if kind == "human" else AIMessage)(f"{kind} {k}", id=f"m{k}")
            present.append(f"m{k}")
            messages.append(message)
    return messages


@settings(max_examples=150, deadline=None)
@given(messages=histories())
def test_removals_match_langgraph_add_messages(messages):
    before = snapshot(messages)
    state: list[BaseMessage] = []
    for message in copy.deepcopy(messages):  # the reducer, one update at a time
        state = add_messages(state, [message])
    out = apply_removals(messages)
    assert [m.id for m in out] == [m.id for m in state]
    assert not any(isinstance(m, RemoveMessage) for m in out)
    assert snapshot(messages) == before


@settings(max_examples=40, deadline=None)
@given(messages=histories(), budget=st.integers(1, 300))
def test_the_hook_never_sends_a_removal_or_a_removed_message(messages, budget):
    messages = [*messages, HumanMessage("what now?")]
    hook = create_pacms_hook(budget, selector=SELECTOR)
    out = hook.invoke({"messages": messages})["llm_input_messages"]
    assert_provider_valid(out)
    assert not any(isinstance(m, RemoveMessage) for m in out)
    given_ids = {id(m) for m in messages}
    still_there = {id(m) for m in apply_removals(messages)}
    assert all(id(m) in still_there for m in out if id(m) in given_ids)


def test_a_history_emptied_by_removals_sends_nothing():
    hook = create_pacms_hook(100, selector=SELECTOR)
    msgs = [HumanMessage("x", id="x"), RemoveMessage(id="x")]
    assert hook.invoke({"messages": msgs})["llm_input_messages"] == []
