"""The budget holds on what the model receives: framing text, placeholders and unseen prompts."""

from __future__ import annotations

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.store.memory import InMemoryStore

from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.integrations.messages import OMISSION_NOTE, sent_tokens


def plain_tokens(hook, messages: list[BaseMessage]) -> int:
    """Tokens of text-only messages, each counted on its own with the hook's counter."""
    return sum(hook.selector.token_counter(str(m.content)) for m in messages)


def memory_store() -> InMemoryStore:
    store = InMemoryStore()
    for i, fact in enumerate(["The user likes green tea.", "The user lives in Porto.",
                              "The user owns a cat named Rex."]):
        store.put(("mem",), f"k{i}", {"content": fact})
    return store


def test_context_message_header_and_bullets_are_charged_to_the_budget():
    # before the fix: 46 tokens sent on a 40-token budget (the header and bullets were free)
    hook = create_pacms_hook(budget_tokens=40, store=memory_store(),
                             memory_namespaces=[("mem",)], strategy="topk")
    msgs = [AIMessage("Earlier I answered a question about tea and cats."),
            HumanMessage("Where does the user live, and what tea?")]
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert "Relevant memories:" in out[0].content  # memories still reach the model
    assert plain_tokens(hook, out) <= 40
    assert not hook.last_selection.over_budget


def test_omission_note_is_charged_to_the_budget():
    # before the fix: the 15-token note came on top of 27 kept tokens on a 30-token budget
    weather = {"name": "weather", "args": {"city": "Lisbon"}, "id": "c1", "type": "tool_call"}
    msgs = [HumanMessage("Tell me about the weather in Lisbon today and this weekend, please."),
            AIMessage("", tool_calls=[weather]),
            ToolMessage("Sunny, 25 C.", tool_call_id="c1", name="weather"),
            AIMessage("It is sunny and 25 degrees."), HumanMessage("And tomorrow?")]
    hook = create_pacms_hook(budget_tokens=30, strategy="lastk")
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert out[0].content == OMISSION_NOTE  # the first turn was dropped: the note is needed
    assert sent_tokens(out, hook.selector.token_counter) <= 30
    assert not hook.last_selection.over_budget


def test_over_budget_when_the_mandatory_part_and_its_framing_exceed_the_budget():
    hook = create_pacms_hook(budget_tokens=5)
    msgs = [SystemMessage("You are a careful assistant who answers briefly."),
            HumanMessage("What is the capital of Portugal?")]
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    assert out == msgs
    assert hook.last_selection.over_budget


def tool_history() -> list[BaseMessage]:
    msgs: list[BaseMessage] = []
    for i in range(4):
        cid = f"c{i}"
        msgs += [HumanMessage(f"Look up invoice number {i} in the archive."),
                 AIMessage("", tool_calls=[{"name": "search", "args": {"q": f"invoice {i}"},
                                            "id": cid, "type": "tool_call"}]),
                 ToolMessage(f"Invoice {i}: " + "line item " * 30, tool_call_id=cid,
                             name="search"),
                 AIMessage(f"Invoice {i} has thirty line items.")]
    return [*msgs, HumanMessage("Which invoice had line items?")]


@pytest.mark.parametrize("budget", [120, 400, 5000])
def test_a_tool_span_and_its_call_only_variant_are_alternatives(budget):
    # before the fix, with room for both, topk kept t1 and t1:call and paid for both
    hook = create_pacms_hook(budget_tokens=budget, strategy="topk", tool_placeholders=True)
    msgs = tool_history()
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    selection = hook.last_selection
    kept = set(selection.kept_ids)
    assert not any(k.endswith(":call") and k.removesuffix(":call") in kept for k in kept)
    counter = hook.selector.token_counter
    assert selection.tokens_kept == sent_tokens(out, counter) <= budget  # nothing paid twice
    calls = [m for m in out if isinstance(m, AIMessage) and m.tool_calls]
    assert len({m.tool_calls[0]["id"] for m in calls}) == len(calls)  # no call sent twice
