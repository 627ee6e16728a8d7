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

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore
from pacms_fakes import RecordingChatModel, call, module_reader, module_text

from langchain_pacms.integrations import PACMSMiddleware, ToolLoopOptions
from langchain_pacms.lifecycle import (
    RECOVER_TOOL_NAME,
    Action,
    ContextIndex,
    LifecycleMiddleware,
    Plan,
    make_recover_tool,
)

STUB = re.compile(r'recover_context\("([^"]+)"\)')
READS = 5


class PruneNewest:
    """Prunes the newest tool round it may touch."""

    name = "prune-newest"

    def plan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        old = [o.id for o in index.objects if o.kind == "tool" and not o.latest]
        return Plan("scripted", tuple(Action("prune", i) for i in old[-1:]))

    async def aplan(self, index: ContextIndex, messages: Sequence[BaseMessage]) -> Plan:
        return self.plan(index, messages)


def test_an_id_shown_in_a_stub_stands_for_one_round_over_turns_given_messages_alone():
    store = InMemoryStore()
    shown: dict[str, set[str]] = {}  # object id -> the call ids of the rounds it stood for
    made: dict[object, int] = {}  # the model's calls in each turn

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        for m in messages:
            if isinstance(m, ToolMessage) and (found := STUB.search(str(m.content))):
                shown.setdefault(found.group(1), set()).add(m.tool_call_id)
        turn = [m for m in messages if isinstance(m, HumanMessage)][-1].content
        made[turn] = made.get(turn, 0) + 1
        if made[turn] > READS:
            return AIMessage("done")
        path = f"src/module_{index}.py"
        return AIMessage(
            f"step {index}", tool_calls=[call("read_file", {"path": path}, f"c{index}")]
        )

    agent = create_agent(
        RecordingChatModel(script=script),
        [module_reader()],
        middleware=[
            LifecycleMiddleware(store=store, planner=PruneNewest()),
            PACMSMiddleware(1_500, tool_loop=ToolLoopOptions(sidecar_store=store)),
        ],
        store=store,
    )
    messages: list[BaseMessage] = []
    for turn in range(4):
        state = agent.invoke({"messages": [*messages, HumanMessage(f"read five modules ({turn})")]})
        messages = state["messages"]
    assert {i: c for i, c in shown.items() if len(c) > 1} == {}  # was {"function:tool:4": ...}
    assert len(shown) > 5, "the model was shown too few stubs"
    recover = make_recover_tool(store)
    for object_id, (call_id,) in shown.items():
        got = recover.invoke({"object_id": object_id, "state": {"messages": messages}})
        if not got.startswith("Error"):  # a round's payload, or its span's (calls and results)
            output = json.loads(got)["results"] if got.startswith("{") else got
            assert output == module_text(int(call_id[1:])), (object_id, got[:80])
    assert recover.name == RECOVER_TOOL_NAME
