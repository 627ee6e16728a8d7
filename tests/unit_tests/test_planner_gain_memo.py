"""The planner remembers each action's gain, and plans exactly as it would without the memo."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_pacms.lifecycle import HeuristicPlanner, PlannerTuning, index_messages


def _history(steps: list[tuple[str, int]], mention: str = "") -> list[BaseMessage]:
    msgs: list[BaseMessage] = [HumanMessage(f"fix the parser {mention}".strip(), id="h")]
    for k, (command, size) in enumerate(steps):
        call = {"name": "bash", "args": {"command": command}, "id": f"c{k}"}
        body = "\n".join(
            f"src/pkg/mod_{k}_{j}.py:{j}: value = compute(ID{k:02}{j:03}X)" for j in range(size)
        )
        msgs += [
            AIMessage(f"step {k}", tool_calls=[call], id=f"a{k}"),
            ToolMessage(body, tool_call_id=f"c{k}", id=f"t{k}"),
        ]
    return msgs


def _plan(planner: HeuristicPlanner, msgs: list[BaseMessage]) -> list[tuple[str, str, str]]:
    plan = planner.plan(index_messages(msgs, latest="step"), msgs)
    return [(a.op, a.target, a.reason) for a in plan.actions]


_COMMANDS = st.sampled_from(["grep -rn value src", "python run.py", "cat src/a.py", "ls src"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_COMMANDS, st.integers(1, 30)), min_size=3, max_size=12))
def test_a_warm_planner_plans_every_prefix_as_a_fresh_one(steps: list[tuple[str, int]]) -> None:
    warm = HeuristicPlanner()
    msgs = _history(steps)
    for end in range(3, len(msgs) + 1):
        prefix = msgs[:end]
        assert _plan(warm, prefix) == _plan(
            HeuristicPlanner(tuning=PlannerTuning(cache_size=0)), prefix
        )


def test_a_value_shown_elsewhere_later_changes_the_remembered_gain() -> None:
    planner = HeuristicPlanner()
    steps = [("grep -rn value src", 3), ("python run.py", 2), ("ls", 1)]
    plain = _history(steps)
    _plan(planner, plain)
    # the same tool messages, now under a task that names the folded body's values: its stub
    # leaves them out, so its gain differs; the memo must not return the old one
    named = [HumanMessage("fix " + " ".join(f"ID00{j:03}X" for j in range(3)), id="h"), *plain[1:]]
    assert _plan(planner, named) == _plan(
        HeuristicPlanner(tuning=PlannerTuning(cache_size=0)), named
    )


def _lookup(prose: str) -> list[BaseMessage]:
    """A tool loop whose first call reads a large config; ``prose`` is that call's text."""
    body = "\n".join(f"entry {i}: value {i * 7} unit alpha beta gamma" for i in range(120))
    call = {"name": "read_config", "args": {"name": "cfg"}, "id": "c1"}
    msgs: list[BaseMessage] = [
        HumanMessage("Find the staging server port in the deployment inventory"),
        AIMessage(prose, tool_calls=[call]),
        ToolMessage(body, tool_call_id="c1"),
    ]
    for k in range(2, 6):
        step = {"name": "list", "args": {"n": k}, "id": f"c{k}"}
        msgs += [AIMessage("", tool_calls=[step]), ToolMessage(f"item {k}", tool_call_id=f"c{k}")]
    return msgs


def test_a_planner_shared_by_two_threads_plans_each_as_a_fresh_one() -> None:
    # the same call and result under different prose: the words scored for relevance differ,
    # so what one thread's history taught the planner must not decide the other's plan
    tuning = PlannerTuning(keep_above=0.6)
    elsewhere, named = (
        _lookup("Looking elsewhere first."),
        _lookup("Reading the staging server port from the deployment inventory."),
    )
    assert [a[:2] for a in _plan(HeuristicPlanner(tuning=tuning), elsewhere)] == [
        ("fold", "function:tool:1")
    ]
    assert _plan(HeuristicPlanner(tuning=tuning), named) == []
    shared = HeuristicPlanner(tuning=tuning)
    _plan(shared, elsewhere)
    assert _plan(shared, named) == []


_PROSE = st.lists(
    st.sampled_from(["staging", "server", "port", "inventory", "looking", "elsewhere", "now"]),
    max_size=6,
).map(" ".join)


@settings(max_examples=40, deadline=None)
@given(st.lists(_PROSE, min_size=2, max_size=5))
def test_a_shared_planner_plans_every_thread_as_a_fresh_one(proses: list[str]) -> None:
    tuning = PlannerTuning(keep_above=0.6)
    shared = HeuristicPlanner(tuning=tuning)
    for prose in proses:
        msgs = _lookup(prose)
        assert _plan(shared, msgs) == _plan(HeuristicPlanner(tuning=tuning), msgs)
