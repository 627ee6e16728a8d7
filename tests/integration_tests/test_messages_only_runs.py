"""A run given back its messages alone keeps one meaning for every object id it showed.

Without a checkpointer a caller may pass the next turn only the messages a run returned, not
the state's ``pacms_lifecycle_ids``. The rounds are then numbered again from the messages: a
commit's first and last messages carry the highest number of each kind, so a round indexed
again gets a new id and an id a fold stub showed never names another round.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore
from pacms_fakes import RecordingChatModel, call, module_reader, module_text

from langchain_pacms.integrations import PACMSMiddleware, ToolLoopOptions, create_pacms_hook
from langchain_pacms.lifecycle import (
    RECOVER_TOOL_NAME,
    Action,
    ContextIndex,
    LifecycleHarness,
    LifecycleMiddleware,
    Plan,
    make_recover_tool,
)

STUB = re.compile(r'recover_context\("([^"]+)"\)')


class PruneNewest:
    """Prunes the newest tool round it may touch."""

    name = "prune-newest"

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        old = [o.id for o in index.objects if o.kind == "tool" and not o.latest]
        return Plan("scripted", tuple(Action("prune", i) for i in old[-1:]))

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        return self.plan(index, messages)


class PruneOnce:
    """Prunes the oldest tool round it may touch, once: the rounds after it are never marked."""

    name = "prune-once"

    def __init__(self) -> None:
        self.done = False

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        old = [o.id for o in index.objects if o.kind == "tool" and not o.latest]
        if self.done or not old:
            return Plan("scripted", ())
        self.done = True
        return Plan("scripted", (Action("prune", old[0]),))

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        return self.plan(index, messages)


@pytest.mark.parametrize(
    ("planner", "reads", "budget", "turns"), [(PruneNewest, 5, 1_500, 4), (PruneOnce, 8, 3_000, 2)]
)
def test_an_id_shown_in_a_stub_stands_for_one_round_over_turns_given_messages_alone(
    planner: type, reads: int, budget: int, turns: int
):
    store = InMemoryStore()
    shown: dict[str, set[str]] = {}  # object id -> the call ids of the rounds it stood for
    made: dict[int, int] = {}  # the model's calls in each turn

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        for m in messages:
            if isinstance(m, ToolMessage) and (found := STUB.search(str(m.content))):
                shown.setdefault(found.group(1), set()).add(m.tool_call_id)
        turn = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        made[turn] = made.get(turn, 0) + 1
        # `reads` rounds in view (a pruned one is read again), at most twice as many calls
        if (
            sum(isinstance(m, AIMessage) for m in messages[turn:]) >= reads
            or made[turn] > 2 * reads
        ):
            return AIMessage("done")
        path = f"src/module_{index}.py"
        return AIMessage(
            f"step {index}", tool_calls=[call("read_file", {"path": path}, f"c{index}")]
        )

    model = RecordingChatModel(script=script)
    agent = create_agent(
        model,
        [module_reader()],
        middleware=[
            LifecycleMiddleware(store=store, planner=planner()),
            PACMSMiddleware(budget, tool_loop=ToolLoopOptions(sidecar_store=store)),
        ],
        store=store,
    )
    messages: list[BaseMessage] = []
    for turn in range(turns):
        state = agent.invoke(
            {"messages": [*messages, HumanMessage(f"read {reads} modules ({turn})")]}
        )
        messages = state["messages"]
    # was {"function:tool:4": {"c6", "c7"}, ...}: a round indexed again took a shown id
    assert {i: c for i, c in shown.items() if len(c) > 1} == {}
    assert len(shown) > 5, "the model was shown too few stubs"
    # every id shown recovers its own round (its payload, or its span's calls and results)
    recover = make_recover_tool(store)
    for object_id, (call_id,) in shown.items():
        got = recover.invoke({"object_id": object_id, "state": {"messages": messages}})
        output = json.loads(got)["results"] if got.startswith("{") else got
        assert output == module_text(int(call_id[1:])), (object_id, got[:80])
    assert RECOVER_TOOL_NAME in [t.name for t in model.bound_tools]  # the model could ask


class FoldOld:
    """Folds every tool round it may touch."""

    name = "fold-old"

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        old = [o.id for o in index.objects if o.kind == "tool" and not o.latest]
        return Plan("scripted", tuple(Action("fold", i) for i in old))

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        return self.plan(index, messages)


def test_a_run_without_a_thread_id_keeps_its_folds_when_the_caller_drops_its_first_turn():
    # the run's sidecars are named after its first message: a caller that kept the history
    # short by dropping the oldest turn lost every payload folded before
    store = InMemoryStore()
    made: dict[str, int] = {}

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        turn = str([m.content for m in messages if isinstance(m, HumanMessage)][-1])
        made[turn] = made.get(turn, 0) + 1
        if made[turn] > 2:
            return AIMessage("done")
        path = f"src/module_{index}.py"
        return AIMessage("", tool_calls=[call("read_file", {"path": path}, f"c{index}")])

    agent = create_agent(
        RecordingChatModel(script=script),
        [module_reader()],
        middleware=[LifecycleMiddleware(store=store, planner=FoldOld())],
        store=store,
    )
    recover = make_recover_tool(store)

    def recovered(messages: list[BaseMessage]) -> dict[str, bool]:
        out = {}
        for m in messages:
            if isinstance(m, ToolMessage) and (found := STUB.search(str(m.content))):
                got = recover.invoke({"object_id": found.group(1), "state": {"messages": messages}})
                out[found.group(1)] = got == module_text(int(m.tool_call_id[1:]))
        return out

    messages: list[BaseMessage] = []
    for turn in range(3):
        messages = agent.invoke({"messages": [*messages, HumanMessage(f"question {turn}")]})[
            "messages"
        ]
    assert recovered(messages) and all(recovered(messages).values())
    second = [k for k, m in enumerate(messages) if isinstance(m, HumanMessage)][1]
    trimmed = messages[second:]  # the caller drops the oldest turn
    assert recovered(trimmed) and all(recovered(trimmed).values())
    messages = agent.invoke({"messages": [*trimmed, HumanMessage("question 3")]})["messages"]
    assert len(recovered(messages)) > len(recovered(trimmed)) and all(recovered(messages).values())


# -- merged runs --------------------------------------------------------------------------------


def read_round(call_id: str) -> list[BaseMessage]:
    text = "\n".join(f"line {k} of {call_id}: value {k * 7}" for k in range(30))
    return [
        AIMessage(
            "", tool_calls=[call("read_file", {"path": f"{call_id}.py"}, call_id)], id="a" + call_id
        ),
        ToolMessage(text, tool_call_id=call_id, name="read_file", id="t" + call_id),
    ]


class Scripted:
    name = "scripted"

    def __init__(self, op: str, pick: Any) -> None:
        self.op, self.pick = op, pick

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        tools = [o.id for o in index.objects if o.kind == "tool" and not o.latest]
        return Plan("scripted", tuple(Action(self.op, i) for i in tools if self.pick(i)))

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        return self.plan(index, messages)


def committed_run(tag: str) -> list[BaseMessage]:
    """Three reads and a commit that prunes the third: both kept reads carry their ids."""
    msgs = [
        HumanMessage(f"task {tag}", id=f"h{tag}"),
        *read_round(f"{tag}1"),
        *read_round(f"{tag}2"),
        *read_round(f"{tag}3"),
        AIMessage("done", id=f"d{tag}"),
        HumanMessage(f"thanks {tag}", id=f"k{tag}"),
    ]
    harness = LifecycleHarness(Scripted("prune", lambda i: i.endswith(":3")), store=InMemoryStore())
    commit = harness.step(msgs, thread_id="own")
    assert commit is not None
    return add_messages(msgs, commit.updates)


def stubs_recover(
    messages: list[BaseMessage], store: InMemoryStore, thread: str
) -> dict[str, bool]:
    recover = make_recover_tool(store)
    config = {"configurable": {"thread_id": thread}}
    out = {}
    for m in messages:
        if isinstance(m, ToolMessage) and (found := STUB.search(str(m.content))):
            got = recover.invoke(
                {"object_id": found.group(1), "state": {"messages": messages}}, config
            )
            out[found.group(1)] = got.startswith(f"line 0 of {m.tool_call_id}:")
    return out


def test_rounds_of_merged_runs_named_by_their_keys_are_recovered_once_folded():
    # both runs named their reads function:tool:1 and :2, so the merged index names them by
    # their keys (<id>@<sha16>); a fold wrote the record under the key and a second hash
    merged = [*committed_run("x"), *committed_run("y"), HumanMessage("now summarise", id="q")]
    store = InMemoryStore()
    hook = create_pacms_hook(budget=700, tool_loop=ToolLoopOptions(sidecar_store=store))
    sent = hook.invoke({"messages": merged}, {"configurable": {"thread_id": "p"}})[
        "llm_input_messages"
    ]
    shown = stubs_recover(sent, store, "p")
    assert shown and all("@" in i for i in shown) and all(shown.values()), shown
    harness = LifecycleHarness(Scripted("fold", lambda i: "@" in i), store=store)
    before = [*merged, AIMessage("ok", id="ans"), HumanMessage("next", id="q2")]
    commit = harness.step(before, thread_id="p2")
    assert commit is not None and len(commit.actions) == 4
    folded = stubs_recover(add_messages(before, commit.updates), store, "p2")
    assert len(folded) == 4 and all(folded.values()), folded
