"""Trace loaders on the real files of ../shared/data/agent-traces (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage

from pacms_bench.traces import (
    default_traces_dir,
    load_mini_swe,
    load_swe_agent,
    load_tau_bench,
    load_traces,
)

TRACES = default_traces_dir()
needs_data = pytest.mark.skipif(not TRACES.is_dir(), reason=f"agent traces not found at {TRACES}")


def _paired(messages: tuple) -> bool:
    """Every tool output answers a call of the assistant message before it, once."""
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
def loaded() -> dict[str, list]:
    sessions, problems = load_traces(TRACES)
    by_set: dict[str, list] = {}
    for s in sessions:
        by_set.setdefault(s.dataset, []).append(s)
    by_set["problems"] = problems
    return by_set


@needs_data
def test_counts_match_the_source_notes(loaded: dict[str, list]) -> None:
    assert len(loaded["tau-bench"]) == 200
    assert sum(s.tool_calls for s in loaded["tau-bench"]) == 1164
    mini = [s for s in loaded["mini-swe"] if not s.dev_only]
    assert len(mini) == 31
    assert sum(s.tool_calls for s in mini) == 2312
    # 22 files: every one is either loaded or reported with a reason
    assert len(loaded["swe-agent"]) + len(loaded["problems"]) == 22
    assert all(reason for _, reason in loaded["problems"])


@needs_data
def test_ids_are_unique_and_every_output_answers_its_call(loaded: dict[str, list]) -> None:
    for name in ("tau-bench", "mini-swe", "swe-agent"):
        for s in loaded[name]:
            ids = [m.id for m in s.messages]
            assert all(ids) and len(set(ids)) == len(ids), s.name
            assert _paired(s.messages), s.name


@needs_data
def test_tau_bench_keeps_the_policy_prompt_and_repeated_call_ids_get_fresh_ones() -> None:
    sessions, _ = load_tau_bench(TRACES / "tau-bench-airline-gpt4o" / "gpt-4o-airline.json")
    first = sessions[0]
    assert isinstance(first.messages[0], SystemMessage)
    assert len(str(first.messages[0].content)) > 5_000
    call_ids = [
        str(c["id"])
        for s in sessions
        for m in s.messages
        if isinstance(m, AIMessage)
        for c in m.tool_calls
    ]
    assert len(call_ids) == len(set(call_ids)) == 1164


@needs_data
def test_mini_swe_keeps_the_exact_command_and_leaves_out_the_exit_message() -> None:
    sessions, problems = load_mini_swe(TRACES / "mini-swe-agent-deepseek-swebench")
    assert not problems
    s = next(x for x in sessions if x.name == "astropy__astropy-7746")
    first = next(m for m in s.messages if isinstance(m, AIMessage) and m.tool_calls)
    assert first.tool_calls[0]["args"] == {"command": "pwd && ls -la"}
    assert isinstance(s.messages[-1], ToolMessage)  # the unanswered submit call is dropped


@needs_data
def test_swe_agent_text_actions_become_bash_calls() -> None:
    sessions, _ = load_swe_agent(TRACES / "swe-agent-demos")
    s = next(x for x in sessions if x.name.endswith("pydicom__pydicom-1458"))
    calls = [c for m in s.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert len(calls) == 12
    assert {c["name"] for c in calls} == {"bash"}
    assert all(c["args"]["command"] for c in calls)


def test_unreadable_files_are_reported_not_skipped(tmp_path: Path) -> None:
    good = {
        "history": [{"role": "user", "content": "fix it"}],
        "trajectory": [{"action": "ls", "observation": "a.py", "thought": "look"}],
    }
    (tmp_path / "good.traj").write_text(json.dumps(good))
    (tmp_path / "broken.traj").write_text("{not json")
    (tmp_path / "empty.traj").write_text(json.dumps({"history": []}))
    sessions, problems = load_swe_agent(tmp_path)
    assert [s.name for s in sessions] == ["good"]
    assert sorted(Path(p).name for p, _ in problems) == ["broken.traj", "empty.traj"]


def test_an_orphan_tool_result_makes_the_session_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            [
                {
                    "task_id": 1,
                    "trial": 0,
                    "traj": [{"role": "tool", "content": "x", "tool_call_id": "c"}],
                },
                {"task_id": 2, "trial": 0, "traj": [{"role": "user", "content": "hi"}]},
            ]
        )
    )
    sessions, problems = load_tau_bench(path)
    assert [s.name for s in sessions] == ["task2-trial0"]
    assert problems[0][0] == "task1-trial0" and "no open call" in problems[0][1]


def test_missing_folders_are_reported(tmp_path: Path) -> None:
    sessions, problems = load_traces(tmp_path)
    assert sessions == [] and len(problems) == 3


def test_unknown_data_set_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown data set"):
        load_traces(Path("."), datasets=["nope"])
