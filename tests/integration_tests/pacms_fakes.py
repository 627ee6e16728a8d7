"""Shared helpers for the integration tests: a recording fake chat model and conversations."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

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
    "the weather in Lisbon", "a pasta recipe", "the football results", "a movie plot",
    "gardening tips", "the history of Rome", "a poem about autumn", "stock market news",
    "a chess opening", "the best hiking trails", "bird watching", "a jazz album",
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


def assert_provider_valid(messages: Sequence[BaseMessage]) -> None:
    """Every ToolMessage directly follows its call group; every tool call has a result."""
    open_calls: set[str] = set()
    for i, m in enumerate(messages):
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls, f"orphan ToolMessage at {i}: {m.tool_call_id}"
            open_calls.discard(m.tool_call_id)
            continue
        assert not open_calls, f"tool calls {open_calls} lack results before message {i}"
        if isinstance(m, AIMessage) and m.tool_calls:
            open_calls = {c["id"] for c in m.tool_calls}
    assert not open_calls, f"tool calls {open_calls} lack results at the end"
