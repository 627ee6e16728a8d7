"""A conversation as the model reads it: what is still there, who spoke, what is asked now."""

from __future__ import annotations

import json
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from langchain_pacms.messages.text import content_text

__all__ = ["agent_query", "apply_removals", "is_human", "query_from_messages"]


def apply_removals(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` with each ``RemoveMessage`` applied as ``add_messages`` does (adding no ids)."""
    if not any(isinstance(m, RemoveMessage) for m in messages):
        return list(messages)
    removed: set[str] = set()  # ids a later RemoveMessage deletes
    kept: list[BaseMessage] = []
    for message in reversed(messages):
        if isinstance(message, RemoveMessage):
            if message.id == REMOVE_ALL_MESSAGES:
                break
            removed.add(str(message.id))
        elif message.id is None or message.id not in removed:
            kept.append(message)
    return kept[::-1]


def is_human(message: BaseMessage) -> bool:
    """A user's message: a ``HumanMessage``, or a ``ChatMessage`` with role user/human."""
    if isinstance(message, HumanMessage):
        return True
    return isinstance(message, ChatMessage) and message.role in ("user", "human")


def query_from_messages(messages: Sequence[BaseMessage]) -> str:
    """The text of the latest human message (``""`` when there is none).

    Example:
        >>> query_from_messages([HumanMessage("hi"), AIMessage("hello")])
        'hi'
    """
    return next((content_text(m) for m in reversed(messages) if is_human(m)), "")


def agent_query(messages: Sequence[BaseMessage]) -> str:
    """The task plus what the agent is doing now: the query for a call inside a tool loop."""
    task = query_from_messages(messages)
    for message in reversed(messages):
        if is_human(message):
            break
        if isinstance(message, AIMessage):
            calls = [
                f"{c.get('name')} "
                + json.dumps(c.get("args") or {}, ensure_ascii=False, default=str)
                for c in message.tool_calls
            ]
            return "\n".join(p for p in (task, content_text(message), *calls) if p.strip())
    return task
