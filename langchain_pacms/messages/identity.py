"""Values of message objects memoised by identity and by the identity of their fields.

A value is reused only while the message holds the same ``content``, ``additional_kwargs`` and
``tool_calls`` objects, so a message whose field was assigned anew is read afresh. A list or
dict edited in place is not noticed: copy the message (``model_copy``) to change it. The memos
hold messages weakly: an entry goes once a message it was made from is collected.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from langchain_core.messages import BaseMessage

from langchain_pacms._lru import LruMemo

__all__ = ["by_message", "by_messages"]

T = TypeVar("T")

_Refs = tuple["weakref.ref[BaseMessage]", ...]


def _fields(message: BaseMessage) -> tuple[Any, Any, Any]:
    """The field objects a memoised value is made of (compared by identity)."""
    held = message.__dict__  # pydantic keeps the fields there: no attribute machinery
    return held.get("content"), held.get("additional_kwargs"), held.get("tool_calls")


def _same(fields: tuple[Any, Any, Any], message: BaseMessage) -> bool:
    """Whether ``message`` still holds the field objects ``fields`` were read from."""
    held = message.__dict__
    return (
        fields[0] is held.get("content")
        and fields[1] is held.get("additional_kwargs")
        and fields[2] is held.get("tool_calls")
    )


def _holds(entry: tuple[Any, ...], messages: tuple[BaseMessage, ...]) -> bool:
    """Whether a :class:`by_messages` entry was made from these messages, as they are now."""
    for ref, fields, message in zip(entry[0], entry[1], messages):  # the slot names each one
        if ref() is not message or not _same(fields, message):
            return False
    return True


def _gone(entry: tuple[Any, ...]) -> bool:
    """Whether a message an entry was made from is no longer alive."""
    return any(ref() is None for ref in entry[0])


class _Memo:
    """An LRU memo whose entries go once a message they were made from is collected."""

    def __init__(self, size: int) -> None:
        self.size, self.hits = size, 0
        self._memo: LruMemo[Any, tuple[Any, ...]] = LruMemo(size)
        self._dead: deque[Any] = deque()  # keys of entries whose messages died (weakref callbacks)

    def _refs(self, messages: tuple[BaseMessage, ...], key: Any) -> _Refs:
        dead = self._dead

        def died(_: weakref.ref[BaseMessage]) -> None:
            dead.append(key)

        return tuple(weakref.ref(m, died) for m in messages)

    def _purge(self) -> None:
        # a callback only appends: it may run inside the memo's lock (a collection there)
        keys = []
        try:
            while True:
                keys.append(self._dead.popleft())
        except IndexError:  # emptied (another thread may purge at the same time)
            pass
        self._memo.discard(keys, _gone)


class by_message(_Memo, Generic[T]):
    """Memoise a function of one message by the message's identity (and its fields')."""

    def __init__(self, fn: Callable[[BaseMessage], T], size: int = 50_000) -> None:
        super().__init__(size)
        self.fn = fn

    def __call__(self, message: BaseMessage) -> T:
        """The function's value for ``message``, computed on its first call only."""
        if self._dead:
            self._purge()
        key = id(message)
        hit = self._memo.get(key)
        if hit is not None and hit[0][0]() is message and _same(hit[1], message):
            self.hits += 1
            return hit[2]
        value = self.fn(message)
        self._memo.put(key, (self._refs((message,), key), _fields(message), value))
        return value


class by_messages(_Memo, Generic[T]):
    """Memoise ``compute()`` by the identity of a few messages (and their fields') and a key."""

    def __init__(self, size: int = 8_192) -> None:
        super().__init__(size)

    def __call__(self, messages: tuple[BaseMessage, ...], key: Any, compute: Callable[[], T]) -> T:
        """What ``compute()`` returned for these message objects and ``key``, else its value."""
        if self._dead:
            self._purge()
        slot = (key, *map(id, messages))
        hit = self._memo.get(slot)
        if hit is not None and _holds(hit, messages):
            self.hits += 1
            return hit[2]
        value = compute()
        self._memo.put(slot, (self._refs(messages, slot), tuple(map(_fields, messages)), value))
        return value
