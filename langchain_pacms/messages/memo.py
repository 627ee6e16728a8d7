"""Each message's text, cost and values, memoised between calls; what messages cost."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms._lru import LruMemo
from langchain_pacms.messages.handles import reusable_values
from langchain_pacms.messages.payload import readable_of
from langchain_pacms.messages.text import content_cost, message_text, message_tokens

__all__ = ["MessageMemo", "sent_tokens"]


class MessageMemo:
    """Each message's text and token count, memoised per message object (bounded LRU).

    An entry is used only while the message still holds the same ``content``, ``name`` and
    ``tool_calls``; the memo keeps weak references only.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self.hits = 0
        self._entries: LruMemo[int, _MemoEntry] = LruMemo(max_entries)

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, message: BaseMessage) -> _MemoEntry:
        key = id(message)
        entry = self._entries.get(key)
        if entry is not None and entry.matches(message):
            self.hits += 1
            return entry
        entry = _MemoEntry(message)
        self._entries.put(key, entry)
        return entry

    def text(self, message: BaseMessage) -> str:
        """The message's text as it is scored and counted (see :func:`sent_tokens`)."""
        return self._entry(message).text

    def tokens(self, message: BaseMessage, token_counter: Callable[[str], int]) -> int:
        """The message's cost (see :func:`sent_tokens`), counted once per message and counter."""
        return self._entry(message).tokens(token_counter)

    def measure(self, message: BaseMessage, token_counter: Callable[[str], int]) -> tuple[str, int]:
        """The message's text and cost, looked up once."""
        entry = self._entry(message)
        return entry.text, entry.tokens(token_counter)

    def values(self, message: BaseMessage) -> frozenset[str]:
        """The values in the message's content a later tool call could take up, found once."""
        entry = self._entry(message)
        if entry.handles is None:
            entry.handles = reusable_values(readable_of([message], (0,)))
        return entry.handles


class _MemoEntry:
    """One message in a :class:`MessageMemo`: what it was made from, its text and its count."""

    __slots__ = ("content", "cost", "counter", "handles", "name", "ref", "text", "tool_calls")

    def __init__(self, message: BaseMessage) -> None:
        self.ref = weakref.ref(message)
        content = message.content
        # lists can be edited in place: keep a copy to compare with
        self.content = content if isinstance(content, str) else copy.deepcopy(content)
        self.name = message.name
        calls = _calls_of(message)
        self.tool_calls = copy.deepcopy(calls) if calls else None
        self.text = message_text(message)
        self.counter: Callable[[str], int] | None = None
        self.cost = 0
        self.handles: frozenset[str] | None = None  # reusable values, found on first use

    def tokens(self, token_counter: Callable[[str], int]) -> int:
        if self.counter is not token_counter:
            self.cost = content_cost(self.text, self.content, token_counter)
            self.counter = token_counter
        return self.cost

    def matches(self, message: BaseMessage) -> bool:
        if self.ref() is not message or message.name != self.name:
            return False
        content = message.content
        if content is not self.content and content != self.content:
            return False
        return (_calls_of(message) or None) == self.tool_calls


def _calls_of(message: BaseMessage) -> list[Any] | None:
    # A plain getattr is slow on messages without the field (pydantic's __getattr__ raises).
    return message.tool_calls if isinstance(message, AIMessage) else None


def sent_tokens(
    messages: Iterable[BaseMessage],
    token_counter: Callable[[str], int],
    *,
    memo: MessageMemo | None = None,
) -> int:
    """The tokens of the messages a model receives, as the budget counts them (``memo``: once)."""
    if memo is not None:
        return sum(memo.tokens(m, token_counter) for m in messages)
    return sum(message_tokens(m, token_counter) for m in messages)
