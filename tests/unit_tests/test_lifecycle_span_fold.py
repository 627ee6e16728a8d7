"""Span folds, fold stubs that do not repeat visible locators, and plans without idle actions."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore
from pacms_fakes import tool_round

from langchain_pacms.lifecycle import (
    Action,
    CommitRule,
    HeuristicPlanner,
    LifecycleHarness,
    PlannerTuning,
    apply_actions,
    check_actions,
    index_messages,
    provider_problems,
    span_payload,
)
from langchain_pacms.lifecycle.actions import action_gain
from langchain_pacms.lifecycle.fold import visible_locators
from langchain_pacms.lifecycle.objects import NUMBERS_KEY, OBJECT_KEY
from langchain_pacms.lifecycle.rewrite import LONG_ARGUMENT
from langchain_pacms.messages.runs import RUN_KEY, run_thread

SCRIPT = (
    "cat > repro.py << 'EOF'\n"
    + "\n".join(f"print('case {n}', compute({n}))" for n in range(40))
    + "\nEOF"
)


def _history() -> list[BaseMessage]:
    write = {"name": "bash", "args": {"command": SCRIPT, "timeout": "30"}, "id": "c1"}
    run = {"name": "bash", "args": {"command": "python repro.py"}, "id": "c2"}
    listing = "\n".join(f"src/pkg/module_{n}.py  build_7f3a{n:02d}" for n in range(30))
    return [
        SystemMessage("You fix bugs in the repository.", id="s"),
        HumanMessage("Fix the crash in src/pkg/module_3.py", id="h1"),
        AIMessage(
            "I will write a script that reproduces the crash first, then run it.",
            tool_calls=[write],
            id="a1",
        ),
        ToolMessage(
            "<returncode>0</returncode>\n<output>\n" + listing + "\n</output>",
            tool_call_id="c1",
            id="t1",
        ),
        AIMessage("Now run it.", tool_calls=[run], id="a2"),
        ToolMessage("case 0 ok", tool_call_id="c2", id="t2"),
    ]


def test_a_span_fold_keeps_the_call_valid_and_moves_its_text_and_long_arguments() -> None:
    msgs = _history()
    index = index_messages(msgs, latest="step")
    result = apply_actions(msgs, index, [Action("fold", "function:tool:1", scope="span")])
    call, stub = result.messages[2], result.messages[3]
    assert isinstance(call, AIMessage) and call.content == ""
    args = call.tool_calls[0]["args"]
    assert args["timeout"] == "30" and args["command"] == "[folded with function:tool:1]"
    assert call.tool_calls[0]["id"] == "c1" and call.tool_calls[0]["name"] == "bash"
    assert str(stub.content).startswith('[folded: 33 lines; recover_context("function:tool:1")')
    assert provider_problems(result.messages) == []
    record = result.sidecars[0]
    assert record.payload == span_payload(msgs, index.by_id["function:tool:1"])
    payload = json.loads(record.payload)
    assert payload["tool_calls"][0]["args"]["command"] == SCRIPT
    assert payload["text"] == msgs[2].content and payload["results"] == msgs[3].content
    assert result.saved["function:tool:1"] > 0


def test_a_span_fold_commits_through_the_harness_and_reactivates_byte_for_byte() -> None:
    msgs = _history()

    class FoldSpan:
        name = "fold-span"

        def plan(self, index, messages):  # type: ignore[no-untyped-def]
            from langchain_pacms.lifecycle import Plan

            return Plan(
                "fold the script", (Action("fold", "function:tool:1", "old", scope="span"),)
            )

        async def aplan(self, index, messages):  # type: ignore[no-untyped-def]
            return self.plan(index, messages)

    harness = LifecycleHarness(
        FoldSpan(), store=InMemoryStore(), commit=CommitRule(boundary="tool")
    )
    commit = harness.step(msgs, thread_id="t")
    # the fold, and the ids the history keeps (carry_ids): each object's on its first message
    # (the folded one's in its stub's mark), the highest numbers on the first and last ones
    assert commit is not None and {m.id for m in commit.updates} == {
        "s",
        "h1",
        "a1",
        "t1",
        "a2",
        "t2",
    }
    assert [m.id for m in commit.messages if NUMBERS_KEY in m.additional_kwargs] == ["s", "t2"]
    named = {m.id: m.additional_kwargs.get(OBJECT_KEY) for m in commit.messages}
    assert named == {
        "s": "system:1",
        "h1": "conversation:user:1",
        "a1": None,
        "t1": None,
        "a2": "function:tool:2",
        "t2": None,
    }
    restored = harness.reactivate(
        commit.messages, "function:tool:1", thread_id="t", known_ids=commit.known_ids
    )
    by_id = {m.id: m for m in restored}
    assert by_id["a1"].content == msgs[2].content
    assert by_id["a1"].tool_calls == msgs[2].tool_calls  # type: ignore[attr-defined]
    assert by_id["t1"].content == msgs[3].content
    # no fold mark: its id, the run's name, and the pin that keeps it in view for the turn
    assert by_id["a1"].additional_kwargs == {
        **msgs[2].additional_kwargs,
        OBJECT_KEY: "function:tool:1",
        RUN_KEY: run_thread(msgs),
        "pacms_lifecycle": {"reactivated": "h1"},
    }


def test_span_scope_applies_to_a_fold_of_a_tool_span_only() -> None:
    msgs = [*_history(), HumanMessage("and the other crash?", id="h2")]
    index = index_messages(msgs)
    checked = check_actions(
        msgs,
        index,
        [
            Action("mask", "function:tool:1", scope="span"),
            Action("fold", "conversation:user:1", scope="span"),
        ],
    )
    assert checked.accepted == ()
    assert {r.reason for r in checked.rejected} == {
        "scope 'span' applies to a fold of a tool span only"
    }


def test_fold_stubs_leave_out_locators_visible_elsewhere() -> None:
    msgs = _history()
    index = index_messages(msgs, latest="step")
    action = [Action("fold", "function:tool:1")]
    deduped = str(apply_actions(msgs, index, action).messages[3].content)
    full = str(apply_actions(msgs, index, action, dedupe=False).messages[3].content)
    assert "src/pkg/module_3.py" in full and "src/pkg/module_3.py" not in deduped
    assert "src/pkg/module_4.py" in deduped  # not visible elsewhere: kept
    # the budget the visible one would have taken goes to one that is not visible elsewhere
    assert "src/pkg/module_23.py" in deduped and "src/pkg/module_23.py" not in full
    assert "src/pkg/module_3.py" in visible_locators(msgs)


def test_a_stub_repeats_a_locator_whose_only_other_copy_the_same_edit_prunes() -> None:
    msgs = _history()
    reread = {"name": "bash", "args": {"command": "cat src/pkg/module_3.py"}, "id": "c0"}
    msgs[2:2] = [
        AIMessage("", tool_calls=[reread], id="a0"),
        ToolMessage("x = 1", tool_call_id="c0", id="t0"),
    ]
    msgs[1] = HumanMessage("Fix the crash", id="h1")
    index = index_messages(msgs, latest="step")
    fold = Action("fold", "function:tool:2")
    alone = str(apply_actions(msgs, index, [fold]).messages[5].content)
    both = str(
        apply_actions(msgs, index, [Action("prune", "function:tool:1"), fold]).messages[3].content
    )
    assert "src/pkg/module_3.py" not in alone and "src/pkg/module_3.py" in both


def test_a_later_stub_does_not_repeat_an_earlier_stub_in_the_same_edit() -> None:
    record = json.dumps({"reservation": "ZFA04Y", "flight": "HAT136", "note": "x" * 400})
    msgs: list[BaseMessage] = [HumanMessage("check my trips", id="h")]
    for n in range(2):
        msgs += tool_round("lookup", {"q": str(n)}, record, n)
    msgs.append(HumanMessage("and now?", id="h2"))
    index = index_messages(msgs)
    result = apply_actions(
        msgs, index, [Action("fold", "function:tool:1"), Action("fold", "function:tool:2")]
    )
    first, second = str(result.messages[2].content), str(result.messages[4].content)
    assert "ZFA04Y" in first and "HAT136" in first
    assert "ZFA04Y" not in second and "HAT136" not in second


def test_action_gain_says_what_a_fold_or_mask_takes_out_of_view() -> None:
    msgs = _history()
    index = index_messages(msgs, latest="step")
    big, small = index.by_id["function:tool:1"], index.by_id["function:tool:2"]
    assert (
        action_gain(msgs, big, Action("fold", big.id, scope="span"))
        > action_gain(msgs, big, Action("fold", big.id))
        > 0
    )
    assert action_gain(msgs, small, Action("fold", small.id)) < 0
    assert action_gain(msgs, small, Action("prune", small.id)) == len("Now run it.") + len(
        json.dumps({"command": "python repro.py"})
    ) + len("case 0 ok")
    assert len(SCRIPT) >= LONG_ARGUMENT


def _loop(steps: int) -> list[BaseMessage]:
    msgs: list[BaseMessage] = [HumanMessage("fix src/app.py", id="h")]
    for n in range(steps):
        command = SCRIPT if n % 3 == 0 else f"grep -n handler src/app.py | head -{n + 2}"
        msgs += [
            AIMessage(
                f"Step {n}: checking the handler again.",
                id=f"a{n}",
                tool_calls=[{"name": "bash", "args": {"command": command}, "id": f"c{n}"}],
            ),
            ToolMessage(
                "ok" if n % 2 else "\n".join(f"{k}: handler_{k}" for k in range(60)),
                tool_call_id=f"c{n}",
                id=f"t{n}",
            ),
        ]
    return msgs


def test_the_heuristic_folds_whole_spans_and_proposes_nothing_that_saves_nothing() -> None:
    msgs = _loop(9)
    index = index_messages(msgs, latest="step")
    tuning = PlannerTuning(fold_min_tokens=20, mask_min_tokens=20, keep_above=1.0, keep_recent=0)
    planner = HeuristicPlanner(tuning=tuning)
    plan = planner.plan(index, msgs)
    folds = [a for a in plan.actions if a.op == "fold"]
    assert folds and all(a.scope == "span" for a in folds)
    checked = check_actions(msgs, index, plan.actions)
    assert not [r for r in checked.rejected if r.reason.startswith("saves nothing")]
    assert re.search(r"; [1-9]\d* left out as saving nothing", plan.summary)
    narrow = HeuristicPlanner(tuning=replace(tuning, fold_calls=False)).plan(index, msgs)
    assert {a.scope for a in narrow.actions} == {"output"}
    assert checked.tokens_saved > check_actions(msgs, index, narrow.actions).tokens_saved


def test_fold_calls_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="fold_calls"):
        PlannerTuning(fold_calls="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("price", [-0.1, 1.0])
def test_the_cached_price_must_be_a_share_below_one(price: float) -> None:
    with pytest.raises(ValueError, match="cached_price"):
        CommitRule(cached_price=price)


def test_a_round_reactivated_then_folded_again_is_folded_and_recovers() -> None:
    """Span fold, reactivate, then (next turn) a fold of the results only: the call message keeps
    its reactivation pin, which must not hide the new fold (it made the object read as active,
    its stub unrecoverable, and the stub itself folded next)."""
    from langchain_pacms.lifecycle import SidecarStore, make_recover_tool

    plans = iter(
        [
            [Action("fold", "function:tool:1", "old", scope="span")],
            [Action("fold", "function:tool:1", "old again")],  # the results only
            [Action("fold", "function:tool:1", "and again")],
        ]
    )

    class Scripted:
        name = "scripted"

        def plan(self, index, messages):  # type: ignore[no-untyped-def]
            from langchain_pacms.lifecycle import Plan

            return Plan("scripted", tuple(next(plans)))

        async def aplan(self, index, messages):  # type: ignore[no-untyped-def]
            return self.plan(index, messages)

    def applied(messages: list[BaseMessage], updates: list[BaseMessage]) -> list[BaseMessage]:
        new = {m.id: m for m in updates}
        return [new.get(m.id, m) for m in messages]

    store = InMemoryStore()
    harness = LifecycleHarness(Scripted(), store=store, commit=CommitRule(boundary="turn"))
    msgs = [*_history(), AIMessage("seen", id="a3"), HumanMessage("and now?", id="h2")]
    original = msgs[3].content
    commit = harness.step(msgs, thread_id="t")
    assert commit is not None
    state, known = applied(msgs, commit.updates), dict(commit.known_ids)
    state = applied(
        state, harness.reactivate(state, "function:tool:1", thread_id="t", known_ids=known)
    )
    state = [*state, AIMessage("ok", id="a4"), HumanMessage("next turn", id="h3")]
    commit = harness.step(state, thread_id="t", known_ids=known)
    assert commit is not None
    state, known = applied(state, commit.updates), dict(commit.known_ids)
    assert index_messages(state, known_ids=known).by_id["function:tool:1"].state == "folded"
    tool = make_recover_tool(store)
    args = {
        "object_id": "function:tool:1",
        "state": {"messages": state, "pacms_lifecycle_ids": known},
    }
    assert tool.invoke(args, {"configurable": {"thread_id": "t"}}) == original
    state = [*state, AIMessage("ok", id="a5"), HumanMessage("another turn", id="h4")]
    assert harness.step(state, thread_id="t", known_ids=known) is None  # already folded
    assert len(SidecarStore(store, "t").list_ids()) == 1
