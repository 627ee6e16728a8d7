import asyncio
import json
import os
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore
from pacms_fakes import span_messages, tool_round

from langchain_pacms.lifecycle import (
    Action,
    CommitRule,
    LifecycleHarness,
    Masking,
    Plan,
    SidecarStore,
    at_boundary,
    check_actions,
    create_lifecycle_node,
    index_messages,
    payload_of,
    provider_problems,
)
from langchain_pacms.lifecycle.boundary import TOOL_LOOP_STEPS, tool_steps
from langchain_pacms.lifecycle.commit import COMMIT_EVENT


class ScriptedPlanner:
    """Proposes the actions it is given (or a rejection); counts its calls."""

    name = "scripted"

    def __init__(self, *plans: Plan) -> None:
        self.plans = list(plans)
        self.calls = 0

    def plan(self, index, messages) -> Plan:
        self.calls += 1
        return self.plans.pop(0) if self.plans else Plan("nothing")

    async def aplan(self, index, messages) -> Plan:
        return self.plan(index, messages)


def _call(cid: str, name: str = "read", **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": cid}


def history(size: int = 400, log: int = 120) -> list[BaseMessage]:
    return [
        SystemMessage("You are a coder.", id="s"),
        HumanMessage("Fix the bug in src/app.py", id="h1"),
        AIMessage("", tool_calls=[_call("c1", path="src/app.py")], id="a1"),
        ToolMessage("x = 1  # line\n" * size, tool_call_id="c1", id="t1"),
        AIMessage("", tool_calls=[_call("c2", "shell", cmd="pytest")], id="a2"),
        ToolMessage("test ok\n" * log, tool_call_id="c2", id="t2"),
        AIMessage("Fixed at line 3.", id="a3"),
        HumanMessage("Now the docs", id="h2"),
    ]


def fold(target: str, reason: str = "stable body") -> Plan:
    return Plan("fold", (Action("fold", target, reason),))


# -- validation -----------------------------------------------------------------------------


def test_check_drops_invalid_targets_with_reasons():
    msgs = [
        *history(),
        AIMessage("", tool_calls=[_call("c3", path="README.md")], id="a4"),
        ToolMessage("# readme", tool_call_id="c3", id="t3"),
    ]
    msgs.insert(2, HumanMessage("no id here"))
    index = index_messages(msgs)
    checked = check_actions(
        msgs,
        index,
        [
            Action("fold", "function:tool:1"),
            Action("prune", "system:1"),
            Action("prune", "function:tool:3"),  # latest turn
            Action("fold", "function:tool:99"),
            Action("mask", "conversation:user:2"),  # the message without id
            Action("prune", "function:tool:1"),  # overlaps the fold
            Action("fold", "function:tool:1"),  # duplicate: silently one
            Action("squash", "function:tool:2"),  # type: ignore[arg-type]
        ],
    )
    assert [(a.op, a.target) for a in checked.accepted] == [("fold", "function:tool:1")]
    reasons = {r.action.target + ":" + r.action.op: r.reason for r in checked.rejected}
    assert reasons == {
        "system:1:prune": "the system prompt is never edited",
        "function:tool:3:prune": "part of the latest turn",
        "function:tool:99:fold": "unknown object id",
        "conversation:user:2:mask": (
            "a message without an id cannot be replaced or removed in state"
        ),
        "function:tool:1:prune": "overlaps fold of the same object (fold kept)",
        "function:tool:2:squash": "unknown op 'squash' (expected fold, mask or prune)",
    }
    assert checked.tokens_saved > 0 and provider_problems(checked.result.messages) == []


def test_check_rejects_what_would_break_the_first_user_message_rule():
    msgs = history()
    checked = check_actions(
        msgs,
        index_messages(msgs),
        [Action("prune", "conversation:user:1"), Action("mask", "function:tool:2")],
    )
    assert [a.target for a in checked.accepted] == ["function:tool:2"]
    (rejection,) = checked.rejected
    assert rejection.reason.startswith("would leave an invalid history: first non-system")


def test_check_refuses_double_fold_and_mask_of_a_folded_object():
    msgs = history()
    harness = LifecycleHarness(ScriptedPlanner(fold("function:tool:1")))
    commit = harness.step(msgs, thread_id="t")
    again = index_messages(commit.messages, known_ids=commit.known_ids)
    checked = check_actions(
        commit.messages,
        again,
        [Action("fold", "function:tool:1"), Action("mask", "function:tool:1")],
    )
    assert checked.accepted == ()
    assert sorted(r.reason for r in checked.rejected) == ["already folded", "already folded"]


# -- boundaries, staging and the cache-aware threshold ------------------------------------------


def test_boundaries():
    msgs = history()
    assert at_boundary(msgs) and at_boundary(msgs[:7])
    assert not at_boundary(msgs[:3]) and not at_boundary(msgs[:4])
    assert at_boundary(msgs[:4], "tool") and not at_boundary(msgs[:3], "tool")
    assert not at_boundary([])
    with pytest.raises(ValueError, match="boundary"):
        at_boundary(msgs, "message")  # type: ignore[arg-type]


def test_small_plans_stage_until_the_threshold_then_commit_once():
    msgs = history(size=20)
    total = index_messages(msgs).active_tokens
    planner = ScriptedPlanner(
        Plan("prune the note", (Action("prune", "conversation:assistant:1", "done"),)),
        Plan("mask the log", (Action("mask", "function:tool:2", "noisy"),)),
        fold("function:tool:1"),
    )
    harness = LifecycleHarness(planner, commit=CommitRule(threshold=0.3))
    assert harness.step(msgs, thread_id="t") is None  # 1% of the view: not worth a cache break
    assert [a.op for a in harness.staged("t")] == ["prune"]
    assert harness.step(msgs, thread_id="t") is None  # 22%: still staged
    assert [a.op for a in harness.staged("t")] == ["prune", "mask"]
    commit = harness.step(msgs, thread_id="t")  # with the fold, above 30%: one commit
    assert commit is not None and commit.reason == "threshold"
    assert [a.op for a in commit.actions] == ["prune", "mask", "fold"]
    assert commit.tokens_before == total and commit.share >= 0.3
    assert harness.staged("t") == ()
    assert harness.stats.commits == 1 and harness.stats.plans == 3
    assert harness.stats.actions_accepted == 3


def test_a_fold_that_saves_nothing_is_rejected():
    msgs = history(size=2)
    checked = check_actions(msgs, index_messages(msgs), [Action("fold", "function:tool:1")])
    assert checked.accepted == ()
    assert checked.rejected[0].reason == "saves nothing (the folded text is not smaller)"


def test_threshold_blocks_a_commit_that_does_not_pay_and_max_active_tokens_forces_it():
    msgs = history(size=20)
    plan = Plan("prune note", (Action("prune", "conversation:assistant:1", "obsolete"),))
    lazy = LifecycleHarness(ScriptedPlanner(plan), commit=CommitRule(threshold=0.9))
    assert lazy.step(msgs, thread_id="t") is None and len(lazy.staged("t")) == 1
    forced = LifecycleHarness(
        ScriptedPlanner(plan), commit=CommitRule(threshold=0.9, max_active_tokens=20)
    )
    commit = forced.step(msgs, thread_id="t")
    assert commit is not None and commit.reason == "max_active_tokens"
    assert [m.id for m in commit.messages] == ["s", "h1", "a1", "t1", "a2", "t2", "h2"]


def test_no_commit_off_a_boundary_and_staged_actions_are_rechecked():
    msgs = history()
    harness = LifecycleHarness(ScriptedPlanner(fold("function:tool:1")))
    assert harness.step(msgs, thread_id="t") is not None  # plans and commits at the boundary
    planner = ScriptedPlanner(fold("function:tool:1"))
    harness = LifecycleHarness(planner, commit=CommitRule(boundary="turn"))
    mid = history()[:5]  # a tool call in flight: not a boundary, no plan asked
    assert harness.step(mid, thread_id="t") is None and planner.calls == 0
    assert harness.step(msgs, thread_id="t") is not None and planner.calls == 1


def test_a_rejected_plan_is_counted_and_changes_nothing():
    harness = LifecycleHarness(ScriptedPlanner(Plan.rejection("malformed output", planner="x")))
    assert harness.step(history(), thread_id="t") is None
    assert harness.stats.plans_rejected == 1
    assert harness.stats.rejections == {"plan rejected: malformed output": 1}


# -- commit: sidecars first, state updates, events, log -------------------------------------------


class BrokenStore(InMemoryStore):
    def batch(self, ops):  # type: ignore[override]
        if any(type(op).__name__ == "PutOp" for op in ops):
            raise OSError("disk full")
        return super().batch(ops)


def test_a_failed_sidecar_write_means_no_commit_and_nothing_lost():
    planner = ScriptedPlanner(fold("function:tool:1"))
    harness = LifecycleHarness(planner, store=BrokenStore())
    assert harness.step(history(), thread_id="t") is None
    assert harness.stats.commit_failures == 1 and harness.stats.commits == 0
    assert [a.target for a in harness.staged("t")] == ["function:tool:1"]


def test_commit_lands_as_a_langgraph_state_update_and_payloads_are_recoverable():
    store = InMemoryStore()
    plan = Plan(
        "fold the read, prune the log",
        (
            Action("fold", "function:tool:1", "stable body"),
            Action("prune", "function:tool:2", "superseded"),
        ),
    )
    harness = LifecycleHarness(ScriptedPlanner(plan), store=store, commit=CommitRule(threshold=0.3))
    commits = []

    def lifecycle(state: MessagesState) -> dict[str, Any]:
        commit = harness.step(state["messages"], thread_id="t")
        commits.append(commit)
        return {"messages": commit.updates} if commit else {}

    graph = StateGraph(MessagesState)
    graph.add_node("lifecycle", lifecycle)
    graph.add_edge(START, "lifecycle")
    graph.add_edge("lifecycle", END)
    original = history()
    out = graph.compile().invoke({"messages": original})
    (commit,) = commits
    assert [m.id for m in out["messages"]] == [m.id for m in commit.messages]
    assert [m.content for m in out["messages"]] == [m.content for m in commit.messages]
    assert [m.id for m in out["messages"]] == ["s", "h1", "a1", "t1", "a3", "h2"]
    assert provider_problems(out["messages"]) == []
    assert SidecarStore(store, "t").get("function:tool:1").payload == original[3].content
    audit = harness.audit("t").get("function:tool:2")
    kept = span_messages(audit.payload)  # the whole span: call and result
    assert [m.id for m in kept] == ["a2", "t2"] and kept[1].content == original[5].content
    assert kept[0].tool_calls == original[4].tool_calls and audit.description.startswith("prune:")
    assert harness.sidecars("t").list_ids() == ["function:tool:1"]
    assert commit.share > 0.3 and harness.stats.tokens_removed == (
        commit.tokens_before - commit.tokens_after
    )


def test_commit_event_and_jsonl_log(tmp_path):
    seen: list[tuple[str, Any]] = []

    class Handler(BaseCallbackHandler):
        def on_custom_event(self, name, data, **kwargs):
            seen.append((name, data))

    log = tmp_path / "life.jsonl"
    harness = LifecycleHarness(ScriptedPlanner(fold("function:tool:1")), log=log)
    step = RunnableLambda(lambda msgs: harness.step(msgs, thread_id="t"))
    commit = step.invoke(history(), config={"callbacks": [Handler()]})
    assert commit is not None
    assert [name for name, _ in seen] == [COMMIT_EVENT]
    event = seen[0][1]
    assert event["actions"] == {"fold": ["function:tool:1"]} and event["reason"] == "threshold"
    (line,) = log.read_text().splitlines()
    assert json.loads(line)["sidecars"] == ["function:tool:1"]


def test_a_log_line_naming_a_file_that_is_not_utf8_keeps_the_commit(tmp_path):
    """A reason holding a lone surrogate (a file name as os.listdir gives it) is logged as its
    JSON escape; it used to raise from the step after the sidecars were written."""
    name = os.fsdecode(b"src/caf\xe9.py")
    log = tmp_path / "life.jsonl"
    harness = LifecycleHarness(
        ScriptedPlanner(fold("function:tool:1", f"{name} read again")), log=log
    )
    commit = harness.step(history(), thread_id="t")
    assert commit is not None
    (line,) = log.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["reasons"] == {"function:tool:1": f"{name} read again"}
    with pytest.raises(ValueError, match="head must be an int >= 0"):
        Masking(head=100.5)  # type: ignore[arg-type]


def test_a_staged_action_goes_when_its_id_names_another_object_after_an_edit():
    """Ids are positions until a commit names them: a prune staged on the first round must not
    prune the round that takes its id once the first is removed from the history."""
    first = history(size=20)  # function:tool:1: a small read; function:tool:2: a long log
    harness = LifecycleHarness(
        ScriptedPlanner(Plan("prune", (Action("prune", "function:tool:1", "superseded"),))),
        commit=CommitRule(threshold=0.5),
    )
    assert harness.step(first, thread_id="t") is None  # staged: too small a saving
    assert [a.target for a in harness.staged("t")] == ["function:tool:1"]
    edited = [m for m in first if m.id not in ("a1", "t1")]  # a user removes the first round
    assert index_messages(edited).by_id["function:tool:1"].lineage == ("a2", "t2")
    assert harness.step(edited, thread_id="t") is None  # the log is not pruned in its place
    assert harness.staged("t") == ()


def test_reactivate_brings_the_exact_payload_back():
    original = history()
    original[3] = original[3].model_copy(update={"content": "naïve ✓ \x00 end" * 300})
    harness = LifecycleHarness(ScriptedPlanner(fold("function:tool:1")))
    commit = harness.step(original, thread_id="t")
    (restored,) = harness.reactivate(
        commit.messages, "function:tool:1", thread_id="t", known_ids=commit.known_ids
    )
    assert restored.id == "t1" and restored.content == original[3].content
    back = [restored if m.id == restored.id else m for m in commit.messages]
    index = index_messages(back)
    assert payload_of(back, index.by_id["function:tool:1"].indices) == original[3].content
    assert index.by_id["function:tool:1"].state == "active"


def test_astep_matches_step():
    plan = Plan("fold", (Action("fold", "function:tool:1"), Action("mask", "function:tool:2")))
    sync = LifecycleHarness(ScriptedPlanner(plan)).step(history(), thread_id="t")
    harness = LifecycleHarness(ScriptedPlanner(plan))
    done = asyncio.run(harness.astep(history(), thread_id="t"))
    assert sync is not None and done is not None
    assert [m.content for m in done.messages] == [m.content for m in sync.messages]
    restored = asyncio.run(harness.areactivate(done.messages, "function:tool:1", thread_id="t"))
    assert restored[0].content == history()[3].content


def test_bad_options_fail_at_construction():
    planner = ScriptedPlanner()
    with pytest.raises(TypeError, match="planner"):
        LifecycleHarness(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threshold"):
        CommitRule(threshold=1.5)
    with pytest.raises(ValueError, match="max_active_tokens"):
        CommitRule(max_active_tokens=0)
    with pytest.raises(ValueError, match="boundary"):
        CommitRule(boundary="always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="head"):
        Masking(head=-1)
    with pytest.raises(TypeError, match="commit must be a CommitRule"):
        LifecycleHarness(planner, commit=0.3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="masking must be a Masking"):
        LifecycleHarness(planner, masking=CommitRule())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store must be a BaseStore, got str"):
        LifecycleHarness(planner, store="sqlite:///sidecars.db")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store must be a BaseStore"):
        create_lifecycle_node(store={})  # type: ignore[arg-type]
    assert "scripted" in repr(LifecycleHarness(planner))


def test_tool_boundary_plans_inside_one_long_task():
    msgs = history()[:6]  # one task, two tool spans, the run still going
    assert index_messages(msgs).by_id["function:tool:1"].latest  # the whole run is the turn
    step = index_messages(msgs, latest="step")
    assert [o.id for o in step.objects if o.latest] == ["conversation:user:1", "function:tool:2"]
    with pytest.raises(ValueError, match="latest"):
        index_messages(msgs, latest="call")  # type: ignore[arg-type]
    turn = LifecycleHarness(ScriptedPlanner(fold("function:tool:1")))
    assert turn.step(msgs, thread_id="t") is None  # not a turn boundary
    tool = LifecycleHarness(
        ScriptedPlanner(fold("function:tool:1")), commit=CommitRule(boundary="tool")
    )
    commit = tool.step(msgs, thread_id="t")
    assert commit is not None and [a.target for a in commit.actions] == ["function:tool:1"]
    assert provider_problems(commit.messages) == []


def _loop(steps: int) -> list[BaseMessage]:
    msgs: list[BaseMessage] = [HumanMessage("fix the bug", id="h")]
    for n in range(steps):
        hits = "\n".join(f"src/pkg/mod_{k}.py:{k + 3}: name_{n} = {k}" for k in range(40))
        msgs += tool_round("bash", {"command": f"grep -rn name_{n} src"}, hits, n)
    return msgs


def test_auto_boundary_is_the_turn_in_a_chat_and_the_tool_in_a_long_loop():
    short, long = _loop(TOOL_LOOP_STEPS - 1), _loop(TOOL_LOOP_STEPS)
    assert tool_steps(long) == TOOL_LOOP_STEPS
    assert not at_boundary(short) and at_boundary(short, "tool")
    assert at_boundary(long) and not at_boundary(long, "turn")
    # a new user turn resets the count: a chat with a few tools per turn stays on the turn
    assert tool_steps([*long, AIMessage("done", id="x"), HumanMessage("next", id="h2")]) == 0


def test_the_default_harness_commits_inside_a_single_task_tool_loop():
    from langchain_pacms.lifecycle import HeuristicPlanner

    harness = LifecycleHarness()  # every default, the planner's too
    assert isinstance(harness.planner, HeuristicPlanner)
    commits = [harness.step(_loop(n), thread_id="t") for n in range(1, 9)]
    assert commits[: TOOL_LOOP_STEPS - 1] == [None] * (TOOL_LOOP_STEPS - 1)
    assert any(c is not None for c in commits[TOOL_LOOP_STEPS - 1 :])
    named = LifecycleHarness(HeuristicPlanner())
    assert [named.step(_loop(n), thread_id="t") for n in range(1, 9)] == commits
    turn = LifecycleHarness(HeuristicPlanner(), commit=CommitRule(boundary="turn"))
    assert all(turn.step(_loop(n), thread_id="t") is None for n in range(1, 9))


def test_a_thread_with_nothing_staged_leaves_no_state_in_the_harness():
    harness = LifecycleHarness()
    for t in range(50):
        harness.step(_loop(TOOL_LOOP_STEPS + 2), thread_id=f"t{t}")
    assert harness._threads == {}  # each thread committed and had nothing left staged
    waiting = LifecycleHarness(commit=CommitRule(threshold=0.99))  # nothing pays: all stay staged
    waiting.step(_loop(TOOL_LOOP_STEPS + 2), thread_id="w")
    assert waiting.staged("w") and "w" in waiting._threads


def test_a_fork_recovers_its_own_fold_after_it_pruned_the_run_s_first_reply():
    # both branches of one thread fold function:tool:3 (other outputs); branch A pruned the
    # first reply before its fold, branch B after: the run's name must not follow the prune
    from langgraph.graph.message import add_messages

    from langchain_pacms.lifecycle import IDS_KEY, make_recover_tool

    def rnd(n: int, out: str, p: str = "") -> list[BaseMessage]:
        call = _call(f"{p}c{n}", "bash", command=f"run {n}")
        return [
            AIMessage("", tool_calls=[call], id=f"{p}a{n}"),
            ToolMessage(out, tool_call_id=f"{p}c{n}", id=f"{p}t{n}"),
        ]

    store, planner = InMemoryStore(), ScriptedPlanner()
    harness = LifecycleHarness(planner, store=store, commit=CommitRule(boundary="turn"))

    def step(state: dict[str, Any], *actions: Action) -> dict[str, Any]:
        planner.plans.append(Plan("scripted", actions, planner="scripted"))
        commit = harness.step(state["messages"], thread_id="t", known_ids=state["known"])
        assert commit is not None
        return {
            "messages": add_messages(state["messages"], commit.updates),
            "known": commit.known_ids,
        }

    common = [HumanMessage("task", id="h0"), *rnd(1, "one " * 200), *rnd(2, "two " * 200)]
    ours, theirs = ("\n".join(f"/srv/branch_{b}/file_{i}.py" for i in range(200)) for b in "BA")
    a = step(
        {"messages": [*common, HumanMessage("q1", id="ha1")], "known": None},
        Action("prune", "function:tool:1"),
    )
    a["messages"] = [*a["messages"], *rnd(3, theirs, "A"), HumanMessage("q2", id="ha2")]
    step(a, Action("fold", "function:tool:3"))
    b = {"messages": [*common, *rnd(3, ours, "B"), HumanMessage("q1b", id="hb1")], "known": None}
    b = step(b, Action("fold", "function:tool:3"))  # while the first reply is still there
    b["messages"] = [*b["messages"], HumanMessage("q2b", id="hb2")]
    b = step(b, Action("prune", "function:tool:1"), Action("prune", "function:tool:3"))
    state = {"messages": b["messages"], IDS_KEY: b["known"]}
    call = {
        "type": "tool_call",
        "name": "recover_context",
        "id": "r1",
        "args": {"object_id": "function:tool:3", "state": state},
    }
    out = make_recover_tool(store).invoke(call, {"configurable": {"thread_id": "t"}})
    assert out.content == ours  # it was branch A's
