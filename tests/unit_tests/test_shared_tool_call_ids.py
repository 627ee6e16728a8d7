"""Tool calls that share one id: every call travels with a result of its own."""

from __future__ import annotations

from collections import Counter
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pacms_fakes import assert_provider_valid
from test_messages import SELECTOR

from langchain_pacms.integrations import (
    apply_selection,
    create_pacms_hook,
    messages_to_candidates,
)


def call(name: str, call_id: str = "call_0") -> dict[str, Any]:
    return {"name": name, "args": {"q": name}, "id": call_id, "type": "tool_call"}


def shared_history(*results: str) -> list[BaseMessage]:
    """Two calls with the id ``call_0`` (as some models send them), then the given results."""
    return [
        HumanMessage("look up the staging and production ports"),
        AIMessage("", tool_calls=[call("staging"), call("production")]),
        *(ToolMessage(r, tool_call_id="call_0") for r in results),
        AIMessage("Staging uses 6543, production 5432."),
        HumanMessage("thanks"),
    ]


def results_per_id(messages: list[BaseMessage]) -> Counter[str]:
    return Counter(str(m.tool_call_id) for m in messages if isinstance(m, ToolMessage))


def test_both_results_join_the_span_and_are_sent():
    msgs = shared_history("6543", "5432")
    cands, spans = messages_to_candidates(msgs)
    assert [(s.id, s.indices, s.missing) for s in spans if s.kind == "tool"] == [
        ("t1", (1, 2, 3), ())
    ]
    out = apply_selection(msgs, SELECTOR.select(cands, "ports", budget=10_000), spans)
    assert out == msgs  # before the fix the second result was dropped as an orphan
    assert_provider_valid(out)


def test_a_missing_result_gets_a_placeholder_for_the_call_left():
    msgs = shared_history("6543")
    cands, spans = messages_to_candidates(msgs, token_counter=SELECTOR.token_counter)
    assert next(s for s in spans if s.id == "t1").missing == ("call_0",)
    out = apply_selection(msgs, SELECTOR.select(cands, "ports", budget=10_000), spans)
    assert_provider_valid(out)
    results = [m for m in out if isinstance(m, ToolMessage)]
    assert [(m.content, m.name, m.status) for m in results] == [
        ("6543", None, "success"),
        ("[no result was recorded for this production call]", "production", "error"),
    ]


def test_a_third_result_with_the_id_is_an_orphan():
    out = create_pacms_hook(10_000, selector=SELECTOR).invoke(
        {"messages": shared_history("6543", "5432", "9999")}
    )["llm_input_messages"]
    assert_provider_valid(out)
    assert [m.content for m in out if isinstance(m, ToolMessage)] == ["6543", "5432"]


def test_the_call_only_variant_answers_every_call():
    msgs = shared_history("port " * 400, "port " * 400)
    cands, spans = messages_to_candidates(
        msgs, tool_placeholders=True, token_counter=SELECTOR.token_counter
    )
    stub = next(c for c in cands if c.id == "t1:call")
    sel = SELECTOR.select(
        cands, "ports", budget=stub.tokens + 60, strategy="topk", relevant_ids=["t1:call"]
    )
    assert "t1:call" in sel.kept_ids and "t1" not in sel.kept_ids
    out = apply_selection(msgs, sel, spans)
    assert_provider_valid(out)
    assert results_per_id(out) == Counter({"call_0": 2})


def test_an_id_used_again_by_a_later_message_answers_that_message():
    msgs = [
        HumanMessage("two lookups"),
        AIMessage("", tool_calls=[call("staging")]),
        ToolMessage("6543", tool_call_id="call_0"),
        AIMessage("", tool_calls=[call("production")]),
        ToolMessage("5432", tool_call_id="call_0"),
        HumanMessage("thanks"),
    ]
    _, spans = messages_to_candidates(msgs)
    assert [s.indices for s in spans if s.kind == "tool"] == [(1, 2), (3, 4)]
    out = create_pacms_hook(10_000, selector=SELECTOR).invoke({"messages": msgs})[
        "llm_input_messages"
    ]
    assert out == msgs
