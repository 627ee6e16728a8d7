"""File reads are recognised whatever the tool's shape, so the file-view rule applies to all."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_pacms.lifecycle import HeuristicPlanner, PlannerTuning, index_messages
from langchain_pacms.messages import read_paths

PATH = "/testbed/pkg/parser.py"

WHOLE_READS: dict[str, tuple[str, dict[str, Any]]] = {
    "read_file(path)": ("read_file", {"path": PATH}),
    "read_file(file_path)": ("read_file", {"file_path": PATH}),
    "view_file(filename)": ("view_file", {"filename": PATH}),
    "open_file(path)": ("open_file", {"path": PATH}),
    "cat(file)": ("cat", {"file": PATH}),
    "str_replace_editor view": ("str_replace_editor", {"command": "view", "path": PATH}),
    "editor action=view": ("editor", {"action": "view", "path": PATH}),
    "files operation=read": ("files", {"operation": "read", "file_path": PATH}),
    "bash command": ("bash", {"command": f"cat {PATH}"}),
    "bash input": ("bash", {"input": f"cat {PATH}"}),
    "terminal code": ("terminal", {"code": f"cat {PATH}"}),
    "shell argv": ("shell", {"cmd": ["cat", PATH]}),
    "editor in the shell": ("bash", {"command": f"str_replace_editor view {PATH}"}),
    "any tool, a shell read": ("run_step", {"step": f"nl -ba {PATH}"}),
}

PARTIAL_READS: dict[str, tuple[str, dict[str, Any]]] = {
    "read_file with a range": ("read_file", {"path": PATH, "offset": 10, "limit": 40}),
    "open_file at a line": ("open_file", {"path": PATH, "line_number": 120}),
    "editor view_range": (
        "str_replace_editor",
        {"command": "view", "path": PATH, "view_range": [1, 9]},
    ),
    "shell window": ("bash", {"command": f'open "{PATH}" 120'}),
    "editor in the shell, ranged": (
        "bash",
        {"command": f"str_replace_editor view {PATH} --view_range 1 9"},
    ),
}


def call(name: str, args: dict[str, Any], n: int = 1) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{n}"}], id=f"a{n}")


@pytest.mark.parametrize("shape", [*WHOLE_READS, *PARTIAL_READS])
def test_the_read_names_its_file(shape: str) -> None:
    name, args = {**WHOLE_READS, **PARTIAL_READS}[shape]
    assert PATH in read_paths(call(name, args))


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("send_message", {"text": "head to the airport"}),  # prose, no file
        ("write_file", {"path": PATH, "content": f"cat {PATH}"}),  # a write
        ("python", {"code": "print(open('pkg/parser.py').read())"}),  # a run, not a read
        ("str_replace_editor", {"command": "str_replace", "path": PATH, "old_str": "a"}),
    ],
)
def test_calls_that_read_no_file_name_none(name: str, args: dict[str, Any]) -> None:
    assert read_paths(call(name, args)) == frozenset()


def viewed(name: str, args: dict[str, Any]) -> list[BaseMessage]:
    """A read of a long file, then other steps: the read is the file's latest view."""
    body = "\n".join(f"def helper_{n}(value):\n    return value * {n}" for n in range(60))
    msgs: list[BaseMessage] = [
        HumanMessage("Fix helper_3", id="h"),
        call(name, args, 1),
        ToolMessage(body, tool_call_id="c1", id="t1"),
    ]
    for n in (2, 3):
        msgs += [
            call("bash", {"command": f"echo step {n}"}, n),
            ToolMessage(f"step {n}", tool_call_id=f"c{n}", id=f"t{n}"),
        ]
    return [*msgs, HumanMessage("go on", id="h2")]


def first_read_action(msgs: list[BaseMessage], keep_file_views: bool) -> str | None:
    tuning = PlannerTuning(
        fold_min_tokens=60,
        mask_min_tokens=60,
        keep_above=1.0,
        keep_recent=0,
        keep_file_views=keep_file_views,
    )
    planner = HeuristicPlanner(tuning=tuning)
    index = index_messages(msgs)
    plan = planner.plan(index, msgs)
    return next((a.op for a in plan.actions if a.target == "function:tool:1"), None)


@pytest.mark.parametrize("shape", list(WHOLE_READS))
def test_the_latest_whole_view_of_a_file_stays_in_view(shape: str) -> None:
    msgs = viewed(*WHOLE_READS[shape])
    assert first_read_action(msgs, keep_file_views=False) in ("fold", "mask")
    assert first_read_action(msgs, keep_file_views=True) is None


@pytest.mark.parametrize("shape", list(PARTIAL_READS))
def test_a_partial_view_is_no_whole_view(shape: str) -> None:
    msgs = viewed(*PARTIAL_READS[shape])
    assert first_read_action(msgs, keep_file_views=True) in ("fold", "mask")
