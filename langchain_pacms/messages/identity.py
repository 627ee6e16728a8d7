"""Values of message objects memoised by identity (messages are never edited in place)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from langchain_core.messages import BaseMessage

from langchain_pacms._lru import LruMemo

__all__ = ["by_message", "by_messages"]

T = TypeVar("T")


class by_message(Generic[T]):
    """Memoise a function of one message by the message's identity."""

    def __init__(self, fn: Callable[[BaseMessage], T], size: int = 50_000) -> None:
        self.fn, self.size, self.hits = fn, size, 0
        self._memo: LruMemo[int, tuple[BaseMessage, T]] = LruMemo(size)

    def __call__(self, message: BaseMessage) -> T:
        """The function's value for ``message``, computed on its first call only."""
        hit = self._memo.get(id(message))
        if hit is not None and hit[0] is message:
            self.hits += 1
            return hit[1]
        value = self.fn(message)
        self._memo.put(id(message), (message, value))
        return value


class by_messages(Generic[T]):
    """Memoise ``compute()`` by the identity of a few messages and a key."""

    def __init__(self, size: int = 8_192) -> None:
        self.size, self.hits = size, 0
        self._memo: LruMemo[tuple[Any, ...], tuple[tuple[BaseMessage, ...], T]] = LruMemo(size)

    def __call__(self, messages: tuple[BaseMessage, ...], key: Any, compute: Callable[[], T]) -> T:
        """What ``compute()`` returned for these message objects and ``key``, else its value."""
        slot = (key, *map(id, messages))
        hit = self._memo.get(slot)
        if hit is not None and all(a is b for a, b in zip(hit[0], messages, strict=True)):
            self.hits += 1
            return hit[1]
        value = compute()
        self._memo.put(slot, (messages, value))
        return value
