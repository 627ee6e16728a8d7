"""Trace loaders: real files from ../shared/data/agent-traces (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from langchain_pacms.eval.traces import (
    load_all,
    load_mini_swe_agent,
    load_swe_agent,
    session_from_openai,
)

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "agent-traces"
needs_data = pytest.mark.skipif(
    not TRACES.is_dir(),
    reason=f"agent traces not found at {TRACES} (see docs/results/lifecycle.md)",
)


def _paired(messages: list) -> bool:
    open_ids: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            open_ids = {str(c["id"]) for c in m.tool_calls}
        elif isinstance(m, ToolMessage):
            if m.tool_call_id not in open_ids:
                return False
            open_ids.discard(m.tool_call_id)
    return True


@pytest.fixture(scope="module")
def loaded() -> dict:
    return load_all(TRACES)


@needs_data
def test_all_three_sets_load_with_counts_from_source(loaded: dict) -> None:
    assert {k: len(v.sessions) for k, v in loaded.items()} == {
        "tau-bench": 200,
        "mini-swe-agent": 31,
        "swe-agent": 22,
    }
    assert all(not v.problems for v in loaded.values())
    assert sum(s.tool_spans for s in loaded["tau-bench"].sessions) == 1164
    assert sum(s.tool_spans for s in loaded["mini-swe-agent"].sessions) == 2312


@needs_data
def test_every_message_has_a_unique_id_and_tool_outputs_pair(loaded: dict) -> None:
    for result in loaded.values():
        for s in result.sessions:
            ids = [m.id for m in s.messages]
            assert all(ids) and len(set(ids)) == len(ids)
            assert _paired(s.messages), s.session_id


@needs_data
def test_swe_agent_text_actions_become_bash_calls(loaded: dict) -> None:
    s = next(x for x in loaded["swe-agent"].sessions if x.session_id.endswith("pydicom-1458"))
    calls = [c for m in s.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert len(calls) == 12
    assert {c["name"] for c in calls} == {"bash"}
    assert all(isinstance(c["args"]["command"], str) and c["args"]["command"] for c in calls)


@needs_data
def test_mini_swe_agent_keeps_the_exact_command() -> None:
    folder = TRACES / "mini-swe-agent-deepseek-swebench"
    result = load_mini_swe_agent(folder / "deepseek_chat_test_1-100")
    s = next(x for x in result.sessions if x.session_id == "astropy__astropy-7746")
    first = next(m for m in s.messages if isinstance(m, AIMessage) and m.tool_calls)
    assert first.tool_calls[0]["args"] == {"command": "pwd && ls -la"}


def test_unreadable_sessions_are_reported_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "good.traj").write_text(
        json.dumps(
            {
                "history": [{"role": "system", "content": "s"}],
                "trajectory": [{"action": "ls", "observation": "a", "thought": "t"}],
            }
        )
    )
    (tmp_path / "broken.traj").write_text("{not json")
    (tmp_path / "empty.traj").write_text(json.dumps({"history": []}))
    result = load_swe_agent(tmp_path)
    assert [s.session_id for s in result.sessions] == ["good"]
    assert sorted(p[0] for p in result.problems) == ["broken", "empty"]


def test_orphan_tool_output_is_an_error() -> None:
    with pytest.raises(ValueError, match="answers no call"):
        session_from_openai("x", [{"role": "tool", "content": "o", "tool_call_id": "c"}])


def test_missing_folders_are_problems(tmp_path: Path) -> None:
    result = load_all(tmp_path)
    assert all(len(v.problems) == 1 and not v.sessions for v in result.values())
