"""The exact payload of messages, and the mark a lifecycle edit leaves on a message it rewrote."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from langchain_pacms.embeddings.identity import json_like
from langchain_pacms.messages.text import content_text

__all__ = ["LIFECYCLE_KEY", "content_payload", "exact_payload", "payload_of", "readable_of"]

LIFECYCLE_KEY = "pacms_lifecycle"
"""Key in ``additional_kwargs`` of a rewritten message: ``{"object": id, "state": ...}``."""


def content_payload(content: str | list[Any]) -> str:
    """A message content as payload text: a string as it is, list content as JSON.

    The blocks' keys keep their order, so the content read back serialises as it did (a
    provider's prompt cache sees the same request prefix again).

    Example:
        >>> content_payload([{"type": "text", "text": "hi", "cache_control": {"type": "x"}}])
        '[{"type": "text", "text": "hi", "cache_control": {"type": "x"}}]'
    """
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, default=str)


def exact_payload(
    messages: Sequence[BaseMessage], indices: Sequence[int], *, calls: bool = False
) -> bool:
    r"""Whether a fold of these messages stores what gives them back exactly.

    List content is stored as JSON: a value JSON cannot carry (``bytes`` in an image block, a
    set, an object) would come back as its ``str``. ``calls``: the call's arguments are stored
    too (a span fold).

    Example:
        >>> from langchain_core.messages import ToolMessage
        >>> png = {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}
        >>> exact_payload([ToolMessage([{"type": "text", "text": "a"}], tool_call_id="c")], (0,))
        True
        >>> exact_payload([ToolMessage([png], tool_call_id="c")], (0,))
        False
    """
    held = [messages[i] for i in indices]
    return all(json_like(m.content) for m in held) and (
        not calls or all(json_like(c.get("args")) for m in held for c in _calls(m))
    )


def _calls(message: BaseMessage) -> list[Any]:
    return list(getattr(message, "tool_calls", None) or [])


def payload_of(messages: Sequence[BaseMessage], indices: Sequence[int]) -> str:
    r"""The exact payload of an object: what a fold stores and recovery returns.

    For a tool object: its one result's content, or a JSON list of ``{"tool_call_id", "content"}``
    for several results. For other objects: the message content (list content as JSON).

    Args:
        messages: The history.
        indices: The object's message positions.

    Returns:
        The payload text, byte for byte.

    Example:
        >>> from langchain_core.messages import ToolMessage, AIMessage
        >>> call = {"name": "f", "args": {}, "id": "c"}
        >>> payload_of([AIMessage("", tool_calls=[call]), ToolMessage("x\0y", tool_call_id="c")],
        ...            (0, 1))
        'x\x00y'
    """
    return _joined(messages, indices, content_payload)


def readable_of(messages: Sequence[BaseMessage], indices: Sequence[int]) -> str:
    r""":func:`payload_of` as a reader sees it: content blocks as their text, not their JSON.

    What rules, locators and masks read (a tool whose output is blocks, as MCP tools give it,
    reads as its text); the same as :func:`payload_of` for string contents.

    Example:
        >>> from langchain_core.messages import ToolMessage
        >>> out = ToolMessage([{"type": "text", "text": "a.py\nb.py"}], tool_call_id="c")
        >>> payload_of([out], (0,)), readable_of([out], (0,))
        ('[{"type": "text", "text": "a.py\\nb.py"}]', 'a.py\nb.py')
    """
    return _joined(messages, indices, content_text)


def _joined(
    messages: Sequence[BaseMessage], indices: Sequence[int], read: Callable[[Any], str]
) -> str:
    results = [messages[i] for i in indices if isinstance(messages[i], ToolMessage)]
    if not results:
        return read(messages[indices[0]].content)
    if len(results) == 1:
        return read(results[0].content)
    parts = [
        {"tool_call_id": str(m.tool_call_id), "content": read(m.content)}  # type: ignore[attr-defined]
        for m in results
    ]
    return json.dumps(parts, ensure_ascii=False)
