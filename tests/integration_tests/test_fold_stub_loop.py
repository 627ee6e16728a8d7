"""One task, a hundred tool calls, with fold stubs: dropped outputs stay recoverable.

With ``fold_stubs=True`` a tool span the selector does not keep whole may reach the model as its
lifecycle fold stub. These runs check, on every model call of a real agent (LangGraph hook and
LangChain v1 middleware, fake chat models): the budget holds on what is sent, stubs included;
tool calls keep their results; every stub the model sees already has its exact payload in the
sidecar store; and the model recovers a stubbed output byte for byte with ``recover_context``.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore
from pacms_fakes import (
    LOOP_BUDGET,
    LOOP_CALLS,
    LOOP_SYSTEM,
    LOOP_TASK,
    EventCollector,
    RecordingChatModel,
    assert_loop_calls_fit,
    call,
    create_react_agent,
    loop_run,
    module_number,
    module_reader,
    module_text,
    read_module,
    slow_examples,
)

from langchain_pacms import ContextSelector, SelectionConfig, ToolLoopOptions
from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.lifecycle import RECOVER_TOOL_NAME, SidecarStore, make_recover_tool

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

THREAD = "loop-7"
MARKS = "\x00 é"  # in every module's first line: recovered byte for byte
STUB = re.compile(r'\[folded: .*?recover_context\("(function:tool:\d+)"\)', re.S)


read_file = module_reader(MARKS)


class StubChecker:
    """The fake model's script: reads modules, then recovers the newest stubbed output it sees.

    On every call it checks that each stub it receives points at a payload already in the
    sidecar store, equal to the output the stub replaced.
    """

    def __init__(self, store: InMemoryStore) -> None:
        self.sidecars = SidecarStore(store, THREAD)
        self.stubs_seen = 0
        self.wanted: tuple[str, int] | None = None  # (object id, module) of a stub seen last
        self.recovered: tuple[int, str] | None = None

    def __call__(self, messages: list[BaseMessage], index: int) -> AIMessage:
        outputs = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
        for m in messages:
            for c in getattr(m, "tool_calls", None) or []:
                found = STUB.search(str(outputs[c["id"]].content))
                if found is None or c["name"] != "read_file":
                    continue
                self.stubs_seen += 1
                n = module_number(c["args"]["path"])
                payload = json.loads(self.sidecars.get(found.group(1)).payload)
                assert payload["results"] == module_text(n, MARKS)  # the call's text is folded too
                assert payload["tool_calls"][0]["args"] == c["args"]
                self.wanted = self.wanted if index == LOOP_CALLS + 1 else (found.group(1), n)
        if index < LOOP_CALLS:
            return read_module(index)
        assert self.wanted is not None
        if index == LOOP_CALLS:  # get a stubbed output back
            args = {"object_id": self.wanted[0]}
            return AIMessage("", tool_calls=[call(RECOVER_TOOL_NAME, args, "r1")])
        self.recovered = (self.wanted[1], str(messages[-1].content))
        return AIMessage("module_37 raises QuotaError.")


def _check(
    model: RecordingChatModel, script: StubChecker, events: list[dict[str, Any]], counter: Any
) -> None:
    assert len(model.received) == LOOP_CALLS + 2
    assert_loop_calls_fit(model, counter)
    assert not any(e["over_budget"] for e in events)
    assert script.stubs_seen > 5 * LOOP_CALLS  # most calls see several stubs (970 in 102 calls now)
    assert script.recovered is not None
    module, payload = script.recovered
    assert json.loads(payload)["results"] == module_text(module, MARKS)  # NUL and accent included
    assert events[-1]["mandatory"].endswith("oldest first (the stub floor)")
    folded = events[-1]["folded"]
    assert folded and all(i.startswith("function:tool:") for i in folded)


def _agent_inputs() -> tuple[StubChecker, RecordingChatModel, list[Any], SelectionConfig]:
    """The script, its model, the tools, and the selection with fold stubs in one store."""
    store = InMemoryStore()
    script = StubChecker(store)
    config = SelectionConfig(
        budget=LOOP_BUDGET,
        selector=ContextSelector(),
        tool_loop=ToolLoopOptions(fold_stubs=True, sidecar_store=store),
    )
    return script, RecordingChatModel(script=script), [read_file], config


def test_hook_with_fold_stubs_keeps_the_budget_and_recovers_byte_for_byte():
    script, model, tools, config = _agent_inputs()
    assert config.tool_loop.sidecar_store is not None
    recover = make_recover_tool(config.tool_loop.sidecar_store)  # a hook adds no tools
    hook = create_pacms_hook(config=config)
    agent = create_react_agent(model, [*tools, recover], pre_model_hook=hook)
    collector = EventCollector()
    agent.invoke(*loop_run(collector, system=True, thread_id=THREAD))
    _check(model, script, collector.selections, config.selector.token_counter)


async def test_middleware_with_fold_stubs_async_keeps_the_budget_and_recovers():
    from langchain.agents import create_agent

    from langchain_pacms.integrations import PACMSMiddleware

    script, model, tools, config = _agent_inputs()
    middleware = PACMSMiddleware(config=config)  # brings recover_context over its store
    assert [t.name for t in middleware.tools] == [RECOVER_TOOL_NAME]
    agent = create_agent(model, tools, system_prompt=LOOP_SYSTEM, middleware=[middleware])
    collector = EventCollector()
    await agent.ainvoke(*loop_run(collector, thread_id=THREAD))
    _check(model, script, collector.selections, config.selector.token_counter)


def test_without_fold_stubs_dropped_outputs_leave_no_stub():
    model = RecordingChatModel(
        script=lambda messages, index: (
            AIMessage(
                "", tool_calls=[call("read_file", {"path": f"src/module_{index}.py"}, f"c{index}")]
            )
            if index < 30
            else AIMessage("done")
        )
    )
    hook = create_pacms_hook(budget=1_500)
    agent = create_react_agent(model, [read_file], pre_model_hook=hook)
    agent.invoke({"messages": [HumanMessage(LOOP_TASK)]}, {"recursion_limit": 200})
    assert not any(STUB.search(str(m.content)) for m in model.received[-1])
    assert len(model.received[-1]) < 61  # outputs were dropped, not stubbed


class FirstStubRecovery:
    """Reads modules, then recovers the first stubbed output it sees and keeps what came back."""

    def __init__(self, reads: int) -> None:
        self.reads = reads
        self.wanted: tuple[str, int] | None = None
        self.recovered = ""

    def __call__(self, messages: list[BaseMessage], index: int) -> AIMessage:
        if index < self.reads:
            return read_module(index)
        if index == self.reads:
            outputs = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
            self.wanted = next(
                (found.group(1), module_number(c["args"]["path"]))
                for m in messages
                for c in getattr(m, "tool_calls", None) or []
                if (found := STUB.search(str(outputs[c["id"]].content)))
            )
            args = {"object_id": self.wanted[0]}
            return AIMessage("", tool_calls=[call(RECOVER_TOOL_NAME, args, "r1")])
        self.recovered = str(messages[-1].content)
        return AIMessage("done")


@pytest.mark.parametrize("system_prompt", [LOOP_SYSTEM, None])
def test_middleware_stubs_recover_in_a_run_without_a_thread_id(system_prompt: str | None):
    # the stubs' payloads go to the thread the recover tool reads: the one named after the
    # state's first message, not the request's (which starts with the system prompt)
    from langchain.agents import create_agent

    from langchain_pacms.integrations import PACMSMiddleware

    script = FirstStubRecovery(20)
    store = InMemoryStore()
    middleware = PACMSMiddleware(1_500, tool_loop=ToolLoopOptions(sidecar_store=store))
    agent = create_agent(
        RecordingChatModel(script=script),
        [read_file],
        system_prompt=system_prompt,
        middleware=[middleware],
    )
    agent.invoke({"messages": [HumanMessage(LOOP_TASK)]}, {"recursion_limit": 100})
    assert script.wanted is not None
    assert script.recovered.startswith("{"), script.recovered
    assert json.loads(script.recovered)["results"] == module_text(script.wanted[1], MARKS)


def test_hook_writing_the_history_keeps_each_run_without_a_thread_id_apart():
    # output_key="messages" puts the memories' context message (the same id in every run)
    # first in the state; the thread is named after the message after it
    from langchain_pacms import MemoryOptions

    store = InMemoryStore()
    store.put(("memories",), "m1", {"text": "the user prefers short answers"})
    scripts = [FirstStubRecovery(20), FirstStubRecovery(20)]
    for script in scripts:
        hook = create_pacms_hook(
            config=SelectionConfig(
                budget=1_500,
                output_key="messages",
                memory=MemoryOptions([("memories",)]),
                tool_loop=ToolLoopOptions(sidecar_store=store),
            )
        )
        tools = [read_file, make_recover_tool(store)]
        model = RecordingChatModel(script=script)
        agent = create_react_agent(model, tools, pre_model_hook=hook, store=store)
        state = agent.invoke({"messages": [HumanMessage(LOOP_TASK)]}, {"recursion_limit": 100})
        assert state["messages"][0].id == "pacms-context"
        assert script.wanted is not None
        assert json.loads(script.recovered)["results"] == module_text(script.wanted[1], MARKS)
    namespaces = store.list_namespaces(prefix=("pacms_sidecar",))
    assert len(namespaces) == 2  # one per run
    assert ("pacms_sidecar", "run:pacms-context") not in namespaces


class RereadThenRecover(FirstStubRecovery):
    """Reads module 0 twice (the lifecycle prunes the first read), then recovers a stub."""

    def __call__(self, messages: list[BaseMessage], index: int) -> AIMessage:
        if index == 6:
            read = call("read_file", {"path": "src/module_0.py"}, "again")
            return AIMessage("Step 6: module 0 once more.", tool_calls=[read])
        return super().__call__(messages, index)


def test_middleware_stubs_name_spans_by_the_lifecycle_ids_after_a_prune():
    # after the lifecycle prunes a superseded read, per-call selection numbers the spans with
    # the lifecycle's ids, so recover_context finds the payload each stub stood for
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_pacms.integrations import PACMSMiddleware
    from langchain_pacms.lifecycle import LifecycleMiddleware

    script = RereadThenRecover(20)
    store = InMemoryStore()
    lifecycle = LifecycleMiddleware(store=store)
    selection = PACMSMiddleware(1_500, tool_loop=ToolLoopOptions(sidecar_store=store))
    agent = create_agent(
        RecordingChatModel(script=script),
        [read_file],
        middleware=[lifecycle, selection],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "reread"}, "recursion_limit": 100}
    state = agent.invoke({"messages": [HumanMessage(LOOP_TASK)]}, config)
    assert lifecycle.harness.stats.commits >= 1
    assert lifecycle.harness.audit("reread").list_ids()  # the first read of module 0 left
    assert script.wanted is not None
    assert json.loads(script.recovered)["results"] == module_text(script.wanted[1], MARKS)
    assert state["messages"][-1].content == "done"


class RandomReader:
    """Reads random modules (re-reads get pruned), now and then recovers a stub it sees.

    Each recovery's result is compared with the output the stub stood for.
    """

    def __init__(self, seed: int, ids: str = "unique") -> None:
        self.rng = random.Random(seed)
        self.ids = ids  # "unique", "constant" (one id for every call) or "per_round" (name:0)
        self.asked: dict[str, int] = {}  # recovery call id -> module its stub stood for
        self.right = 0
        self.wrong: list[tuple[int, str]] = []
        self.turn_start = 0

    def _stubs(self, messages: list[BaseMessage]) -> list[tuple[str, int]]:
        # a result answers its id's call in the calling message before it (ids may repeat)
        found: list[tuple[str, int]] = []
        waiting: list[dict[str, Any]] = []
        for m in messages:
            if isinstance(m, AIMessage):
                waiting = list(m.tool_calls)
            elif isinstance(m, ToolMessage):
                c = next((c for c in waiting if c["id"] == m.tool_call_id), None)
                if c is not None:
                    waiting.remove(c)
                    if c["name"] == "read_file" and (stub := STUB.search(str(m.content))):
                        found.append((stub.group(1), module_number(c["args"]["path"])))
        return found

    def _id(self, name: str, unique: str) -> str:
        return {"unique": unique, "constant": "call_0", "per_round": f"{name}:0"}[self.ids]

    def __call__(self, messages: list[BaseMessage], index: int) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage) and last.tool_call_id in self.asked:
            module = self.asked.pop(last.tool_call_id)
            body = str(last.content)
            if body.startswith("{") and json.loads(body)["results"] == module_text(module, MARKS):
                self.right += 1
            else:
                self.wrong.append((module, body[:120]))
        if isinstance(last, HumanMessage):
            self.turn_start = index
        steps = index - self.turn_start  # model calls so far in this turn
        if steps >= 12 and self.rng.random() < 0.1:
            return AIMessage("turn done")
        stubs = self._stubs(messages) if steps else []
        if stubs and (steps == 10 or self.rng.random() < 0.3):  # at least one a turn
            object_id, module = self.rng.choice(stubs)
            asked = self._id(RECOVER_TOOL_NAME, f"r{index}")
            self.asked[asked] = module  # answered by the next message
            return AIMessage(
                "", tool_calls=[call(RECOVER_TOOL_NAME, {"object_id": object_id}, asked)]
            )
        path = {"path": f"src/module_{self.rng.randrange(25)}.py"}
        read = call("read_file", path, self._id("read_file", f"c{index}"))
        return AIMessage(f"Step {index}.", tool_calls=[read])


@slow_examples(4)
@given(seed=st.integers(0, 2**32 - 1), threaded=st.booleans())
def test_every_recovery_in_an_agent_with_both_middlewares_returns_what_its_stub_stood_for(
    seed: int, threaded: bool
):
    # the lifecycle folds, masks and prunes; selection stubs what it drops; the model recovers
    # stubs of either at random, with and without a thread id, over several turns
    script = RandomReader(seed)
    agent = _agent_with_both(script, threaded=threaded)
    _three_turns(agent, script, f"soak-{seed}" if threaded else None)


class PathReader(RandomReader):
    """:class:`RandomReader` whose read calls say only which file they read (no step number)."""

    def __call__(self, messages: list[BaseMessage], index: int) -> AIMessage:
        answer = super().__call__(messages, index)
        reads = [c for c in answer.tool_calls if c["name"] == "read_file"]
        if not reads:
            return answer
        return answer.model_copy(update={"content": f"Reading {reads[0]['args']['path']}."})


@slow_examples(4)
@given(seed=st.integers(0, 2**32 - 1))
def test_recoveries_in_a_thread_forked_at_random_checkpoints_return_their_own_branchs_payload(
    seed: int,
):
    # time travel: later turns start from a random earlier checkpoint of the thread, so two
    # branches hold spans with one object id, often the same file read with the same words
    script = PathReader(seed)
    agent = _agent_with_both(script)
    config: Any = {"recursion_limit": 400, "configurable": {"thread_id": f"fork-{seed}"}}
    rng = random.Random(seed)
    for turn in range(6):
        start = config
        if turn >= 2 and rng.random() < 0.6:
            mid_run = [h.config for h in agent.get_state_history(config) if h.next]
            start = {**rng.choice(mid_run), "recursion_limit": 400}
        agent.invoke({"messages": [HumanMessage(f"Turn {turn}: go through the modules.")]}, start)
    assert script.wrong == []
    assert script.right  # recoveries happened (those of abandoned branches may be unanswered)


@slow_examples(3)
@given(seed=st.integers(0, 2**32 - 1), lifecycle=st.booleans())
def test_two_threads_doing_the_same_work_on_one_agent_each_recover_their_own(
    seed: int, lifecycle: bool
):
    # one agent serving two threads that read the same files with the same words: each
    # thread's stubs name its own messages, and each recovery returns its own payload
    readers = {tag: PathReader(seed) for tag in "AB"}

    def script(messages: list[BaseMessage], index: int) -> AIMessage:
        turn = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        return readers[turn.text[-1]](messages, index)  # the latest turn is always sent

    agent = _agent_with_both(script, lifecycle=lifecycle)
    for turn in range(3):
        for tag in "AB":
            config: Any = {"recursion_limit": 400, "configurable": {"thread_id": tag}}
            said = f"Turn {turn}: go through the modules, thread {tag}"
            agent.invoke({"messages": [HumanMessage(said)]}, config)
    for reader in readers.values():
        assert reader.wrong == []
        assert reader.right and not reader.asked


@slow_examples(3)
@given(seed=st.integers(0, 2**32 - 1), ids=st.sampled_from(["constant", "per_round"]))
def test_recoveries_return_their_own_payload_when_the_model_reuses_tool_call_ids(
    seed: int, ids: str
):
    # llama.cpp's server sends one id for every call, Kimi models "<name>:<index>" per round:
    # each result answers the call before it, and each stub still names its own payload
    script = PathReader(seed, ids)
    _three_turns(_agent_with_both(script), script, f"ids-{seed}")


def test_an_agent_rebuilt_every_turn_recovers_the_stubs_of_earlier_turns() -> None:
    # a server building the agent per request: new middleware instances, one checkpointer and
    # one agent store, which both middlewares use without a store of their own; the model's
    # call ids restart every turn, so each id recurs in the thread
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_pacms.integrations import PACMSMiddleware
    from langchain_pacms.lifecycle import GraphStore, LifecycleMiddleware

    store, saver = InMemoryStore(), InMemorySaver()
    script = PathReader(7)
    config: Any = {"recursion_limit": 400, "configurable": {"thread_id": "rebuilt"}}
    right = []
    for turn in range(3):
        selection = PACMSMiddleware(1_200, tool_loop=ToolLoopOptions(sidecar_store=GraphStore()))
        agent = create_agent(
            RecordingChatModel(script=script),
            [read_file],
            system_prompt=LOOP_SYSTEM,
            middleware=[LifecycleMiddleware(), selection],
            checkpointer=saver,
            store=store,
        )
        agent.invoke({"messages": [HumanMessage(f"Turn {turn}: go through the modules.")]}, config)
        right.append(script.right)
    assert script.wrong == []
    assert right[0] < right[1] < right[2] and not script.asked
    assert SidecarStore(store, "rebuilt").list_ids()  # the payloads are in the agent's store


def _agent_with_both(script: Any, *, threaded: bool = True, lifecycle: bool = True) -> Any:
    """A module-reading agent: ``PACMSMiddleware`` fold stubs, and the lifecycle, on one store."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_pacms.integrations import PACMSMiddleware
    from langchain_pacms.lifecycle import LifecycleMiddleware

    store = InMemoryStore()
    middleware: list[Any] = [PACMSMiddleware(1_200, tool_loop=ToolLoopOptions(sidecar_store=store))]
    if lifecycle:
        middleware.insert(0, LifecycleMiddleware(store=store))
    return create_agent(
        RecordingChatModel(script=script),
        [read_file],
        system_prompt=LOOP_SYSTEM,
        middleware=middleware,
        checkpointer=InMemorySaver() if threaded else None,
    )


def _three_turns(agent: Any, script: RandomReader, thread: str | None) -> None:
    """Three turns (without a thread id the caller passes the history back), then the checks."""
    config: Any = {"recursion_limit": 400}
    if thread is not None:
        config["configurable"] = {"thread_id": thread}
    history: list[BaseMessage] = []
    for turn in range(3):
        asked = HumanMessage(f"Turn {turn}: go through the modules.")
        state = agent.invoke({"messages": [*history, asked]}, config)
        history = [] if thread is not None else state["messages"]
    assert script.wrong == []
    assert script.right and not script.asked  # recoveries happened, and every one came back


@slow_examples(4)
@given(seed=st.integers(0, 2**32 - 1), threaded=st.booleans(), memories=st.booleans())
def test_a_hook_that_rewrites_the_history_keeps_every_stub_recoverable(
    seed: int, threaded: bool, memories: bool
):
    # output_key="messages": the selection becomes the history, so without a thread id the
    # message that names the run's sidecars (the first) is kept, turn after turn
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_pacms import MemoryOptions

    script = RandomReader(seed)
    store = InMemoryStore()
    store.put(("memories",), "m1", {"text": "the user reads modules in order"})
    hook = create_pacms_hook(
        config=SelectionConfig(
            budget=1_200,
            output_key="messages",
            memory=MemoryOptions([("memories",)]) if memories else None,
            tool_loop=ToolLoopOptions(sidecar_store=store),
        )
    )
    agent = create_react_agent(
        RecordingChatModel(script=script),
        [read_file, make_recover_tool(store)],
        pre_model_hook=hook,
        store=store,
        checkpointer=InMemorySaver() if threaded else None,
    )
    _three_turns(agent, script, f"rewrite-{seed}" if threaded else None)


def _read_step(k: int, modules: int) -> list[BaseMessage]:
    path = {"path": f"src/module_{k}.py"}
    body = "\n".join(module_text(k * 10 + r, MARKS) for r in range(modules))
    return [
        AIMessage(f"reading {k}", id=f"a{k}", tool_calls=[call("read_file", path, f"c{k}")]),
        ToolMessage(body, tool_call_id=f"c{k}", id=f"t{k}", name="read_file"),
    ]


@pytest.mark.parametrize("use_async", [False, True])
async def test_stubs_stay_recoverable_after_the_rewriting_hook_drops_the_first_message(use_async):
    # no thread id: the run's sidecars are named after its first message; once a large newest
    # step leaves no room for it, the new first message carries the run's name on
    store = InMemoryStore()
    hook = create_pacms_hook(
        config=SelectionConfig(
            budget=1_500, output_key="messages", tool_loop=ToolLoopOptions(sidecar_store=store)
        )
    )
    tool = make_recover_tool(store)
    history: list[BaseMessage] = [
        HumanMessage("background " * 400, id="h0"),
        AIMessage("noted", id="an"),
        HumanMessage("now read the modules", id="h1"),
    ]
    outputs: dict[str, str] = {}
    for k in range(8):
        history += _read_step(k, 1)
        outputs[f"c{k}"] = str(history[-1].content)

    async def hook_call(messages: list[BaseMessage]) -> list[BaseMessage]:
        state = {"messages": messages}
        update = await hook.ainvoke(state) if use_async else hook.invoke(state)
        return update["messages"][1:]  # after the removal of the old history

    first = await hook_call(history)
    assert first[0].id == "h0" and STUB.search(str([m.content for m in first]))
    for k in (9, 10):  # each newest step leaves no room for the first message
        history = await hook_call([*(first if k == 9 else history), *_read_step(k, 2)])
        assert "h0" not in [m.id for m in history]
        stubs = [
            (found.group(1), m.tool_call_id)
            for m in history
            if isinstance(m, ToolMessage) and (found := STUB.search(str(m.content)))
        ]
        assert stubs
        for object_id, call_id in stubs:
            back = tool.invoke({"object_id": object_id, "state": {"messages": history}})
            assert json.loads(back)["results"] == outputs[call_id]


@pytest.mark.parametrize(("first_words", "kept"), [(20, True), (3_000, False)])
def test_a_rewriting_hook_keeps_the_first_message_only_while_it_fits(first_words, kept):
    # without a thread id the first message names the run's sidecars, so it stays, unless it
    # would break the budget beside the mandatory part
    hook = create_pacms_hook(
        config=SelectionConfig(budget=300, output_key="messages", selector=ContextSelector())
    )
    history: list[BaseMessage] = [HumanMessage("first " * first_words, id="h0")]
    for k in range(6):
        history += [AIMessage(f"noted {k} " + "words " * 60, id=f"a{k}")]
        history += [HumanMessage(f"question {k}", id=f"h{k + 1}")]
    for thread in (None, "t1"):
        config: Any = {"configurable": {"thread_id": thread}} if thread else {}
        out = hook.invoke({"messages": history}, config)["messages"][1:]  # after the removal
        first_kept = out[0].id == "h0"
        assert first_kept is (kept and thread is None)  # with a thread id nothing changes
        assert sum(ContextSelector().count_tokens([str(m.content) for m in out])) <= 300


class IdLedger(RandomReader):
    """A :class:`RandomReader` that notes which module each stub id stood for, run-long."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.named: dict[str, set[int]] = {}

    def __call__(self, messages: list[BaseMessage], index: int) -> AIMessage:
        for object_id, module in self._stubs(messages):
            self.named.setdefault(object_id, set()).add(module)
        return super().__call__(messages, index)


@pytest.mark.parametrize("seed", [3, 7])
def test_a_hook_that_rewrites_the_history_never_gives_a_stub_id_to_another_output(seed: int):
    # once a stub left the rewritten history, its id went to a newer round: a model calling
    # recover_context with the id it had seen got that round's payload
    from langgraph.checkpoint.memory import InMemorySaver

    script = IdLedger(seed)
    store = InMemoryStore()
    hook = create_pacms_hook(
        config=SelectionConfig(
            budget=1_200, output_key="messages", tool_loop=ToolLoopOptions(sidecar_store=store)
        )
    )
    agent = create_react_agent(
        RecordingChatModel(script=script),
        [read_file, make_recover_tool(store)],
        pre_model_hook=hook,
        store=store,
        checkpointer=InMemorySaver(),
    )
    _three_turns(agent, script, f"ids-{seed}")
    assert len(script.named) > 5
    assert {i: m for i, m in script.named.items() if len(m) > 1} == {}


def test_a_rewritten_history_trimmed_at_its_start_keeps_its_stub_ids_taken():
    # the highest id numbers rode on the first message only: a step removing it before the
    # hook (LangGraph's delete-messages pattern) let the next rewrite give seen ids away again
    store = InMemoryStore()
    hook = create_pacms_hook(
        config=SelectionConfig(
            budget=700, output_key="messages", tool_loop=ToolLoopOptions(sidecar_store=store)
        )
    )
    config: Any = {"configurable": {"thread_id": "trimmed"}}
    named: dict[str, set[str]] = {}

    def rewrite(messages: list[BaseMessage]) -> list[BaseMessage]:
        out = hook.invoke({"messages": messages}, config)["messages"][1:]  # after REMOVE_ALL
        for m in out:
            if isinstance(m, ToolMessage) and (stub := STUB.search(str(m.content))):
                named.setdefault(stub.group(1), set()).add(m.tool_call_id)
        return out

    def read(k: int, lines: int = 40) -> list[BaseMessage]:
        body = "\n".join(f"line {j} of module {k}: value = {j * k}" for j in range(lines))
        return [
            AIMessage(f"reading {k}", id=f"a{k}", tool_calls=[call("read", {"p": k}, f"c{k}")]),
            ToolMessage(body, tool_call_id=f"c{k}", id=f"t{k}"),
        ]

    history: list[BaseMessage] = [HumanMessage("read the modules", id="h0")]
    for k in range(1, 5):
        history = rewrite([*history, *read(k)])
    turn = [AIMessage("done", id="d1"), HumanMessage("now module 5", id="h1"), *read(5, 110)]
    history = rewrite([*history, *turn])[1:]  # a trimming step drops the first message
    for k in range(6, 10):
        history = rewrite([*history, *read(k)])
    assert len(named) >= 3
    assert {i: c for i, c in named.items() if len(c) > 1} == {}
