"""Handles: the values (paths, URLs, ids, long numbers, dates) a later tool call could take up."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms.messages.identity import by_message

__all__ = ["PATH", "call_values", "distinct_chunks", "handles_of", "leaves", "reusable_values"]

_EXT = r"(?:py|js|ts|tsx|json|md|txt|csv|ya?ml|toml|ini|cfg|html|css|sql|sh|rs|go|java|c|h|cpp|rb)"
_PATHS = rf"[\w.-]*/[\w.@%+-]+(?:/[\w.@%+-]+)*|\b[\w-]+\.{_EXT}\b"
PATH = re.compile(_PATHS)
"""A path with a slash, or a file name with a known extension."""
_HANDLE = re.compile(
    r"https?://[^\s\"'<>)\]]+"  # URLs
    rf"|{_PATHS}"  # paths and file names
    r"|\b[A-Za-z_]+\d[\w-]*"  # letters then digits: credit_card_4421486, HAT039, call_00_x
    r"|\b\d+[A-Za-z_][\w-]*"  # digits then letters: 2FBBAH, 7f3a9c
    r"|\b\d{4,}(?:[-:.]\d+)*"  # long numbers and dates: 23553, 2024-05-21
)
SCAN = 200_000
"""Characters of one payload scanned for values."""
_SHORT = 8_000  # texts up to this many characters have their values remembered


def distinct_chunks(text: str) -> str:
    """The distinct whitespace-separated chunks of ``text``, one per line (in no order)."""
    return "\n".join(set(text.split()))


def handles_of(text: str) -> frozenset[str]:
    """The handles in all of ``text``, four characters or more (not remembered, not capped)."""
    found = _HANDLE.findall(distinct_chunks(text))
    return frozenset(t for m in found if len(t := m.rstrip(".,:-")) >= 4)


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
