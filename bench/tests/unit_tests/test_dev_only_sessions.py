"""Development-only sessions join the replay's development split and never its test split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from pacms_bench.replay_settings import dev_split
from pacms_bench.traces import TraceSession, default_traces_dir, load_mini_swe, load_traces

TRACES = default_traces_dir()
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"agent traces not at {TRACES}")

MINI_SWE_TEST = [
    "astropy__astropy-7746",
    "django__django-11019",
    "django__django-11630",
    "django__django-11797",
    "django__django-11815",
    "django__django-11964",
    "django__django-12125",
    "django__django-12284",
    "django__django-12453",
    "django__django-12708",
    "django__django-12983",
    "django__django-13551",
    "django__django-13925",
    "django__django-14017",
    "django__django-14672",
    "django__django-14752",
    "django__django-14997",
    "django__django-15252",
    "marshmallow-code__marshmallow-1359",
    "pvlib__pvlib-python-1154",
    "pylint-dev__astroid-1978",
    "sqlfluff__sqlfluff-2419",
]
"""The mini-swe test split (seed 0, 30% development) the results page reports."""


def _session(name: str, dev_only: bool = False) -> TraceSession:
    return TraceSession("mini-swe", name, (HumanMessage(name, id=f"{name}:0"),), dev_only)


@settings(max_examples=100, deadline=None)
@given(
    names=st.sets(st.text("abcdefgh", min_size=1, max_size=6), min_size=1, max_size=30),
    extra=st.sets(st.text("abcdefgh", min_size=1, max_size=6), max_size=10),
    seed=st.integers(0, 5),
)
def test_dev_only_sessions_leave_the_test_split_as_it_was(
    names: set[str], extra: set[str], seed: int
) -> None:
    plain = [_session(n) for n in sorted(names)]
    more = [_session(f"dev__{n}", dev_only=True) for n in sorted(extra)]
    dev_before, test_before = dev_split(plain, 0.3, seed)
    dev, test = dev_split([*more, *plain], 0.3, seed)
    assert [s.name for s in test] == [s.name for s in test_before]
    assert not any(s.dev_only for s in test)
    assert {s.name for s in dev} == {s.name for s in dev_before} | {s.name for s in more}


def test_a_dev_only_run_is_named_by_its_path_so_repeated_tasks_stay_apart(tmp_path: Path) -> None:
    run = {"messages": [{"role": "user", "content": "fix it"}]}
    for folder in ("run_a", "run_b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "task-1.traj.json").write_text(json.dumps(run))
    sessions, problems = load_mini_swe(tmp_path, dev_only=True)
    assert not problems
    assert [(s.name, s.dev_only) for s in sessions] == [
        ("run_a__task-1", True),
        ("run_b__task-1", True),
    ]
    assert [s.name for s in load_mini_swe(tmp_path)[0]] == ["task-1", "task-1"]


def test_a_missing_dev_only_folder_is_no_problem(tmp_path: Path) -> None:
    (tmp_path / "mini-swe-agent-deepseek-swebench").mkdir()
    (tmp_path / "mini-swe-agent-deepseek-swebench" / "t.traj.json").write_text(
        json.dumps({"messages": [{"role": "user", "content": "go"}]})
    )
    sessions, problems = load_traces(tmp_path, ["mini-swe"])
    assert [(s.name, s.dev_only) for s in sessions] == [("t", False)] and not problems


@needs_traces
def test_the_dev_folder_joins_development_and_the_test_split_is_unchanged() -> None:
    sessions, _ = load_traces(TRACES, ["mini-swe"])
    dev, test = dev_split(sessions, 0.3, 0)
    assert sorted(s.name for s in test) == MINI_SWE_TEST
    extra = [s for s in sessions if s.dev_only]
    assert len(extra) == 40 and all(s in dev for s in extra)
    assert len({s.name for s in sessions}) == len(sessions)
    assert len(dev) == 40 + 9
