"""Which tool spans a run keeps coming back to: reused values and the newest read of a file.

A tool span is *reused* when its results hold a value a later tool call took up
(:func:`reused_spans`) or it holds the newest read of some file (:func:`latest_reads`): the
selection lifts such spans (``SelectionConfig.lift_reused``) and puts their fold stubs first;
it is the heuristic planner's *live handle* rule, read from the messages alone.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> call = {"name": "bash", "args": {"command": "cat a.py"}, "id": "c1"}
    >>> sorted(latest_reads([HumanMessage("go"), AIMessage("", tool_calls=[call]),
    ...                      ToolMessage("x = 1", tool_call_id="c1")], [1]))
    [1]
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

    Such a result is a record the run keeps coming back to (a customer profile whose ids later
    lookups use, a file listing whose paths later reads open): the selection counts it as
    relevant as the most relevant candidate (``SelectionConfig.lift_reused``), and its stub
    goes before the stub of an older result nothing used yet. It is the heuristic planner's
    *live handle* rule (values as
    :func:`~langchain_pacms.messages.handles.reusable_values` finds them; a value the
    system prompt or a user message states does not count).

    Args:
        messages: The history.
        values: Per span (the index of its call message), the values in its results
            (``reusable_values`` of each result, or of the stub of a result already folded).

    Returns:
        The indices (of each span's call message) of the reused spans.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> def call(i, args):
        ...     return AIMessage("", tool_calls=[{"name": "get", "args": args, "id": f"c{i}"}])
        >>> msgs = [HumanMessage("help"), call(1, {"user": "mia_li_3668"}),
        ...         ToolMessage("reservations: HAT039, 4WQ150", tool_call_id="c1"),
        ...         call(2, {"reservation": "HAT039"}),
        ...         ToolMessage("flight HAT039 on 2024-05-21", tool_call_id="c2")]
        >>> values = {i: reusable_values(msgs[i + 1].content) for i in (1, 3)}
        >>> sorted(reused_spans(msgs, values))
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
    """Among ``spans``, those that hold the newest read of some file in the history.

    An edit quotes the file as the agent last saw it, so the newest read of each file (whole or
    a line range: :func:`~langchain_pacms.messages.calls.read_paths`) counts as reused
    with the spans :func:`reused_spans` finds. A read that a later span of the history reads
    again is not the newest, nor is one outside ``spans`` (the newest step, which is sent
    anyway).

    Args:
        messages: The history.
        spans: The tool spans to consider, by the index of their call message.

    Returns:
        The indices of the spans in ``spans`` that read some file last.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> def sh(i, command):
        ...     return AIMessage("", tool_calls=[{"name": "bash", "args": {"command": command},
        ...                                       "id": f"c{i}"}])
        >>> msgs = [HumanMessage("fix it"), sh(1, "cat a.py"), ToolMessage("x", tool_call_id="c1"),
        ...         sh(3, "nl b.py"), ToolMessage("y", tool_call_id="c3"),
        ...         sh(5, "sed -n 1,9p a.py"), ToolMessage("x", tool_call_id="c5")]
        >>> sorted(latest_reads(msgs, [1, 3, 5]))
        [3, 5]
    """
    newest: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m.type == "ai":
            newest.update(dict.fromkeys(read_paths(m), i))
    return frozenset(newest.values()) & frozenset(spans)
