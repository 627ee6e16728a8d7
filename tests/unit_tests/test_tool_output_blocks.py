"""Tool outputs given as content blocks (as MCP tools give them) are read as their text.

MCP adapters put a tool's output in ``ToolMessage.content`` as standard blocks, each text block
with a generated id. The lifecycle and the selection decide on such a history exactly as on
the same outputs given as strings: same plan, same stubs and masks, same selection.
"""

from __future__ import annotations

import json
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.store.memory import InMemoryStore
from test_lifecycle_planners import History, code_body, log_text, plan_of

from langchain_pacms.integrations import ToolLoopOptions, create_pacms_hook
from langchain_pacms.lifecycle import apply_actions, index_messages
from langchain_pacms.messages import payload_of
from langchain_pacms.messages.payload import readable_of
from langchain_pacms.messages.text import content_text


def as_blocks(messages: list[BaseMessage], seed: int = 0) -> list[BaseMessage]:
    """Every string tool output as one text block with a fresh id (as MCP adapters send it)."""
    return [
        m.model_copy(
            update={
                "content": [
                    {"type": "text", "text": m.content, "id": f"lc_{uuid.UUID(int=seed + i)}"}
                ]
            }
        )
        if isinstance(m, ToolMessage) and isinstance(m.content, str)
        else m
        for i, m in enumerate(messages)
    ]


def coding_run(reads: list[int], logs: int) -> list[BaseMessage]:
    """A task, file reads (a file read twice is superseded), test logs, then a question."""
    h = History().user("fix the port parsing in src/app/config.py")
    for k in reads:
        h.call("read_file", code_body(f"src/app/m{k}.py"), path=f"src/app/m{k}.py")
    for b in range(logs):
        h.call("run_tests", log_text(build=f"build {b}"), cmd="pytest -q")
    h.call("list_dir", "src/app/config.py\nsrc/app/m1.py", path="src/app")
    return h.user("which file still fails, and on which line?").messages


def test_readable_text_and_exact_payload_of_blocks():
    out = as_blocks([ToolMessage("a.py\nb.py", tool_call_id="c", id="t")])
    assert readable_of(out, (0,)) == "a.py\nb.py"
    assert json.loads(payload_of(out, (0,)))[0]["text"] == "a.py\nb.py"  # exact, id included


@settings(max_examples=25, deadline=None)
@given(
    reads=st.lists(st.integers(0, 4), min_size=1, max_size=8),
    logs=st.integers(0, 3),
    seed=st.integers(0, 10_000),
)
def test_the_lifecycle_plans_and_rewrites_blocks_as_it_does_strings(reads, logs, seed):
    plain = coding_run(reads, logs)
    blocks = as_blocks(plain, seed)
    expected, got = plan_of(plain), plan_of(blocks)
    assert [(a.op, a.target) for a in got.actions] == [(a.op, a.target) for a in expected.actions]
    before = apply_actions(plain, index_messages(plain), expected.actions)
    after = apply_actions(blocks, index_messages(blocks), got.actions)
    # the same stubs and masks (their locators read from the text, not from the JSON)
    assert [content_text(m.content) for m in after.messages] == [
        content_text(m.content) for m in before.messages
    ]
    for kept, record in zip(before.sidecars, after.sidecars):
        assert record.object_id == kept.object_id
        assert json.loads(record.payload)[0]["text"] == kept.payload  # the exact blocks


def test_a_rerun_whose_blocks_carry_new_ids_still_supersedes_the_first():
    # the same lookup runs again after an edit and answers the same: the first copy goes,
    # whatever ids its blocks carry
    booking = json.dumps(
        {"reservation_id": "ZFA04Y", "flights": ["HAT039", "HAT040"]}
        | {f"note_{i}": "window seat, vegetarian meal" for i in range(40)}
    )
    h = History().user("change my booking ZFA04Y")
    h.call("get_reservation_details", booking, reservation_id="ZFA04Y")
    h.filler(2)
    h.call("update_reservation_baggages", "done", reservation_id="ZFA04Y", total_baggages=1)
    h.call("get_reservation_details", booking, reservation_id="ZFA04Y")  # unchanged after it
    h.filler(2).user("and the return flight?")
    plain = plan_of(h.messages)
    assert ("prune", "function:tool:1") in [(a.op, a.target) for a in plain.actions]
    blocks = plan_of(as_blocks(h.messages))
    assert [(a.op, a.target) for a in blocks.actions] == [(a.op, a.target) for a in plain.actions]


def test_the_selection_sends_the_same_rounds_and_stubs_for_blocks_as_for_strings():
    plain = coding_run([0, 1, 2, 1, 3], 2)
    blocks = as_blocks(plain)

    def sent(messages: list[BaseMessage]) -> list[tuple[str | None, str]]:
        stubs = ToolLoopOptions(sidecar_store=InMemoryStore())
        hook = create_pacms_hook(3_000, tool_loop=stubs)
        out = hook.invoke({"messages": messages})["llm_input_messages"]
        return [(m.id, content_text(m.content)) for m in out]

    expected = sent(plain)
    assert any("recover_context" in text for _, text in expected)  # stubs were sent
    assert sent(blocks) == expected
