"""Content blocks keep their shape, their keys' order and their cost through both halves."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_pacms import create_pacms_hook
from langchain_pacms.lifecycle import (
    Action,
    LifecycleHarness,
    SidecarStore,
    apply_actions,
    check_actions,
    index_messages,
    make_recover_tool,
)
from langchain_pacms.messages import content_text
from langchain_pacms.tokens import resolve_token_counter

ROWS = "\n".join(f"row {i} /srv/r{i}.csv value={i * 7}" for i in range(400))


def _round(content: Any) -> list[BaseMessage]:
    return [
        SystemMessage("sys", id="s"),
        HumanMessage("get the report", id="h1"),
        AIMessage("", tool_calls=[{"name": "get", "args": {}, "id": "c1"}], id="a1"),
        ToolMessage(content, tool_call_id="c1", id="t1"),
        AIMessage("ok", id="a2"),
        HumanMessage("next", id="h2"),
    ]


def test_a_text_plain_block_is_read_and_charged_as_its_text() -> None:
    block = {"type": "text-plain", "text": ROWS, "mime_type": "text/plain"}
    assert content_text(ToolMessage([block], tool_call_id="c")) == ROWS
    count = resolve_token_counter(None)
    messages: list[BaseMessage] = [HumanMessage("read the files", id="h1")]
    for k in range(6):
        call = {"name": "search", "args": {"query": f"q{k}"}, "id": f"c{k}"}
        messages += [
            AIMessage("", tool_calls=[call], id=f"a{k}"),
            ToolMessage([dict(block)], tool_call_id=f"c{k}", id=f"t{k}"),
        ]
    messages += [AIMessage("done", id="end"), HumanMessage("what was in row 7?", id="h2")]
    hook = create_pacms_hook(budget=3_000)
    out = hook.invoke({"messages": messages})["llm_input_messages"]
    sent = sum(
        count(b["text"])
        for m in out
        if isinstance(m.content, list)
        for b in m.content
        if isinstance(b, dict) and b.get("type") == "text-plain"
    )
    selection = hook.last_selection
    assert selection is not None and not selection.over_budget
    assert sent <= 3_000  # each result holds about 4,000 tokens: none fits


@pytest.mark.parametrize(
    ("content", "expected_first"),
    [
        ([{"type": "text", "text": ROWS, "cache_control": {"type": "ephemeral"}}], "dict"),
        ([{"type": "text", "text": ROWS, "id": "mcp-1"}, {"type": "text", "text": "tail"}], "dict"),
        ([ROWS, "tail"], "str"),
    ],
)
def test_a_mask_keeps_list_content_a_list_with_its_first_blocks_keys(
    content: list[Any], expected_first: str
) -> None:
    messages = _round(content)
    checked = check_actions(messages, index_messages(messages), [Action("mask", "function:tool:1")])
    assert [a.op for a in checked.accepted] == ["mask"]
    got = next(m for m in checked.result.messages if m.id == "t1").content
    assert isinstance(got, list) and len(got) == 1
    if expected_first == "str":
        assert isinstance(got[0], str) and "elided by mask" in got[0]
    else:
        original = {k: v for k, v in content[0].items() if k != "text"}
        assert {k: v for k, v in got[0].items() if k != "text"} == original
        assert "elided by mask" in got[0]["text"]


PDF_URL = {"type": "file", "url": "https://example.com/report.pdf", "mime_type": "application/pdf"}
CSV = {"type": "file", "base64": base64.b64encode(ROWS.encode()).decode(), "mime_type": "text/csv"}
AUDIO = {"type": "audio", "base64": "UklGRg==", "mime_type": "audio/wav"}


@pytest.mark.parametrize("block", [PDF_URL, CSV, AUDIO], ids=["pdf-url", "csv", "audio"])
def test_a_folded_result_with_a_file_comes_back_as_its_blocks(block: dict[str, Any]) -> None:
    content = [{"type": "text", "text": ROWS}, block]
    messages = _round(content)
    result = apply_actions(messages, index_messages(messages), [Action("fold", "function:tool:1")])
    store = InMemoryStore()
    SidecarStore(store, "t").put_many(result.sidecars)
    got = make_recover_tool(store).invoke(
        {"object_id": "function:tool:1", "state": {"messages": result.messages}},
        {"configurable": {"thread_id": "t"}},
    )
    assert got == content


def test_restored_blocks_keep_their_keys_in_order() -> None:
    content = [{"type": "text", "text": ROWS, "cache_control": {"type": "ephemeral"}}]
    messages = _round(content)
    result = apply_actions(messages, index_messages(messages), [Action("fold", "function:tool:1")])
    store = InMemoryStore()
    SidecarStore(store, "t").put_many(result.sidecars)
    back = LifecycleHarness(store=store).reactivate(
        result.messages, "function:tool:1", thread_id="t"
    )
    got = next(m for m in back if isinstance(m, ToolMessage)).content
    assert json.dumps(got) == json.dumps(content)  # not only equal: serialised the same
