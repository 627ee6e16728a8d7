"""Shared test helpers: fake chat models and embedders, conversations and tool rounds, agent
scenarios, checks and Hypothesis settings.

The integration tests import this module from their folder; ``tests/conftest.py`` puts the folder
on ``sys.path`` for the unit tests too.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import HealthCheck, settings
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from pydantic import Field

from langchain_pacms.lifecycle import Action, ActionResult, apply_actions, index_messages
from langchain_pacms.messages import sent_tokens

# Re-exported for the tests, imported without its deprecation warning (the successor is
# langchain.agents.create_agent); the test files also filter the warnings it gives when called.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent as create_react_agent

Responder = Callable[[list[BaseMessage], int], AIMessage]


def slow_examples(n: int) -> settings:
    """Hypothesis settings of a slow property test: ``n`` examples, no deadline."""
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class RecordingChatModel(BaseChatModel):
    """A fake chat model that records exactly what it received and answers from a script.

    ``script`` is either a list of ``AIMessage`` (returned in turn, then ``"done"``) or a callable
    ``(messages, call_index) -> AIMessage``.
    """

    script: Any = Field(default_factory=list)
    received: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[Any] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording-fake"

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        index = len(self.received)
        self.received.append(list(messages))
        if callable(self.script):
            reply = self.script(list(messages), index)
        elif index < len(self.script):
            reply = self.script[index]
        else:
            reply = AIMessage("done")
        return reply.model_copy(deep=True)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> RecordingChatModel:
        self.bound_tools = list(tools)
        return self


def words(text: str) -> int:
    """A token counter: one token a word."""
    return len(text.split())


def letter_vector(text: str, dims: int = 16) -> list[float]:
    """A dense vector of ``text``: its letters counted in ``dims`` buckets (by code point)."""
    vector = [0.0] * dims
    for ch in text.lower():
        vector[ord(ch) % dims] += 1
    return vector


class TableEmbeddings(Embeddings):
    """Fixed vectors looked up by text: a dense embedder that declares no profile of its own."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return list(map(self.embed_query, texts))

    def embed_query(self, text: str) -> list[float]:
        return self.table[text]


class EventCollector(BaseCallbackHandler):
    """Collects custom events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.events.append((name, data))

    @property
    def selections(self) -> list[Any]:
        """The data of the ``pacms_selection`` events, in order."""
        return [data for name, data in self.events if name == "pacms_selection"]


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def tool_round(name: str, args: dict[str, Any], output: str, n: int | str = 1) -> list[BaseMessage]:
    """One call of tool ``name`` and its result ``output``.

    The ids end in ``n``: ``a{n}`` the calling message, ``c{n}`` the call, ``t{n}`` the result.
    """
    return [
        AIMessage("", tool_calls=[call(name, args, f"c{n}")], id=f"a{n}"),
        ToolMessage(output, tool_call_id=f"c{n}", id=f"t{n}"),
    ]


def values_loop(rounds: int = 8) -> list[BaseMessage]:
    """A coding loop: even rounds repeat the task's path, odd ones hold values of their own."""
    loop: list[BaseMessage] = [
        SystemMessage("You fix bugs."),
        HumanMessage("fix the parser in src/p.py"),
    ]
    for k in range(rounds):
        call = {"name": "bash", "args": {"command": f"grep -n tok{k} src"}, "id": f"c{k}"}
        held = "src/p.py" if k % 2 == 0 else f"src/p.py BUG-{k}0{k}"
        loop += [
            AIMessage(f"step {k}", tool_calls=[call]),
            ToolMessage(f"{held}: token {k} " + "parse " * 30, tool_call_id=f"c{k}"),
        ]
    return loop


def span_messages(payload: str) -> list[BaseMessage]:
    """The messages an audit record's payload holds: a span's calls and results."""
    return messages_from_dict(json.loads(payload))


def fold(messages: Sequence[BaseMessage], *object_ids: str) -> ActionResult:
    """Fold the objects ``object_ids`` of ``messages`` (by default the first tool result)."""
    targets = object_ids or ("function:tool:1",)
    return apply_actions(messages, index_messages(messages), [Action("fold", o) for o in targets])


def tool_calling_script(tool_name: str, arg: str) -> Responder:
    """First call on a new question: call the tool; after the tool result: answer."""

    def respond(messages: list[BaseMessage], index: int) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(f"Tool said: {str(messages[-1].content)[:40]}")
        return AIMessage("", tool_calls=[call(tool_name, {"query": arg}, f"call_{index}")])

    return respond


FILLER_TOPICS = [
    "the weather in Lisbon",
    "a pasta recipe",
    "the football results",
    "a movie plot",
    "gardening tips",
    "the history of Rome",
    "a poem about autumn",
    "stock market news",
    "a chess opening",
    "the best hiking trails",
    "bird watching",
    "a jazz album",
]


def long_conversation(turns: int = 200, *, fact: str, early_at: int = 3) -> list[BaseMessage]:
    """``turns`` user turns, each with a tool call; ``fact`` is stated at turn ``early_at``."""
    messages: list[BaseMessage] = []
    for t in range(turns):
        topic = FILLER_TOPICS[t % len(FILLER_TOPICS)]
        text = fact if t == early_at else f"Tell me something about {topic}, part {t}."
        messages.append(HumanMessage(text, id=f"h{t}"))
        if t == early_at:
            messages.append(AIMessage("Noted, I will remember that.", id=f"a{t}"))
            continue
        cid = f"c{t}"
        messages.append(AIMessage("", tool_calls=[call("search", {"q": topic}, cid)], id=f"x{t}"))
        payload = " ".join(f"Result {k} about {topic} with assorted details." for k in range(8))
        messages.append(ToolMessage(payload, tool_call_id=cid, name="search", id=f"r{t}"))
        messages.append(AIMessage(f"Here is a summary about {topic}.", id=f"s{t}"))
    return messages


# -- an archive agent, and an early fact only a good selection keeps ---------------------------
BIG = "row " * 1500  # ~1500 tokens of tool output
FACT = "My locker combination is 31-07-42, please remember it."
SECRET = "31-07-42"


@tool
def search(query: str) -> str:
    """Search the archive (returns a very large payload)."""
    return f"Archive results for {query}: " + BIG


def answer_from_context(messages: list[BaseMessage], index: int) -> AIMessage:
    """A script that gives the combination only if ``SECRET`` reached the model."""
    seen = any(SECRET in str(m.content) for m in messages)
    return AIMessage(f"Your combination is {SECRET}." if seen else "I do not know.")


def assert_pacms_keeps_the_early_fact_lastk_loses_it(
    agent_for: Callable[[str, RecordingChatModel], Any],
) -> None:
    """Ask for :data:`SECRET` after 200 turns through ``agent_for(strategy, model)``.

    With ``pacms`` the fact stated early reaches the model, which answers; with ``lastk`` it
    does not, and the model does not know.
    """
    history = long_conversation(200, fact=FACT, early_at=2)
    question = HumanMessage("What is my locker combination?")
    for strategy, keeps in (("pacms", True), ("lastk", False)):
        model = RecordingChatModel(script=answer_from_context)
        result = agent_for(strategy, model).invoke({"messages": [*history, question]})
        (received,) = model.received
        assert_provider_valid(received)
        assert any(SECRET in str(m.content) for m in received) is keeps
        answer = result["messages"][-1].content
        assert SECRET in answer if keeps else answer == "I do not know."


# -- one task, a hundred tool calls: the agent reads module after module ----------------------
LOOP_CALLS = 100
LOOP_TASK = "Find the module that raises QuotaError and fix it."
LOOP_BUDGET = 4_000
LOOP_SYSTEM = "You are a careful coder."


def loop_run(
    collector: EventCollector, *, system: bool = False, **configurable: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The input and the config of a run of the loop.

    The input is :data:`LOOP_TASK`, after the system prompt :data:`LOOP_SYSTEM` with ``system``;
    the config has ``collector`` as callback, room for every step, and ``configurable``.
    """
    task = HumanMessage(LOOP_TASK)
    config: dict[str, Any] = {"callbacks": [collector], "recursion_limit": 4 * LOOP_CALLS + 20}
    if configurable:
        config["configurable"] = configurable
    return {"messages": [SystemMessage(LOOP_SYSTEM), task] if system else [task]}, config


def module_text(n: int, marks: str = "") -> str:
    """What ``read_file`` returns for module ``n`` (``marks`` follow the path in its first line)."""
    body = "\n".join(f"    line {k} of module {n}: value = {k * n}" for k in range(40))
    return f"# src/module_{n}.py{marks}\n{body}" + ("\nraise QuotaError('disk')" if n == 37 else "")


def module_number(path: str) -> int:
    """``src/module_7.py`` -> 7."""
    return int(path.split("_")[1].split(".")[0])


def module_reader(marks: str = "") -> BaseTool:
    """The loop's ``read_file`` tool: :func:`module_text` of the module a path names."""

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return module_text(module_number(path), marks)

    return read_file


def assert_loop_calls_fit(model: RecordingChatModel, counter: Any) -> None:
    """Every call the loop's model received: within :data:`LOOP_BUDGET`, valid for a provider,
    and with the task in view."""
    for received in model.received:
        assert sent_tokens(received, counter) <= LOOP_BUDGET
        assert_provider_valid(received)
        assert any(isinstance(m, HumanMessage) and m.content == LOOP_TASK for m in received)


def read_module(index: int) -> AIMessage:
    """Step ``index`` of the loop: the model reads module ``index``."""
    read = call("read_file", {"path": f"src/module_{index}.py"}, f"c{index}")
    return AIMessage(f"Step {index}: reading the next module.", tool_calls=[read])


# -- checks --------------------------------------------------------------------------------------
def assert_provider_valid(messages: Sequence[BaseMessage]) -> None:
    """Every ToolMessage directly follows its call group; every tool call has a result.

    Calls that share an id take one result each.
    """
    open_calls: Counter[str] = Counter()
    for i, m in enumerate(messages):
        if isinstance(m, ToolMessage):
            assert open_calls[m.tool_call_id], f"orphan ToolMessage at {i}: {m.tool_call_id}"
            open_calls[m.tool_call_id] -= 1
            open_calls = +open_calls  # only the calls still open
            continue
        assert not open_calls, f"tool calls {open_calls} lack results before message {i}"
        if isinstance(m, AIMessage) and m.tool_calls:
            open_calls = Counter(c["id"] for c in m.tool_calls)
    assert not open_calls, f"tool calls {open_calls} lack results at the end"


CLASSIC = {
    "fold_min_tokens": 800,
    "mask_min_tokens": 300,
    "keep_recent": 2,
    "keep_above": 0.6,
    "keep_file_views": False,
}
"""The heuristic planner's tuning before its defaults became the replay's choice (for tests
that check rules at fixed thresholds, not the defaults)."""


def classic(selector: Any = None, **options: Any) -> Any:
    """A ``HeuristicPlanner`` tuned with :data:`CLASSIC` (``options`` override its fields)."""
    from langchain_pacms.lifecycle import HeuristicPlanner, PlannerTuning

    return HeuristicPlanner(selector, tuning=PlannerTuning(**{**CLASSIC, **options}))
