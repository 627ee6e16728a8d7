"""Rewritten copies of messages (memoised), and what a message weighs before and after."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_pacms.messages.identity import by_message, by_messages
from langchain_pacms.messages.payload import LIFECYCLE_KEY
from langchain_pacms.messages.text import blocks_cost, content_text

__all__ = ["LONG_ARGUMENT", "REWRITES", "message_size", "rewrite", "short_args"]

LONG_ARGUMENT = 200
"""Characters from which a span fold replaces a tool call's string argument with a pointer."""

REWRITES: by_messages[Any] = by_messages(8_192)
"""Rewritten copies and masked texts, remembered per message objects and edit."""


def rewrite(
    message: BaseMessage,
    content: str | list[Any],
    mark: Mapping[str, Any],
    pointer: str | None = None,
) -> BaseMessage:
    """A copy of ``message`` with ``content`` and the lifecycle ``mark`` (memoised if it has an id).

    With ``pointer``, its calls' long string arguments are replaced by it (a span fold).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> original = HumanMessage("a long brief", id="h1")
        >>> copy = rewrite(original, "[folded]", {"state": "folded"})
        >>> copy.content, rewrite(original, "[folded]", {"state": "folded"}) is copy
        ('[folded]', True)
    """

    def compute() -> BaseMessage:
        kwargs = {**message.additional_kwargs, LIFECYCLE_KEY: dict(mark)}
        update: dict[str, Any] = {"content": content, "additional_kwargs": kwargs}
        if pointer is not None:
            update["tool_calls"] = [
                {**c, "args": short_args(c.get("args") or {}, pointer)}
                for c in getattr(message, "tool_calls", None) or []
            ]
        return message.model_copy(update=update)

    if not message.id:
        return compute()
    edit = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in mark.items())
    return REWRITES((message,), ("rewrite", _key(content), edit, pointer), compute)


def _key(content: str | list[Any]) -> Any:
    """``content`` as a memo key: text blocks by their text, other blocks by identity.

    Other blocks are the rewritten message's own (an image's data is not copied into the key).
    """
    if isinstance(content, str):
        return content
    return tuple(
        b["text"] if isinstance(b, Mapping) and b.get("type") == "text" else ("block", id(b))
        for b in content
    )


def short_args(args: Mapping[str, Any], pointer: str) -> dict[str, Any]:
    """``args`` with each long string value replaced by ``pointer``.

    Example:
        >>> short_args({"script": "x" * 300, "timeout": "9"}, "[folded]")
        {'script': '[folded]', 'timeout': '9'}
    """
    return {
        k: pointer if isinstance(v, str) and len(v) >= LONG_ARGUMENT else v for k, v in args.items()
    }


def _sized_texts(message: BaseMessage) -> tuple[str, ...]:
    """What :func:`message_size` counts: a message's content and each of its calls' arguments."""
    calls = getattr(message, "tool_calls", None) or []
    return (
        content_text(message.content),  # content blocks: their text
        *(json.dumps(c.get("args") or {}, ensure_ascii=False, default=str) for c in calls),
    )


_held_texts = by_message(_sized_texts)


def message_size(message: BaseMessage, count: Callable[[str], int], *, held: bool = False) -> int:
    """Tokens of a message's content and of its calls' arguments (``held``: memoise the texts).

    Content blocks count their text, and the others what they cost (an image by its pixels).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> message_size(HumanMessage("one two"), lambda t: len(t.split()))
        2
    """
    texts = (_held_texts if held else _sized_texts)(message)
    return sum(count(t) for t in texts) + blocks_cost(message.content, count)
