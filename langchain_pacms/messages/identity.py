"""Values of message objects memoised by identity and by the identity of their fields.

A value is reused only while the message holds the same ``content``, ``additional_kwargs`` and
``tool_calls`` objects, so a message whose field was assigned anew is read afresh. A list or
dict edited in place is not noticed: copy the message (``model_copy``) to change it.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import is_
from typing import Any, Generic, TypeVar

from langchain_core.messages import BaseMessage

from langchain_pacms._lru import LruMemo

__all__ = ["by_message", "by_messages"]

T = TypeVar("T")


def _held(messages: tuple[BaseMessage, ...]) -> tuple[Any, ...]:
    """Each message with the field objects a memoised value is made of (compared by identity)."""
    held: list[Any] = []
    for m in messages:
        fields = m.__dict__  # pydantic keeps the fields there: no attribute machinery
        held += (
            m,
            fields.get("content"),
            fields.get("additional_kwargs"),
            fields.get("tool_calls"),
        )
    return tuple(held)


class by_message(Generic[T]):
    """Memoise a function of one message by the message's identity (and its fields')."""

    def __init__(self, fn: Callable[[BaseMessage], T], size: int = 50_000) -> None:
        self.fn, self.size, self.hits = fn, size, 0
        self._memo: LruMemo[int, tuple[Any, Any, Any, Any, T]] = LruMemo(size)

    def __call__(self, message: BaseMessage) -> T:
        """The function's value for ``message``, computed on its first call only."""
        fields = message.__dict__
        content, extra, calls = (
            fields.get("content"),
            fields.get("additional_kwargs"),
            fields.get("tool_calls"),
        )
        hit = self._memo.get(id(message))
        if (
            hit is not None
            and hit[0] is message
            and hit[1] is content
            and hit[2] is extra
            and hit[3] is calls
        ):
            self.hits += 1
            return hit[4]
        value = self.fn(message)
        self._memo.put(id(message), (message, content, extra, calls, value))
        return value


class by_messages(Generic[T]):
    """Memoise ``compute()`` by the identity of a few messages (and their fields') and a key."""

    def __init__(self, size: int = 8_192) -> None:
        self.size, self.hits = size, 0
        self._memo: LruMemo[tuple[Any, ...], tuple[tuple[Any, ...], T]] = LruMemo(size)

    def __call__(self, messages: tuple[BaseMessage, ...], key: Any, compute: Callable[[], T]) -> T:
        """What ``compute()`` returned for these message objects and ``key``, else its value."""
        slot = (key, *map(id, messages))
        held = _held(messages)
        hit = self._memo.get(slot)
        if hit is not None and len(hit[0]) == len(held) and all(map(is_, hit[0], held)):
            self.hits += 1
            return hit[1]
        value = compute()
        self._memo.put(slot, (held, value))
        return value
