"""The agent examples run offline (fake model) and print what they claim to show."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from script_runs import run_python

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@functools.cache
def run_example(name: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OLLAMA_HOST"}
    return run_python(EXAMPLES / name, env=env)


@pytest.mark.parametrize("name", ["langgraph_agent_hook.py", "middleware_agent.py"])
def test_agent_example_runs_offline(name):
    out = run_example(name)
    assert "offline fake model" in out
    assert out.count("[pacms] model call") == 8  # one selection per model call
    assert "FELL BACK" not in out
    final = [line for line in out.splitlines() if line.startswith("assistant:")][-1]
    assert "ROT-5521" in final  # the early fact survived the budget
    assert "nothing removed" in out
    assert "Relevant memories" in out or "memories sent as one 'Relevant memories'" in out


def test_hook_example_reports_dropped_tool_outputs():
    out = run_example("langgraph_agent_hook.py")
    assert "left out of the last call: tool" in out
    assert "selection log: 8 records" in out
    assert "Ada is on call for the billing service" in out


def test_middleware_example_shows_the_request():
    out = run_example("middleware_agent.py")
    lines = out.splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith("the last model request")))
    request = lines[start + 1 :]
    assert request[0].split()[0] == "SystemMessage"
    assert "Relevant memories:" in request[1]
    calls = [ln for ln in request if ln.split()[0] == "AIMessage" and " -> " in ln]
    assert calls and "ToolMessage" in "".join(request)  # a tool round, call and result


def test_lifecycle_with_selection_example_folds_and_recovers():
    out = run_example("lifecycle_with_selection.py")
    assert out.count("[lifecycle] commit (threshold)") >= 1
    assert out.count("[pacms] model call") == 8
    assert "recover_context returned the original log byte for byte: True" in out
    final = [line for line in out.splitlines() if line.startswith("assistant:")][-1]
    assert "ERROR billing: disk quota exceeded on /var/data" in final
    assert "read_service_log   [folded: " in out


def test_tool_loop_example_keeps_the_budget_and_recovers_a_stubbed_read():
    out = run_example("tool_loop_fold_stubs.py")
    assert "model calls: 62," in out and "one human message" in out
    largest = int(out.split("largest request ")[1].split()[0])
    assert largest <= 6000
    assert "stub floor True" in out
    assert "module 0 recovered byte for byte: True" in out


def test_coding_agent_example_commits_with_the_defaults_and_recovers_exactly():
    out = run_example("coding_agent_defaults.py")
    commits = int(out.split("commits: ")[1].split(";")[0])
    assert commits >= 1  # the no-argument middleware commits inside a single-task tool loop
    assert "folded: none" not in out
    assert "byte-exact" in out and "NOT exact" not in out
