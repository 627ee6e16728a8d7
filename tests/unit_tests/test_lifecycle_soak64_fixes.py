"""Defects a soak test found in the lifecycle: planner replies, stats, thread ids, validation."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_pacms.lifecycle import (
    Action,
    CommitRule,
    LifecycleHarness,
    LLMPlanner,
    Plan,
    PlannerTuning,
    check_actions,
    index_messages,
    mask_text,
)
from langchain_pacms.lifecycle.objects import NUMBERS_KEY, ContextIndex

LOG = "\n".join(f"[{i:04d}] INFO step {i} ok /srv/app/m_{i}.py" for i in range(300))


def history() -> list[BaseMessage]:
    return [
        HumanMessage("read it", id="h1"),
        AIMessage("", tool_calls=[{"name": "read", "args": {"p": "a"}, "id": "c1"}], id="a1"),
        ToolMessage(LOG, tool_call_id="c1", id="t1"),
        AIMessage("ok", id="a2"),
        HumanMessage("next", id="h2"),
    ]


class Scripted:
    """A planner that proposes the same actions every time."""

    name = "scripted"

    def __init__(self, *actions: Any) -> None:
        self.actions = actions

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        return Plan("scripted", self.actions)

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        return self.plan(index, messages)


def llm(reply: str) -> LLMPlanner:
    return LLMPlanner(FakeMessagesListChatModel(responses=[AIMessage(reply)]))


# -- 1, 2: what the LLM planner reads in a reply ------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_deeply_nested_reply_is_a_rejected_plan_not_a_recursion_error(mode: str) -> None:
    reply = '{"summary": "s", "actions": ' + "[" * 2000 + "]" * 2000 + "}"
    harness = LifecycleHarness(llm(reply), store=InMemoryStore())
    if mode == "sync":
        commit = harness.step(history(), thread_id="t")
    else:
        commit = asyncio.run(harness.astep(history(), thread_id="t"))
    assert commit is None and harness.stats.plans_rejected == 1


@pytest.mark.parametrize(
    "template",
    [
        "Here is the plan:\n{plan}\nNote: the {{path}} stays.",
        "<think>the object {{function:tool:1}} is stale</think>\n{plan}",
        'Context: {{"path": "a"}}\n{plan}\nand {{ more',
    ],
)
def test_a_plan_among_braces_in_prose_is_read(template: str) -> None:
    plan = json.dumps(
        {"summary": "fold it", "actions": [{"op": "fold", "target": "function:tool:1"}]}
    )
    msgs = history()
    got = llm(template.format(plan=plan)).plan(index_messages(msgs), msgs)
    assert got.ok and got.groups() == {"fold": ["function:tool:1"]}


# -- 3, 4: rejected actions are seen, and the stats stay bounded ------------------------------


def test_actions_the_llm_planner_drops_are_counted_and_in_the_commit(tmp_path: Path) -> None:
    msgs = [
        *history(),
        AIMessage("", tool_calls=[{"name": "read", "args": {"p": "b"}, "id": "c2"}], id="a3"),
        ToolMessage("more " * 300, tool_call_id="c2", id="t2"),
        AIMessage("done", id="a4"),
    ]
    reply = {
        "summary": "s",
        "actions": [
            {"op": "fold", "target": "function:tool:1"},
            {"op": "fold", "target": "function:tool:99"},  # unknown id
            {"op": "prune", "target": "function:tool:2"},  # the latest turn
            {"op": "mask", "target": "function:tool:1"},  # a second action on one object
        ],
    }
    log = tmp_path / "lifecycle.jsonl"
    harness = LifecycleHarness(llm(json.dumps(reply)), store=InMemoryStore(), log=log)
    commit = harness.step(msgs, thread_id="t")
    assert commit is not None and commit.actions == (Action("fold", "function:tool:1"),)
    assert harness.stats.actions_accepted == 1 and harness.stats.actions_rejected == 3
    assert harness.stats.rejections == {
        "unknown id": 1,
        "part of the latest turn": 1,
        "overlaps fold of the same object (fold kept)": 1,
    }
    expected = [
        {"op": "fold", "target": "function:tool:99", "reason": "unknown id"},
        {"op": "prune", "target": "function:tool:2", "reason": "part of the latest turn"},
        {
            "op": "mask",
            "target": "function:tool:1",
            "reason": "overlaps fold of the same object (fold kept)",
        },
    ]
    assert commit.event()["rejected"] == expected
    assert json.loads(log.read_text("utf-8"))["rejected"] == expected


def test_rejection_stats_count_categories_and_stay_bounded() -> None:
    ids = itertools.count()

    class Flaky(FakeMessagesListChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"429 rate limited, request id req_{next(ids):08d} " + "x " * 500)

    harness = LifecycleHarness(LLMPlanner(Flaky(responses=[])), store=InMemoryStore())
    for step in range(30):
        harness.step(history(), thread_id=f"thread-{step}")
    assert harness.stats.rejections == {"plan rejected: model raised RuntimeError": 30}

    words = (f"planner fault {'x' * n}" for n in itertools.count(1))
    planner = Scripted()
    planner.plan = lambda index, messages: Plan.rejection(next(words))  # type: ignore[method-assign]
    harness = LifecycleHarness(planner, store=InMemoryStore())
    for _ in range(100):
        harness.step(history(), thread_id="t")
    assert len(harness.stats.rejections) == 64
    assert harness.stats.rejections["other"] == 100 - 63
    assert sum(harness.stats.rejections.values()) == 100


# -- 5, 6: thread ids and reactivate -----------------------------------------------------------


@pytest.mark.parametrize(("thread_id", "error"), [(7, TypeError), ("", ValueError)])
def test_a_bad_thread_id_raises_at_the_call(thread_id: Any, error: type[Exception]) -> None:
    harness = LifecycleHarness(Scripted(Action("fold", "function:tool:1")), store=InMemoryStore())
    with pytest.raises(error, match="thread_id"):
        harness.step(history(), thread_id=thread_id)
    with pytest.raises(error, match="thread_id"):
        asyncio.run(harness.astep(history(), thread_id=thread_id))
    with pytest.raises(error, match="thread_id"):
        harness.reactivate(history(), "function:tool:1", thread_id=thread_id)
    assert harness.stats.commit_failures == 0 and harness.stats.plans == 0


def test_reactivating_a_masked_or_active_object_says_it_is_not_folded() -> None:
    harness = LifecycleHarness(Scripted(Action("mask", "function:tool:1")), store=InMemoryStore())
    commit = harness.step(history(), thread_id="t")
    assert commit is not None
    with pytest.raises(ValueError, match="function:tool:1 is masked, not folded"):
        harness.reactivate(commit.messages, "function:tool:1", thread_id="t")
    with pytest.raises(ValueError, match="conversation:assistant:1 is active, not folded"):
        harness.reactivate(commit.messages, "conversation:assistant:1", thread_id="t")


# -- 7: validation -------------------------------------------------------------------------------


def test_check_actions_rejects_an_unknown_scope_and_a_non_action() -> None:
    msgs = history()
    index = index_messages(msgs)
    checked = check_actions(msgs, index, [Action("fold", "function:tool:1", scope="everything")])  # type: ignore[arg-type]
    assert checked.accepted == ()
    assert [r.reason for r in checked.rejected] == [
        "unknown scope 'everything' (expected output or span)"
    ]
    plan = {"op": "fold", "target": "function:tool:1"}
    harness = LifecycleHarness(Scripted(plan), store=InMemoryStore())
    with pytest.raises(TypeError, match="actions must be Action objects, got dict"):
        harness.step(msgs, thread_id="t")


@pytest.mark.parametrize(
    ("make", "kwargs", "error", "field"),
    [
        (CommitRule, {"max_active_tokens": math.nan}, TypeError, "max_active_tokens"),
        (CommitRule, {"max_active_tokens": 1.5}, TypeError, "max_active_tokens"),
        (CommitRule, {"threshold": True}, TypeError, "threshold"),
        (CommitRule, {"threshold": "0.5"}, TypeError, "threshold"),
        (PlannerTuning, {"recency_half_life": math.nan}, ValueError, "recency_half_life"),
        (PlannerTuning, {"keep_above": True}, TypeError, "keep_above"),
    ],
)
def test_tuning_values_that_are_no_numbers_in_range_are_refused(
    make: Any, kwargs: dict[str, Any], error: type[Exception], field: str
) -> None:
    with pytest.raises(error, match=field):
        make(**kwargs)


@pytest.mark.parametrize(("head", "tail", "field"), [(-5, 0, "head"), (0, -1, "tail")])
def test_mask_text_refuses_a_negative_head_or_tail(head: int, tail: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        mask_text("x" * 1000, head, tail)


# -- 8, 9: histories whose edits the state or a provider would get wrong ----------------------


@pytest.mark.parametrize("op", ["fold", "mask", "prune"])
def test_an_object_whose_message_id_is_shared_is_not_edited(op: str) -> None:
    body = "\n".join(f"line {i} /srv/app/f_{i}.py value={i * 7}" for i in range(60))
    msgs = [
        HumanMessage("q1", id="h1"),
        AIMessage("first answer\n" + body, id="dup"),
        HumanMessage("q2", id="h2"),
        AIMessage("second answer\n" + body, id="dup"),
        HumanMessage("q3", id="h3"),
    ]
    checked = check_actions(msgs, index_messages(msgs), [Action(op, "conversation:assistant:1")])  # type: ignore[arg-type]
    assert checked.accepted == ()
    assert [r.reason for r in checked.rejected] == [
        "a message whose id another message shares cannot be replaced or removed in state"
    ]


def test_a_call_given_only_as_a_tool_use_block_is_not_orphaned() -> None:
    call = AIMessage(
        [
            {"type": "text", "text": "Let me read the config. " * 60},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.cfg"}},
        ],
        id="a1",
    )
    msgs = [
        HumanMessage("check a.cfg", id="h1"),
        call,
        ToolMessage("port=6543", tool_call_id="toolu_1", id="t1"),
        AIMessage("port is 6543", id="a2"),
        HumanMessage("thanks", id="h2"),
    ]
    index = index_messages(msgs)
    for op in ("fold", "prune"):
        harness = LifecycleHarness(Scripted(Action(op, "conversation:assistant:1")))
        assert harness.step(msgs, thread_id="t") is None
        (rejection,) = harness.check(msgs, index, [Action(op, "conversation:assistant:1")]).rejected  # type: ignore[arg-type]
        assert "tool_use" in rejection.reason
    # a mask keeps the block: it stays allowed
    masked = check_actions(msgs, index, [Action("mask", "conversation:assistant:1")])
    assert masked.accepted and masked.result.messages[1].content[-1] == call.content[-1]


# -- a run without a thread id keeps its sidecars' namespace --------------------------------------


def test_pruning_the_message_a_run_is_named_after_keeps_its_folds_recoverable():
    # the run's sidecars are named after its first message; a prune of that message moved
    # the namespace, and recover_context / reactivate found nothing
    from langgraph.graph.message import add_messages

    from langchain_pacms.lifecycle import make_recover_tool

    store = InMemoryStore()
    state = [AIMessage("Hi! I am your assistant. " * 20, id="greet"), *history()]
    fold = LifecycleHarness(Scripted(Action("fold", "function:tool:1")), store=store).step(state)
    assert fold is not None and fold.thread_id == "run:greet+a1"
    state = add_messages(state, fold.updates)
    harness = LifecycleHarness(Scripted(Action("prune", "conversation:assistant:1")), store=store)
    prune = harness.step(state, known_ids=fold.known_ids)
    assert prune is not None and prune.thread_id == "run:greet+a1"
    state = add_messages(state, prune.updates)
    assert state == prune.messages and state[0].id == "h1"
    tool = make_recover_tool(store)
    assert tool.invoke({"object_id": "function:tool:1", "state": {"messages": state}}) == LOG
    restored = harness.reactivate(state, "function:tool:1", known_ids=prune.known_ids)
    assert any(m.content == LOG for m in restored)


# -- a history given back without the state's ids keeps its id numbers ----------------------------


def three_calls() -> list[BaseMessage]:
    out: list[BaseMessage] = [HumanMessage("read them", id="h1")]
    for n in (1, 2, 3):
        call = {"name": "read", "args": {"p": f"f{n}"}, "id": f"c{n}"}
        out += [
            AIMessage("", tool_calls=[call], id=f"a{n}"),
            ToolMessage(LOG, tool_call_id=f"c{n}", id=f"t{n}"),
        ]
    return [*out, AIMessage("ok", id="a9"), HumanMessage("next", id="h2")]


@pytest.mark.parametrize("thread_id", [None, "t"])
def test_pruning_the_newest_span_does_not_give_its_id_to_the_next_one(thread_id: str | None):
    # without a checkpointer a caller may pass back only the messages (not pacms_lifecycle_ids):
    # the span after a pruned newest one was numbered as the pruned one, so an id the model had
    # seen in a stub named another round
    from langgraph.graph.message import add_messages

    state = three_calls()
    assert index_messages(state).by_id["function:tool:3"].indices == (5, 6)
    harness = LifecycleHarness(Scripted(Action("prune", "function:tool:3")), store=InMemoryStore())
    commit = harness.step(state, thread_id=thread_id)
    assert commit is not None
    state = add_messages(state, commit.updates)
    assert state == commit.messages
    call = {"name": "read", "args": {"p": "f4"}, "id": "c4"}
    state = [
        *state,
        AIMessage("", tool_calls=[call], id="a4"),
        ToolMessage("new", tool_call_id="c4", id="t4"),
    ]
    ids = [o.id for o in index_messages(state).objects]
    # every object keeps its id (carry_ids); the new round is numbered after the pruned one
    assert ids == [
        "conversation:user:1",
        "function:tool:1",
        "function:tool:2",
        "conversation:assistant:1",
        "conversation:user:2",
        "function:tool:4",
    ]
    # only the run's first and last messages carry the numbers; contents are unchanged
    stamped = [m.id for m in commit.messages if NUMBERS_KEY in m.additional_kwargs]
    assert stamped == ["h1", "h2"]
    assert [m.content for m in commit.messages] == [
        m.content for m in three_calls() if m.id not in {"a3", "t3"}
    ]


def named(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """Object id -> id of its first message, indexed without the state's ids."""
    return {o.id: o.lineage[0] for o in index_messages(messages).objects}


@pytest.mark.parametrize(
    "actions",
    [
        [Action("prune", "function:tool:1")],
        [Action("fold", "function:tool:2")],
        [Action("prune", "function:tool:2"), Action("fold", "function:tool:3")],
        [Action("fold", "function:tool:1"), Action("prune", "function:tool:3")],
    ],
)
def test_an_id_never_names_two_rounds_when_only_messages_come_back(actions: list[Action]):
    # re-indexed without known ids, the objects after a pruned or folded one were numbered
    # again from the marks alone: `function:tool:1` named the second read after a prune
    from langgraph.graph.message import add_messages

    state, seen = three_calls(), named(three_calls())
    for step in (1, 2):
        harness = LifecycleHarness(Scripted(*actions), store=InMemoryStore())
        commit = harness.step(state)
        assert commit is not None and len(commit.actions) == len(actions)
        call = {"name": "read", "args": {"p": f"g{step}"}, "id": f"d{step}"}
        state = [
            *add_messages(state, commit.updates),
            AIMessage("", tool_calls=[call], id=f"b{step}"),
            ToolMessage(LOG, tool_call_id=f"d{step}", id=f"u{step}"),
            AIMessage("ok", id=f"e{step}"),
            HumanMessage("more", id=f"i{step}"),
        ]
        now = named(state)
        assert all(seen.get(i, first) == first for i, first in now.items()), (seen, now)
        seen |= now
        actions = [Action("prune", next(i for i in now if i.startswith("function:tool:")))]


def test_a_run_without_a_thread_id_is_found_again_after_its_first_message_goes():
    from langchain_core.messages import SystemMessage

    from langchain_pacms.messages.runs import RUN_KEY, run_thread

    state = three_calls()
    harness = LifecycleHarness(Scripted(Action("fold", "function:tool:1")), store=InMemoryStore())
    commit = harness.step(state)
    assert commit is not None and commit.thread_id == "run:h1+a1"
    kept = list(commit.messages)
    # each object's first message carries the run's name; so does no message added later
    assert [m.id for m in kept if m.additional_kwargs.get(RUN_KEY) == "run:h1+a1"] == [
        "h1",
        "a1",
        "a2",
        "a3",
        "a9",
        "h2",
    ]
    assert run_thread(kept[3:]) == "run:h1+a1"  # the caller dropped the first messages
    assert run_thread([SystemMessage("new prompt", id="s0"), *kept]) == "run:h1+a1"
    # with a thread id too: the name tells the thread's runs apart, also after a prune of
    # the first reply (a fork's branches keep one name and are told apart by their messages)
    threaded = LifecycleHarness(Scripted(Action("fold", "function:tool:1")), store=InMemoryStore())
    commit = threaded.step(state, thread_id="t")
    assert commit is not None and commit.thread_id == "t"
    assert run_thread(list(commit.messages)[3:]) == "run:h1+a1"
