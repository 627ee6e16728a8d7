"""Which tool spans a run keeps coming back to: reused values and the newest read of a file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from langchain_core.messages import BaseMessage

from langchain_pacms.messages.calls import read_paths
from langchain_pacms.messages.handles import call_values, reusable_values
from langchain_pacms.messages.payload import readable_of

__all__ = ["latest_reads", "reused_spans"]


def reused_spans(
    messages: Sequence[BaseMessage], values: Mapping[int, frozenset[str]]
) -> frozenset[int]:
    """The spans (by call index) whose result ``values`` a later tool call already took up.

    Values the system prompt or a user message states do not count.
    """
    known = frozenset().union(
        *(
            reusable_values(readable_of(messages, (i,)))
            for i, m in enumerate(messages)
            if m.type in ("system", "human")
        )
    )
    later: set[str] = set()
    reused = set()
    for i in range(len(messages) - 1, -1, -1):
        found = values.get(i)
        if found is not None and not (found - known).isdisjoint(later):
            reused.add(i)
        later |= call_values(messages[i])
    return frozenset(reused)


def latest_reads(messages: Sequence[BaseMessage], spans: Iterable[int]) -> frozenset[int]:
    """Among ``spans`` (by call index), those that hold the newest read of some file."""
    newest: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m.type == "ai":
            newest.update(dict.fromkeys(read_paths(m), i))
    return frozenset(newest.values()) & frozenset(spans)
