"""Fold stubs of parallel rounds read the results as written; only a stub lists locators again."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_pacms.lifecycle import Action, apply_actions, index_messages
from langchain_pacms.messages import LIFECYCLE_KEY, reshow_left_out

LISTING = "\n".join(f"-rw-r--r-- 1 dev {1000 + i} /par/1/mod_{i:03d}.py" for i in range(30))
RECORD = json.dumps(
    {"id": "REC-a2ab1959", "items": [{"sku": f"SKU-{i:04d}", "qty": i} for i in range(20)]},
    indent=1,
)
TRACE = "\n".join(f'  File "/srv/app/layer_{k}.py", line {100 + k}, in fn_{k}' for k in range(10))


def _parallel_round(text: str = "") -> list[BaseMessage]:
    calls = [
        {"name": "list_dir", "args": {"path": "/par/1"}, "id": "a"},
        {"name": "get_record", "args": {"key": "k1"}, "id": "b"},
        {"name": "run_tests", "args": {"target": "svc"}, "id": "c"},
    ]
    return [
        HumanMessage("task", id="h"),
        AIMessage(text, tool_calls=calls, id="ai"),
        ToolMessage(LISTING, tool_call_id="a", id="ta"),
        ToolMessage(RECORD, tool_call_id="b", id="tb"),
        ToolMessage(TRACE, tool_call_id="c", id="tc"),
        HumanMessage("next", id="h2"),
    ]


@pytest.mark.parametrize("scope", ["output", "span"])
def test_a_parallel_round_stub_counts_its_lines_and_shows_locators_as_written(scope) -> None:
    msgs = _parallel_round("I will list, fetch and test." if scope == "span" else "")
    index = index_messages(msgs)
    obj = next(o for o in index.objects if o.kind == "tool")
    folded = apply_actions(msgs, index, [Action("fold", obj.id, scope=scope)], dedupe=False)
    stub = str(next(m for m in folded.messages if isinstance(m, ToolMessage)).content)
    lines = sum(text.count("\n") + 1 for text in (LISTING, RECORD, TRACE))
    assert stub.startswith(f"[folded: {lines} lines; ")
    shown = stub.partition("; locators: ")[2].rstrip("]").split(", ")
    assert "REC-a2ab1959" in shown and "/par/1/mod_000.py" in shown
    assert "\\" not in stub  # no JSON escapes: the texts hold none


def _stub(content: str) -> ToolMessage:
    mark = {"object": "function:tool:1", "state": "folded", "elsewhere": ["TICKET-7"]}
    return ToolMessage(content, tool_call_id="c1", additional_kwargs={LIFECYCLE_KEY: mark})


def test_a_stub_lists_its_lost_locators_again_but_a_cleared_one_does_not() -> None:
    call = AIMessage("", tool_calls=[{"name": "sh", "args": {}, "id": "c1"}])
    stub = _stub('[folded: 9 lines; recover_context("function:tool:1"); locators: a.py]')
    assert reshow_left_out([call, stub])[1].content.endswith("; locators: a.py, TICKET-7]")
    for text in ("[cleared]", "[folded: see elsewhere]", '[folded: recover_context("x:1")]'):
        assert reshow_left_out([call, _stub(text)])[1].content == text


@pytest.mark.parametrize(("output", "lines"), [("ok\n" * 500, 500), ("ok\n" * 499 + "ok", 500)])
def test_a_final_newline_ends_the_last_line_it_does_not_start_another(output: str, lines: int):
    # a shell output ending in a newline was counted one line long
    call = {"name": "run", "args": {}, "id": "c"}
    messages = [
        HumanMessage("go", id="h"),
        AIMessage("", tool_calls=[call], id="a"),
        ToolMessage(output, tool_call_id="c", id="t"),
        HumanMessage("next", id="h2"),
    ]
    done = apply_actions(messages, index_messages(messages), [Action("fold", "function:tool:1")])
    assert str(done.messages[2].content).startswith(f"[folded: {lines} lines;")
