"""The lifecycle in real agents: create_agent with LifecycleMiddleware, and a hand-built graph.

A fake chat model (the only fake part) reads a big JSON file, answers, and on the next question
finds the fold stub in its context and calls ``recover_context``; the tool result must be the
exact original payload.
"""

import asyncio
import base64
import hashlib
import inspect
import io
import json
import re
import uuid
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.memory import InMemoryStore
from pacms_fakes import EventCollector, RecordingChatModel, call, classic

from langchain_pacms.lifecycle import (
    COMMIT_EVENT,
    RECOVER_TOOL_NAME,
    create_lifecycle_node,
    make_recover_tool,
    provider_problems,
)

pytest.importorskip("langchain.agents", reason="LifecycleMiddleware needs the middleware extra")

PAYLOAD = json.dumps(
    {"rows": [{"id": f"k{i}", "value": f"v-{i}-é✓", "note": "x" * 40} for i in range(300)]},
    ensure_ascii=False,
)

STUB = re.compile(r'recover_context\("([^"]+)"\)')


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return PAYLOAD


def respond(messages: list[BaseMessage], index: int) -> AIMessage:
    last = messages[-1]
    if isinstance(last, ToolMessage):
        if last.name == RECOVER_TOOL_NAME:
            body = str(last.content)
            if "restored in place" in body:  # the payload is back in the read_file result
                body = str(_tool_results(messages, "read_file")[0].content)
            row = json.loads(body)["rows"][77]
            return AIMessage(f"k77 is {row['value']}")
        return AIMessage("I read data.json.")
    if "k77" in str(last.content):
        stubs = [m for m in messages if isinstance(m, ToolMessage) and STUB.search(str(m.content))]
        if stubs:
            object_id = STUB.search(str(stubs[0].content)).group(1)  # type: ignore[union-attr]
            return AIMessage(
                "", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": object_id}, f"r{index}")]
            )
        return AIMessage("the file is still in my context")
    return AIMessage("", tool_calls=[call("read_file", {"path": "data.json"}, f"c{index}")])


def thanks(messages: list[BaseMessage], index: int) -> AIMessage:
    """:func:`respond`, but "thanks" is answered without a tool call (a turn that only commits)."""
    said = messages[-1]
    return AIMessage("glad to help") if said.text == "thanks" else respond(messages, index)


def _tool_results(messages: list[BaseMessage], name: str) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage) and m.name == name]


def _check_run(model: RecordingChatModel, state: dict[str, Any]) -> None:
    messages = state["messages"]
    (recovered,) = _tool_results(messages, RECOVER_TOOL_NAME)
    assert recovered.content == PAYLOAD  # byte for byte
    assert messages[-1].content == "k77 is v-77-é✓"
    (read,) = _tool_results(messages, "read_file")
    assert str(read.content).startswith("[folded: ")  # committed to the state
    assert "k10" in str(read.content)  # the stub carries the payload's locators
    (reader,) = [
        m
        for m in messages
        if isinstance(m, AIMessage) and any(c["id"] == read.tool_call_id for c in m.tool_calls)
    ]
    assert reader.tool_calls[0]["args"] == {"path": "data.json"}  # its call stays in view
    question_call = model.received[2]  # the first call of turn 2 saw the stub, not the payload
    assert all(PAYLOAD not in str(m.content) for m in question_call)
    assert provider_problems(messages) == []


def test_create_agent_folds_at_the_turn_boundary_and_recovers_exactly():
    from langchain.agents import create_agent

    from langchain_pacms.lifecycle import LifecycleMiddleware

    model = RecordingChatModel(script=respond)
    store = InMemoryStore()
    lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0), store=store)
    agent = create_agent(model, [read_file], middleware=[lifecycle], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "job-1"}}
    events = EventCollector()
    agent.invoke({"messages": [HumanMessage("read data.json")]}, config)
    state = agent.invoke(
        {"messages": [HumanMessage("what is k77?")]}, {**config, "callbacks": [events]}
    )
    assert RECOVER_TOOL_NAME in [getattr(t, "name", "") for t in model.bound_tools]
    _check_run(model, state)
    assert lifecycle.harness.stats.commits == 1
    assert lifecycle.harness.sidecars("job-1").list_ids() == ["function:tool:1"]
    assert [name for name, _ in events.events if name == COMMIT_EVENT] == [COMMIT_EVENT]
    assert state["pacms_lifecycle_ids"][read_id(state)] == "function:tool:1"


def test_without_a_store_of_its_own_the_lifecycle_folds_into_the_agents_store():
    # two workers (new middleware and model each) share the agent's store and checkpointer:
    # the first folds at the turn boundary, the second recovers the payload byte for byte
    from langchain.agents import create_agent

    from langchain_pacms.lifecycle import LifecycleMiddleware, SidecarStore

    store, saver = InMemoryStore(), InMemorySaver()

    def worker() -> tuple[RecordingChatModel, Any]:
        model = RecordingChatModel(script=thanks)
        lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0))
        agent = create_agent(
            model, [read_file], middleware=[lifecycle], store=store, checkpointer=saver
        )
        return model, agent

    config: Any = {"configurable": {"thread_id": "job-3"}}
    _, first = worker()
    first.invoke({"messages": [HumanMessage("read data.json")]}, config)
    first.invoke({"messages": [HumanMessage("thanks")]}, config)  # the fold commits here
    assert SidecarStore(store, "job-3").list_ids() == ["function:tool:1"]
    model, second = worker()
    state = second.invoke({"messages": [HumanMessage("what is k77?")]}, config)
    (recovered,) = _tool_results(state["messages"], RECOVER_TOOL_NAME)
    assert recovered.content == PAYLOAD
    assert state["messages"][-1].content == "k77 is v-77-é✓"
    assert all(PAYLOAD not in str(m.content) for m in model.received[0])


def test_an_agent_built_again_per_request_without_any_store_recovers_earlier_folds():
    # a web app's pattern: one checkpointer, a new agent (and middleware) for every request,
    # no store anywhere; the sidecars live in the process's one fallback store
    from langchain.agents import create_agent

    from langchain_pacms.lifecycle import LifecycleMiddleware

    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": f"per-request-{uuid.uuid4()}"}}

    def request(text: str) -> dict[str, Any]:
        lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0))
        model = RecordingChatModel(script=thanks)
        agent = create_agent(model, [read_file], middleware=[lifecycle], checkpointer=saver)
        return agent.invoke({"messages": [HumanMessage(text)]}, config)

    request("read data.json")
    request("thanks")  # the fold commits here
    state = request("what is k77?")
    (recovered,) = _tool_results(state["messages"], RECOVER_TOOL_NAME)
    assert recovered.content == PAYLOAD
    assert state["messages"][-1].content == "k77 is v-77-é✓"


def screenshot_blocks() -> list[dict[str, Any]]:
    """A 1920x1080 PNG screenshot as a tool's content blocks (text, then the image)."""
    image = pytest.importorskip("PIL.Image", reason="Pillow (a dependency of the plot extra)")
    out = io.BytesIO()
    image.new("RGB", (1920, 1080), "navy").save(out, "PNG")
    data = base64.b64encode(out.getvalue()).decode()
    return [
        {"type": "text", "text": "login page, 1920x1080"},
        {"type": "image", "base64": data, "mime_type": "image/png"},
    ]


def test_a_folded_screenshot_comes_back_as_an_image():
    # a tool result of blocks with an image: folded into the store, recovered as those blocks
    # (not as their JSON text, which would cost the base64's tokens and show no image)
    from langchain.agents import create_agent

    from langchain_pacms.lifecycle import LifecycleMiddleware
    from langchain_pacms.messages.media import IMAGE_TOKENS
    from langchain_pacms.messages.text import message_tokens
    from langchain_pacms.tokens import TokenCounter

    shot = screenshot_blocks()

    @tool
    def screenshot() -> list[dict[str, Any]]:
        """Capture the screen."""
        return shot

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage("I see the login page.")
        if last.text == "thanks":
            return AIMessage("glad to help")
        if "screen" in last.text and "again" in last.text:
            stub = next(m for m in messages if STUB.search(str(m.content)))
            object_id = STUB.search(str(stub.content)).group(1)  # type: ignore[union-attr]
            return AIMessage(
                "", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": object_id}, "r1")]
            )
        return AIMessage("Looking.", tool_calls=[call("screenshot", {}, f"s{index}")])

    store = InMemoryStore()
    lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0))
    agent = create_agent(
        RecordingChatModel(script=script),
        [screenshot],
        middleware=[lifecycle],
        store=store,
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "shots"}}
    for said in ("take a screenshot", "thanks", "show me the screen again"):
        state = agent.invoke({"messages": [HumanMessage(said)]}, config)
    (folded,) = _tool_results(state["messages"], "screenshot")
    assert str(folded.content).startswith("[folded: ")
    (recovered,) = _tool_results(state["messages"], RECOVER_TOOL_NAME)
    assert isinstance(recovered.content, list) and recovered.content[-2:] == shot
    assert message_tokens(recovered, TokenCounter()) < 200 + IMAGE_TOKENS


def read_id(state: dict[str, Any]) -> str:
    return str(_tool_results(state["messages"], "read_file")[0].id)


def test_create_agent_async_with_selection_in_the_same_agent():
    from langchain.agents import create_agent

    from langchain_pacms.integrations import PACMSMiddleware
    from langchain_pacms.lifecycle import LifecycleMiddleware

    model = RecordingChatModel(script=respond)
    lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0))
    agent = create_agent(
        model,
        [read_file],
        middleware=[lifecycle, PACMSMiddleware(budget=30_000)],
    )

    async def run() -> dict[str, Any]:
        first = await agent.ainvoke({"messages": [HumanMessage("read data.json")]})
        return await agent.ainvoke({"messages": [*first["messages"], HumanMessage("what is k77?")]})

    state = asyncio.run(run())
    _check_run(model, state)  # no checkpointer: the "default" thread


def test_selection_with_fold_stubs_beside_the_lifecycle_on_one_store():
    from langchain.agents import create_agent

    from langchain_pacms.integrations import PACMSMiddleware, ToolLoopOptions
    from langchain_pacms.lifecycle import LifecycleMiddleware

    model = RecordingChatModel(script=respond)
    store = InMemoryStore()
    lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0), store=store)
    selection = PACMSMiddleware(30_000, tool_loop=ToolLoopOptions(sidecar_store=store))
    agent = create_agent(
        model, [read_file], middleware=[lifecycle, selection], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "job-2"}}
    agent.invoke({"messages": [HumanMessage("read data.json")]}, config)
    state = agent.invoke({"messages": [HumanMessage("what is k77?")]}, config)
    names = [getattr(t, "name", "") for t in model.bound_tools]
    assert names.count(RECOVER_TOOL_NAME) == 1  # one tool of the name, reading the shared store
    _check_run(model, state)  # the lifecycle's fold comes back through it byte for byte


@pytest.mark.parametrize(("shared", "own_tool"), [(True, False), (False, False), (True, True)])
def test_middlewares_folding_to_two_stores_are_told_on_the_first_call(shared, own_tool, caplog):
    from langchain.agents import create_agent

    from langchain_pacms.integrations import PACMSMiddleware, ToolLoopOptions
    from langchain_pacms.lifecycle import LifecycleMiddleware

    store = InMemoryStore()
    lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0), store=store)
    other = store if shared else InMemoryStore()
    selection = PACMSMiddleware(30_000, tool_loop=ToolLoopOptions(sidecar_store=other))
    model = RecordingChatModel(script=respond)
    tools = [read_file, make_recover_tool(InMemoryStore())] if own_tool else [read_file]
    agent = create_agent(model, tools, middleware=[lifecycle, selection])
    with caplog.at_level("WARNING"):
        agent.invoke({"messages": [HumanMessage("read data.json")]})
    warned = [r.getMessage() for r in caplog.records if "cannot be recovered" in r.getMessage()]
    if own_tool:  # a tool passed in tools wins the name over both middlewares' tools
        assert [w.split(":")[0] for w in warned] == ["LifecycleMiddleware", "PACMSMiddleware"]
    elif shared:
        assert warned == []
    else:  # the selection's tool won the name: the lifecycle's folds are out of its reach
        assert warned == [
            "LifecycleMiddleware: the agent's recover_context reads another store "
            "(InMemoryStore) than the one these payloads are written to (InMemoryStore), so "
            "they cannot be recovered; an agent keeps one tool per name: give every "
            "middleware that folds the same store"
        ]


def test_no_warning_when_the_lifecycle_follows_the_agents_store_the_selection_writes_to(caplog):
    from langchain.agents import create_agent

    from langchain_pacms.integrations import PACMSMiddleware, ToolLoopOptions
    from langchain_pacms.lifecycle import LifecycleMiddleware

    store = InMemoryStore()
    lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0))
    selection = PACMSMiddleware(30_000, tool_loop=ToolLoopOptions(sidecar_store=store))
    model = RecordingChatModel(script=respond)
    agent = create_agent(model, [read_file], middleware=[lifecycle, selection], store=store)
    with caplog.at_level("WARNING"):
        agent.invoke({"messages": [HumanMessage("read data.json")]})
    assert not [r for r in caplog.records if "cannot be recovered" in r.getMessage()]
    lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0))
    other = create_agent(model, [read_file], middleware=[lifecycle, selection])  # no store
    with caplog.at_level("WARNING"):
        other.invoke({"messages": [HumanMessage("read data.json")]})
    assert [r for r in caplog.records if "cannot be recovered" in r.getMessage()]


@pytest.mark.parametrize("own_store", [True, False])
def test_hand_built_graph_with_the_lifecycle_node_and_the_selection_hook(own_store):
    # without a store of its own the node folds into the graph's (compile(store=...)), which
    # the tool built on the node's harness store reads too
    from langchain_pacms.integrations import create_pacms_hook
    from langchain_pacms.lifecycle import SidecarStore

    class State(MessagesState):
        pacms_lifecycle_ids: dict[str, str]
        llm_input_messages: list[AnyMessage]

    store = InMemoryStore()
    node = create_lifecycle_node(planner=classic(keep_recent=0), store=store if own_store else None)
    recover = make_recover_tool(node.harness.store)  # type: ignore[attr-defined]
    model = RecordingChatModel(script=respond)
    model.bind_tools([read_file, recover])

    def agent(state: State) -> dict[str, Any]:  # the model sees what the hook selected
        return {"messages": [model.invoke(state["llm_input_messages"])]}

    graph = StateGraph(State)
    graph.add_node("lifecycle", node)  # 1. edits the state at boundaries
    graph.add_node("select", create_pacms_hook(budget=30_000))  # 2. picks this call's view
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([read_file, recover]))
    graph.add_edge(START, "lifecycle")
    graph.add_edge("lifecycle", "select")
    graph.add_edge("select", "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "lifecycle")
    app = graph.compile(checkpointer=InMemorySaver(), store=None if own_store else store)
    config: Any = {"configurable": {"thread_id": "g1"}}
    app.invoke({"messages": [HumanMessage("read data.json")]}, config)
    state = app.invoke({"messages": [HumanMessage("what is k77?")]}, config)
    _check_run(model, state)
    assert node.harness.stats.commits == 1  # type: ignore[attr-defined]
    assert SidecarStore(store, "g1").list_ids() == ["function:tool:1"]


def test_recovery_can_reactivate_the_object_in_the_state():
    from langchain.agents import create_agent

    from langchain_pacms.lifecycle import LifecycleMiddleware

    model = RecordingChatModel(script=respond)
    lifecycle = LifecycleMiddleware(planner=classic(keep_recent=0), reactivate=True)
    agent = create_agent(model, [read_file], middleware=[lifecycle], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "job-2"}}
    agent.invoke({"messages": [HumanMessage("read data.json")]}, config)
    state = agent.invoke({"messages": [HumanMessage("what is k77?")]}, config)
    (read,) = _tool_results(state["messages"], "read_file")
    assert read.content == PAYLOAD  # back in place, byte for byte
    (note,) = _tool_results(state["messages"], RECOVER_TOOL_NAME)
    assert "restored in place" in str(note.content) and PAYLOAD not in str(note.content)
    assert provider_problems(state["messages"]) == []


@tool
def search(q: str) -> str:
    """Search the index."""
    return "\n".join(f"/srv/{q}/file_{i}.py: value {q}-{i * 37}" for i in range(80))


def searched(object_id: str) -> str:
    """What ``search`` returned for the round ``object_id`` names (``function:tool:<n>``)."""
    return str(search.invoke({"q": f"q{int(object_id.rsplit(':', 1)[1]) - 1}"}))


def restoring_agent(script: Any, ask: str) -> RecordingChatModel:
    """Run ``ask`` through ``search`` in an agent that restores in place and selects per call."""
    from langchain.agents import create_agent

    from langchain_pacms.integrations import PACMSMiddleware
    from langchain_pacms.lifecycle import LifecycleMiddleware

    model = RecordingChatModel(script=script)
    middleware = [LifecycleMiddleware(reactivate=True), PACMSMiddleware(4000)]
    agent = create_agent(model, [search], middleware=middleware, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": f"restored-{uuid.uuid4()}"}}
    agent.invoke({"messages": [HumanMessage(ask)]}, config)
    return model


def test_a_round_restored_in_place_is_kept_by_the_selection_of_the_next_call():
    # the tool's result only points at the restored round: the selection must keep that round
    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        if index < 6:
            return AIMessage("", tool_calls=[call("search", {"q": f"q{index}"}, f"s{index}")])
        if index == 6:
            found = next(f for m in messages if (f := STUB.search(str(m.content))))
            return AIMessage("", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": found[1]}, "r")])
        return AIMessage("done")

    model = restoring_agent(script, "search q0..q5, then read one back")
    shown = next(f for m in model.received[6] if (f := STUB.search(str(m.content))))[1]
    after = model.received[7]  # the call right after the recovery
    assert any(isinstance(m, ToolMessage) and m.content == searched(shown) for m in after)
    assert provider_problems(after) == []


def test_rounds_restored_in_one_turn_keep_the_newest_and_point_at_the_rest():
    # three rounds restored in place at once, room for two: the newest recoveries' rounds are
    # sent whole; the oldest's recovery result no longer says it is in the history above, and
    # recovering it again returns its payload
    from langchain_pacms.lifecycle import restored_note

    stubs: list[str] = []

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        if index < 8:
            return AIMessage("", tool_calls=[call("search", {"q": f"q{index}"}, f"s{index}")])
        if index == 8:
            found = (f[1] for m in messages for f in STUB.finditer(str(m.content)))
            stubs.extend(dict.fromkeys(found))
            asks = [call(RECOVER_TOOL_NAME, {"object_id": o}, f"r{n}") for n, o in enumerate(stubs)]
            return AIMessage("", tool_calls=asks)
        if index in (9, 10):  # two more steps: the recoveries are no longer the newest
            return AIMessage("", tool_calls=[call("search", {"q": f"q{index}"}, f"s{index}")])
        if index == 11:
            return AIMessage("", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": stubs[0]}, "r")])
        return AIMessage("done")

    model = restoring_agent(script, "search q0..q7, then read back what you need")
    assert len(stubs) == 3
    oldest, *newest = stubs
    for after in model.received[9:12]:  # each call of the turn after the three recoveries
        sent = {str(m.content) for m in after if isinstance(m, ToolMessage)}
        assert all(restored_note(o) not in sent or searched(o) in sent for o in stubs)
        assert searched(oldest) not in sent and restored_note(oldest, sent=False) in sent
        assert provider_problems(after) == []
    sent = {str(m.content) for m in model.received[9] if isinstance(m, ToolMessage)}
    assert all(searched(o) in sent and restored_note(o) in sent for o in newest)
    again = [m for m in model.received[12] if isinstance(m, ToolMessage) and m.tool_call_id == "r"]
    assert [m.content for m in again] == [searched(oldest)]  # the tool's result, byte for byte


def recovering_reader(topic: str, search: Any, recovered: dict[str, tuple[str, str, Any]]) -> Any:
    """A model script: 8 searches, then ``recover_context`` of the first stub it was shown.

    ``recovered[topic]`` gets ``(id, the payload the stub stood for, the tool's answer)``.
    """
    first: list[tuple[str, str]] = []
    calls = [0]  # the selection may leave earlier steps out: steps are counted here

    def reply(messages: list[BaseMessage], index: int) -> AIMessage:
        asked = {c["id"]: c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
        for m in messages if not first else ():
            if isinstance(m, ToolMessage) and (found := STUB.search(str(m.content))):
                first.append((found[1], search.invoke(asked[m.tool_call_id]["args"])))
                break
        step, calls[0] = calls[0], calls[0] + 1
        if step < 8:
            args = {"path": f"{topic}/{step}"}
            return AIMessage("", tool_calls=[call(search.name, args, f"{topic}{step}")])
        if step == 8:
            args = {"object_id": first[0][0]}
            return AIMessage("", tool_calls=[call(RECOVER_TOOL_NAME, args, f"{topic}r")])
        recovered[topic] = (*first[0], messages[-1])
        return AIMessage("done")

    return reply


@tool
def search_parts(path: str) -> str:
    """Search the index."""
    topic, n = path.split("/")
    return "\n".join(f"/srv/{topic}/part{n}/file_{i}.py: {topic}-{n}-{i * 37}" for i in range(80))


def test_subagents_called_from_a_tool_recover_their_own_pruned_stubs():
    # each subagent inherits the parent's thread id (one sidecar namespace) and numbers its
    # rounds from 1; a stub it saw was pruned later (max_stubs=1), so recovery has no hash
    from langchain.agents import create_agent

    from langchain_pacms.lifecycle import HeuristicPlanner, LifecycleMiddleware, PlannerTuning

    store = InMemoryStore()
    recovered: dict[str, tuple[str, str, Any]] = {}

    def lifecycle() -> LifecycleMiddleware:
        planner = HeuristicPlanner(tuning=PlannerTuning(max_stubs=1))
        return LifecycleMiddleware(store=store, planner=planner)

    @tool
    def research(topic: str) -> str:
        """Delegate to a research subagent."""
        model = RecordingChatModel(script=recovering_reader(topic, search_parts, recovered))
        sub = create_agent(model, [search_parts], middleware=[lifecycle()])
        return str(
            sub.invoke({"messages": [HumanMessage(f"Research {topic}")]})["messages"][-1].content
        )

    def main(messages: list[BaseMessage], index: int) -> AIMessage:
        topics = ["alpha", "beta", "gamma"]
        if index < len(topics):
            return AIMessage(
                "", tool_calls=[call("research", {"topic": topics[index]}, f"r{index}")]
            )
        return AIMessage("all done")

    agent = create_agent(
        RecordingChatModel(script=main),
        [research],
        middleware=[lifecycle()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    agent.invoke(
        {"messages": [HumanMessage("research three topics")]}, {"configurable": {"thread_id": "t1"}}
    )
    assert sorted(recovered) == ["alpha", "beta", "gamma"]
    for _, expected, answer in recovered.values():
        assert answer.status == "success" and answer.content == expected


def test_a_branch_of_a_forked_thread_recovers_its_own_pruned_stub():
    # main and a branch forked before the first read each fold their own function:tool:1; a
    # later commit prunes the stub (max_stubs=1), so the recovery has no hash to go by
    from langchain.agents import create_agent

    from langchain_pacms.lifecycle import HeuristicPlanner, LifecycleMiddleware, PlannerTuning

    recovered: dict[str, tuple[str, str, Any]] = {}  # topic -> (id, payload, the answer)
    model = RecordingChatModel(script=recovering_reader("main", search_parts, recovered))
    planner = HeuristicPlanner(tuning=PlannerTuning(max_stubs=1))
    store = InMemoryStore()
    lifecycle = LifecycleMiddleware(store=store, planner=planner)
    agent = create_agent(
        model, [search_parts], middleware=[lifecycle], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": f"fork-{uuid.uuid4()}"}}
    agent.invoke({"messages": [HumanMessage("search")]}, config)
    start = [h for h in agent.get_state_history(config) if h.next == ("model",)][-1]  # oldest
    model.script = recovering_reader("branch", search_parts, recovered)
    branch = agent.update_state(start.config, {"messages": [HumanMessage("search again")]})
    agent.invoke(None, branch)
    assert sorted(recovered) == ["branch", "main"]
    (main_id, main_payload, _), (branch_id, branch_payload, _) = recovered.values()
    assert main_id == branch_id and main_payload != branch_payload  # one id, two payloads
    for _, expected, answer in recovered.values():
        assert answer.status == "success" and answer.content == expected


def _lookup_record(path: str) -> str:
    return "\n".join(f"{path} line {k}: key_{k} = {k * 1000 + 7}" for k in range(15))


def test_a_reactivated_round_stays_in_view_until_the_next_user_turn():
    """In a tool loop the default commits after tool results: a round restored in place must
    not be folded again at the next step (it was), only after the next user message."""
    from langchain.agents import create_agent

    from langchain_pacms.lifecycle import LifecycleMiddleware

    @tool
    def lookup(path: str) -> str:
        """Look up a record."""
        return _lookup_record(path)

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        if index < 8 or 10 <= index < 14:
            step = index if index < 8 else index - 2
            return AIMessage(
                f"step {step}", tool_calls=[call("lookup", {"path": f"r{step}.txt"}, f"c{step}")]
            )
        if index == 8:
            found = next(f for m in messages if (f := STUB.search(str(m.content))))
            return AIMessage("", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": found[1]}, "r")])
        return AIMessage("done")

    store = InMemoryStore()
    model = RecordingChatModel(script=script)
    lifecycle = LifecycleMiddleware(store=store, reactivate=True)  # the default commit rule
    agent = create_agent(
        model, [lookup], middleware=[lifecycle], checkpointer=InMemorySaver(), store=store
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("look up 8 records")]}, config)
    restored = _lookup_record("r0.txt")
    assert any(restored == m.content for m in model.received[9])  # the next call sees it
    agent.invoke({"messages": [HumanMessage("four more")]}, config)
    assert all(restored not in str(m.content) for m in model.received[-1])  # folded again later
    # so its recovery's result no longer says it is in the history above
    notes = [
        str(m.content) for m in model.received[-1] if getattr(m, "name", "") == RECOVER_TOOL_NAME
    ]
    assert len(notes) == 1 and "not whole here" in notes[0]


def test_unknown_or_conflicting_options_fail_at_construction():
    from langchain_pacms.lifecycle import (
        CommitRule,
        HarnessOptions,
        LifecycleHarness,
        LifecycleMiddleware,
    )

    options = "planner, store, commit, masking, token_counter, log"
    with pytest.raises(
        TypeError,
        match=re.escape(
            "LifecycleMiddleware() got an unknown keyword: treshold. Its keywords are harness, "
            f"recover_tool, reactivate, {options}"
        ),
    ):
        LifecycleMiddleware(treshold=0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown keyword: memory_namespace, threshold"):
        create_lifecycle_node(memory_namespace=("x",), threshold=0.3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=re.escape(f"are harness, messages_key, {options}")):
        create_lifecycle_node(boundary="tool")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="not both"):
        LifecycleMiddleware(LifecycleHarness(classic()), store=InMemoryStore())
    node = create_lifecycle_node(commit=CommitRule(boundary="tool"))
    assert node.harness.commit.boundary == "tool"  # type: ignore[attr-defined]
    # every option is a keyword of the harness it builds
    harness_keywords = set(inspect.signature(LifecycleHarness).parameters) - {"planner"}
    assert set(HarnessOptions.__optional_keys__) - {"planner"} == harness_keywords


SHARED_PROMPT = SystemMessage("You read logs.")  # one object for every run, as apps keep it


@tool
def query_logs(query: str) -> str:
    """Search the logs."""
    lines = (hashlib.sha256(f"{query}:{i}".encode()).hexdigest()[:12] for i in range(120))
    return "\n".join(f"{i:04d} {query} INFO req={h}" for i, h in enumerate(lines))


def log_reader(store: InMemoryStore, owner: str, steps: int, recover: str | None = None) -> Any:
    """A graph (no checkpointer) whose model searches ``owner``'s logs ``steps`` times, then
    recovers ``recover``."""

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        n = sum(isinstance(m, AIMessage) for m in messages) + 1
        if n <= steps:
            query = f"{owner} request {n}"
            return AIMessage("", tool_calls=[call("query_logs", {"query": query}, f"c{n}")])
        if n == steps + 1 and recover is not None:
            return AIMessage("", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": recover}, "r")])
        return AIMessage("done")

    model = RecordingChatModel(script=script)
    graph = StateGraph(MessagesState)
    graph.add_node("lifecycle", create_lifecycle_node())
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([query_logs, make_recover_tool(store)]))
    graph.add_edge(START, "lifecycle")
    graph.add_edge("lifecycle", "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "lifecycle")
    return graph.compile(store=store)


def test_runs_without_a_thread_id_that_share_their_first_message_keep_apart():
    # LangGraph writes an id into a message object given without one, so every run started with
    # the same prompt object had the same first message id, hence one namespace: a run could
    # recover another's payload by an id it never had
    store, ran = InMemoryStore(), {}
    for owner, steps, recover in (("alice", 8, None), ("bob", 1, "function:tool:5")):
        ran[owner] = log_reader(store, owner, steps, recover).invoke(
            {"messages": [SHARED_PROMPT, HumanMessage(f"read the logs of {owner}")]},
            {"recursion_limit": 100},
        )["messages"]
    assert SHARED_PROMPT.id is not None and ran["alice"][0].id == ran["bob"][0].id
    assert any(STUB.search(str(m.content)) for m in ran["alice"])  # alice's logs folded
    (answer,) = _tool_results(ran["bob"], RECOVER_TOOL_NAME)
    assert answer.status == "error" and "alice request" not in str(answer.content)


@pytest.mark.parametrize("summarize_first", [True, False])
def test_stubs_stay_recoverable_beside_langchains_summarization(summarize_first):
    # the summarization replaces the history (its older part by a summary): every stub the model
    # still sees, before or after it ran, gives back its own search's payload
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from langchain_pacms.lifecycle import LifecycleMiddleware

    seen: list[ToolMessage] = []

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        if isinstance(messages[-1], ToolMessage) and messages[-1].name == RECOVER_TOOL_NAME:
            seen.append(messages[-1])
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        if [m for m in messages if isinstance(m, HumanMessage)][-1].text == "now recover":
            asked = {r.tool_call_id for r in seen}
            for m in messages:
                stub = STUB.search(m.text) if isinstance(m, ToolMessage) else None
                if stub and m.name == "query_logs" and f"r-{stub.group(1)}" not in asked:
                    args = {"object_id": stub.group(1)}
                    return AIMessage(
                        "", tool_calls=[call(RECOVER_TOOL_NAME, args, f"r-{args['object_id']}")]
                    )
            return AIMessage("recovered")
        done = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        if done < 10 * turn:
            query = f"turn {turn} search {done}"
            return AIMessage("", tool_calls=[call("query_logs", {"query": query}, f"c{index}")])
        return AIMessage("done")

    summary = GenericFakeChatModel(messages=iter([AIMessage("earlier: log searches")] * 20))
    summarize = SummarizationMiddleware(summary, trigger=("messages", 30), keep=("messages", 12))
    life = LifecycleMiddleware()
    agent = create_agent(
        RecordingChatModel(script=script),
        tools=[query_logs],
        middleware=[summarize, life] if summarize_first else [life, summarize],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": f"summ-{summarize_first}"}, "recursion_limit": 200}
    for text in ("search the logs", "search again", "now recover"):
        agent.invoke({"messages": [HumanMessage(text)]}, config)
    assert len(seen) >= 3
    for answer in seen:
        query = answer.text.split("\n")[0].split(" INFO ")[0][5:]
        assert answer.status == "success" and answer.text == query_logs.invoke({"query": query})
