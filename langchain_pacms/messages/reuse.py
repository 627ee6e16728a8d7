"""Which tool spans a run keeps coming back to: reused values and the newest read of a file.

The selection lifts such spans (``SelectionConfig.lift_reused``) and puts their fold stubs
first.

Example:
    >>> reused_spans([], {})
    frozenset()
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from langchain_core.messages import BaseMessage

from langchain_pacms.messages.calls import read_paths
from langchain_pacms.messages.handles import call_values, reusable_values
from langchain_pacms.messages.payload import payload_of

__all__ = ["latest_reads", "reused_spans"]


def reused_spans(
    messages: Sequence[BaseMessage], values: Mapping[int, frozenset[str]]
) -> frozenset[int]:
    """The tool spans whose results hold a value that a later tool call already took up.

    Values the system prompt or a user message states do not count.

    Args:
        messages: The history.
        values: Per span (the index of its call message), the values in its results.

    Returns:
        The indices (of each span's call message) of the reused spans.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> def call(i, args):
        ...     return AIMessage("", tool_calls=[{"name": "get", "args": args, "id": f"c{i}"}])
        >>> msgs = [HumanMessage("help"), call(1, {"user": "mia"}),
        ...         ToolMessage("reservations: HAT039", tool_call_id="c1"),
        ...         call(2, {"reservation": "HAT039"})]
        >>> sorted(reused_spans(msgs, {1: reusable_values(msgs[2].content)}))
        [1]
    """
    known = frozenset().union(
        *(
            reusable_values(m.content if isinstance(m.content, str) else payload_of(messages, (i,)))
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
    """Among ``spans``, those that hold the newest read (whole or in part) of some file.

    Args:
        messages: The history.
        spans: The tool spans to consider, by the index of their call message.

    Returns:
        The indices of the spans in ``spans`` that read some file last.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = {"name": "bash", "args": {"command": "cat a.py"}, "id": "c1"}
        >>> sorted(latest_reads([HumanMessage("go"), AIMessage("", tool_calls=[call]),
        ...                      ToolMessage("x = 1", tool_call_id="c1")], [1]))
        [1]
    """
    newest: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m.type == "ai":
            newest.update(dict.fromkeys(read_paths(m), i))
    return frozenset(newest.values()) & frozenset(spans)
