"""A fold stub names the round ``recover_context`` finds under its id, whatever the request held.

``PACMSMiddleware`` selects from the request's messages, and ``recover_context`` looks an object
id up in the graph state. When a middleware before it trims the request (the task and the last
messages) or adds example rounds, the two lists differ: numbering the request's rounds by their
own positions gave a stub the id of another round of the state, and the tool returned that
round's output as a success (or refused the stub). Each recovery here must return the exact
output its stub stood for, and an example round (not in the state) is never stubbed.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware import ContextEditingMiddleware, wrap_model_call
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from pacms_fakes import RecordingChatModel, call, module_reader, module_text, slow_examples

from langchain_pacms.integrations import PACMSMiddleware, ToolLoopOptions
from langchain_pacms.lifecycle import RECOVER_TOOL_NAME, LifecycleMiddleware

STUB = re.compile(r'recover_context\("([^"]+)"\)')
read_file = module_reader()


def trimmed(keep: int):
    """A user's request trim: the task and the last ``keep`` messages."""

    @wrap_model_call
    def keep_recent(request, handler):
        msgs = request.messages
        if len(msgs) <= keep + 1:
            return handler(request)
        return handler(request.override(messages=[msgs[0], *msgs[-keep:]]))

    return keep_recent


@wrap_model_call
def with_example(request, handler):
    """A user's few-shot middleware: an example tool round before the conversation."""
    example = [
        HumanMessage("example: read the config", id="ex-h"),
        AIMessage("", tool_calls=[call("read_file", {"path": "cfg.py"}, "ex-c")], id="ex-a"),
        ToolMessage("PORT = 8080\n" * 30, tool_call_id="ex-c", name="read_file", id="ex-t"),
    ]
    return handler(request.override(messages=[*example, *request.messages]))


@wrap_model_call
def results_reversed(request, handler):
    """A middleware that reorders the results of each parallel round (the same objects)."""
    out, held = [], []
    for message in request.messages:
        if isinstance(message, ToolMessage):
            held.append(message)
            continue
        out.extend(reversed(held))
        held = []
        out.append(message)
    return handler(request.override(messages=[*out, *reversed(held)]))


def recovering(rng: random.Random, reads: int, asked: list[tuple[str, str]]):
    """A script that reads modules, then recovers a stub it was shown (chosen by ``rng``)."""

    def script(messages, index):
        if index < reads:
            path = f"src/module_{index}.py"
            return AIMessage(
                f"step {index}", tool_calls=[call("read_file", {"path": path}, f"c{index}")]
            )
        if isinstance(messages[-1], ToolMessage) and messages[-1].name == RECOVER_TOOL_NAME:
            return AIMessage("done")
        shown = [
            (found.group(1), m.tool_call_id)
            for m in messages
            if isinstance(m, ToolMessage) and (found := STUB.search(str(m.content)))
        ]
        assert "ex-c" not in {c for _, c in shown}  # an example round is never stubbed
        if not shown:
            return AIMessage("no stub")
        asked.append(rng.choice(shown))
        return AIMessage("", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": asked[-1][0]}, "r")])

    return script


def recovered_output(content: str) -> str:
    """The tool output in a recovery (a span's payload holds it under ``results``)."""
    try:
        return json.loads(content)["results"]
    except (ValueError, KeyError, TypeError):
        return content


def run(shape: str, seed: int, reads: int, lifecycle: bool) -> None:
    store = InMemoryStore()
    asked: list[tuple[str, str]] = []
    before = {
        "trim": [trimmed(8)],
        "example": [with_example],
        "both": [trimmed(6), with_example],
        "copies": [ContextEditingMiddleware()],  # copies every message on every call
    }
    middleware = [
        *([LifecycleMiddleware(store=store)] if lifecycle else []),
        *before[shape],
        PACMSMiddleware(1_500, tool_loop=ToolLoopOptions(sidecar_store=store)),
    ]
    model = RecordingChatModel(script=recovering(random.Random(seed), reads, asked))
    agent = create_agent(
        model, [read_file], middleware=middleware, checkpointer=InMemorySaver(), store=store
    )
    config = {"configurable": {"thread_id": f"t-{shape}-{seed}"}, "recursion_limit": 100}
    state = agent.invoke({"messages": [HumanMessage("read every module")]}, config)
    results = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    assert asked, "the model was shown no stub"
    recovery = results["r"]
    assert recovery.status == "success", recovery.content
    stood_for = asked[-1][1]
    assert recovered_output(recovery.content) == module_text(int(stood_for[1:]))


@pytest.mark.parametrize("shape", ["trim", "example", "both", "copies"])
@pytest.mark.parametrize("lifecycle", [False, True], ids=["selection", "with-lifecycle"])
def test_a_stub_recovers_its_own_round_when_the_request_is_not_the_state(shape, lifecycle):
    run(shape, seed=0, reads=8, lifecycle=lifecycle)


@slow_examples(12)
@example(shape="both", seed=1, reads=5)  # an example round's stub took the id of the next round
@given(
    shape=st.sampled_from(["trim", "example", "both", "copies"]),
    seed=st.integers(0, 10_000),
    reads=st.integers(5, 10),
)
def test_any_stub_shown_recovers_its_own_round(shape, seed, reads):
    run(shape, seed, reads, lifecycle=False)


def test_stubs_of_reordered_parallel_results_recover_or_are_not_sent():
    """Results sent in another order than the state's: a stub must still name the state's bytes."""
    store, shown = InMemoryStore(), []

    def script(messages, index):
        if index < 6:
            paths = [f"src/module_{2 * index + k}.py" for k in (0, 1)]
            calls = [
                call("read_file", {"path": p}, f"c{2 * index + k}") for k, p in enumerate(paths)
            ]
            return AIMessage(f"step {index}", tool_calls=calls)
        if index > 6:
            return AIMessage("done")
        shown.extend(f.group(1) for m in messages if (f := STUB.search(str(m.content))))
        return AIMessage(
            "", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": o}, o) for o in shown]
        )

    mw = [results_reversed, PACMSMiddleware(3_000, tool_loop=ToolLoopOptions(sidecar_store=store))]
    agent = create_agent(RecordingChatModel(script=script), [read_file], middleware=mw, store=store)
    state = agent.invoke({"messages": [HumanMessage("read every module")]}, {"recursion_limit": 50})
    recovered = [
        m for m in state["messages"] if isinstance(m, ToolMessage) and m.tool_call_id in shown
    ]
    assert len(recovered) == len(shown)
    for message in recovered:
        assert message.status == "success", message.content
        for result in json.loads(recovered_output(message.content)):  # each result, exact
            assert result["content"] == module_text(int(result["tool_call_id"][1:]))


@pytest.mark.parametrize("hidden", [False, True], ids=["tool-offered", "tool-hidden"])
def test_stubs_are_sent_only_when_the_model_can_call_recover_context(hidden):
    """A middleware that takes recover_context out of the request: no stub names it then."""

    @wrap_model_call
    def without_recover(request, handler):
        tools = [t for t in request.tools if getattr(t, "name", "") != RECOVER_TOOL_NAME]
        return handler(request.override(tools=tools) if hidden else request)

    store = InMemoryStore()

    def script(messages, index):
        if index < 10:
            path = f"src/module_{index}.py"
            return AIMessage("", tool_calls=[call("read_file", {"path": path}, f"c{index}")])
        return AIMessage("done")

    model = RecordingChatModel(script=script)
    mw = [without_recover, PACMSMiddleware(2_000, tool_loop=ToolLoopOptions(sidecar_store=store))]
    agent = create_agent(model, [read_file], middleware=mw, store=store)
    agent.invoke({"messages": [HumanMessage("read every module")]}, {"recursion_limit": 50})
    stubs = sum(1 for m in model.received[-1] if STUB.search(str(m.content)))
    assert (stubs == 0) if hidden else (stubs > 0)
