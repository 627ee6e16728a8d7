"""Shared test helpers: a recording fake chat model, conversations, agent scenarios, checks.

The integration tests import this module from their folder; ``tests/conftest.py`` puts the folder
on ``sys.path`` for the unit tests too.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field

# Re-exported for the tests, imported without its deprecation warning (the successor is
# langchain.agents.create_agent); the test files also filter the warnings it gives when called.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent as create_react_agent

Responder = Callable[[list[BaseMessage], int], AIMessage]


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


class EventCollector(BaseCallbackHandler):
    """Collects custom events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.events.append((name, data))


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


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


# -- one task, a hundred tool calls: the agent reads module after module ----------------------
LOOP_CALLS = 100
LOOP_TASK = "Find the module that raises QuotaError and fix it."


def module_text(n: int, marks: str = "") -> str:
    """What ``read_file`` returns for module ``n`` (``marks`` follow the path in its first line)."""
    body = "\n".join(f"    line {k} of module {n}: value = {k * n}" for k in range(40))
    return f"# src/module_{n}.py{marks}\n{body}" + ("\nraise QuotaError('disk')" if n == 37 else "")


def module_number(path: str) -> int:
    """``src/module_7.py`` -> 7."""
    return int(path.split("_")[1].split(".")[0])


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
