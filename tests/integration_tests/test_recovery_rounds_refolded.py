"""A recovery round the lifecycle folds again gives back what it recovered, not nested JSON.

Each turn the model recovers the newest stub, which is the previous turn's recovery round
folded as a span: before the fix each recovery returned the one before it as an escaped JSON
string, one level deeper a turn (3,111 -> 3,796 -> 5,038 -> ... characters).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from pacms_fakes import RecordingChatModel

from langchain_pacms.lifecycle import RECOVER_TOOL_NAME, LifecycleMiddleware
from langchain_pacms.lifecycle.recover import recovered_again

pytest.importorskip("langchain.agents")
from langchain.agents import create_agent

ORIGINAL = "\n".join(
    f'  File "/srv/app/src/mod_{i}.py", line {100 + i}, in run: raise ValueError("ORD-{9000 + i}")'
    for i in range(30)
)
STUB = re.compile(r'recover_context\("([^"]+)"\)')


@tool
def lookup(key: str) -> str:
    """Look up an incident record."""
    return ORIGINAL


def _script(messages: list[BaseMessage], index: int) -> AIMessage:
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage("Noted.")
    if "read" in str(last.content):
        call = {"name": "lookup", "args": {"key": "incident-42"}, "id": f"c{index}"}
        return AIMessage("Reading the log.", tool_calls=[call])
    if "thanks" in str(last.content):
        return AIMessage("You are welcome.")
    folded = [
        found
        for m in messages
        if isinstance(m, ToolMessage) and str(m.content).startswith("[folded:")
        for found in STUB.findall(str(m.content))
    ]
    assert folded, "the model was shown no stub to recover"
    call = {"name": RECOVER_TOOL_NAME, "args": {"object_id": folded[-1]}, "id": f"r{index}"}
    return AIMessage("Let me look at that again.", tool_calls=[call])


def _original_of(recovered: str) -> Any:
    """The lookup's output inside a recovered payload: the round's span, or the output alone."""
    if recovered == ORIGINAL:
        return ORIGINAL
    return json.loads(recovered)["results"]


def test_recovering_a_refolded_recovery_gives_the_original_every_time() -> None:
    store = InMemoryStore()
    agent = create_agent(
        RecordingChatModel(script=_script),
        [lookup],
        middleware=[LifecycleMiddleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    config: Any = {"configurable": {"thread_id": "refold"}}
    agent.invoke({"messages": [HumanMessage("read the log")]}, config)
    for _ in range(3):  # commit boundaries: the read folds
        agent.invoke({"messages": [HumanMessage("thanks")]}, config)
    recovered: list[str] = []
    asked: list[str] = []
    for turn in range(6):
        state = agent.invoke({"messages": [HumanMessage(f"check it again ({turn})")]}, config)
        result = [
            m
            for m in state["messages"]
            if isinstance(m, ToolMessage) and m.name == RECOVER_TOOL_NAME
        ][-1]
        recovered.append(str(result.content))
        calls = [c for m in state["messages"] if isinstance(m, AIMessage) for c in m.tool_calls]
        asked.append(next(c for c in calls if c["id"] == result.tool_call_id)["args"]["object_id"])
    assert len(set(asked)) > 1  # later turns recovered the folded recoveries, not the read
    assert all(_original_of(r) == ORIGINAL for r in recovered)
    assert len(set(recovered)) == 1  # no level added per turn


def test_a_refolded_round_of_parallel_recoveries_gives_each_result_read_again() -> None:

    def call(n: int) -> dict[str, Any]:
        return {
            "name": RECOVER_TOOL_NAME,
            "args": {"object_id": f"function:tool:{n}"},
            "id": f"r{n}",
        }

    inner = json.dumps({"text": "", "tool_calls": [call(1)], "results": "a.py"})
    results = [{"tool_call_id": "r1", "content": inner}, {"tool_call_id": "r2", "content": "b.py"}]
    span = {"text": "both", "tool_calls": [call(1), call(2)], "results": json.dumps(results)}
    read = json.loads(recovered_again(json.dumps(span)))
    assert read["tool_calls"] == span["tool_calls"]
    assert [r["content"] for r in json.loads(read["results"])] == ["a.py", "b.py"]
    # a round of another tool, or of a recovery mixed with another tool, stays as it is
    other = json.dumps({**span, "tool_calls": [call(1), {"name": "ls", "args": {}, "id": "x"}]})
    assert recovered_again(other) == other
