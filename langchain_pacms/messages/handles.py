"""Handles: values a later tool call could take up (locators with quoted literals left open)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms.messages.identity import by_message
from langchain_pacms.messages.locators import LONG_NUMBER, PATH, locator_rank, value_tokens

__all__ = ["PATH", "call_values", "distinct_chunks", "handles_of", "leaves", "reusable_values"]

SCAN = 200_000
"""Characters of one payload scanned for values."""
_SHORT = 8_000  # texts up to this many characters have their values remembered


def distinct_chunks(text: str) -> str:
    """The distinct whitespace-separated chunks of ``text``, one per line (in no order)."""
    return "\n".join(set(text.split()))


def handles_of(text: str) -> frozenset[str]:
    """The handles in all of ``text``, four characters or more (not remembered, not capped).

    Locators of rank 1 and 2 (a ``key=value`` one as its key and its value) and the numbers a
    call takes up, over the distinct whitespace-separated chunks.

    Example:
        >>> sorted(handles_of("cat -n src/app.py | sed -n '2225,2280p'  # id=HAT039 3.5"))
        ['2225', '2280p', 'HAT039', 'src/app.py']
    """
    found: set[str] = set()
    for token in value_tokens(distinct_chunks(text)):
        keyed = "=" in token and "://" not in token
        for part in [p.rstrip(".,:-") for p in token.split("=", 1)] if keyed else [token]:
            rank = locator_rank(part)
            if len(part) >= 4 and (rank <= 2 or (rank == 4 and LONG_NUMBER.fullmatch(part))):
                found.add(part)
    return frozenset(found)


@functools.lru_cache(maxsize=4_096)
def _short_values(text: str) -> frozenset[str]:
    return handles_of(text)


def reusable_values(text: str) -> frozenset[str]:
    """The values in ``text`` a later tool call could take up (short texts memoised)."""
    return _short_values(text) if len(text) <= _SHORT else handles_of(text[:SCAN])


def leaves(value: Any) -> list[str]:
    """The scalar values inside a call's (nested) arguments, as text."""
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in leaves(v)]
    return [str(value)]


@by_message
def _call_values(message: BaseMessage) -> frozenset[str]:
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return handles_of("\n".join(leaf for c in calls for leaf in leaves(c.get("args") or {})))


def call_values(message: BaseMessage) -> frozenset[str]:
    """The values in a message's tool-call arguments (memoised per message)."""
    return _call_values(message)
