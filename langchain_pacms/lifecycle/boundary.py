"""Where a commit is safe: at a turn's start or end, and in a long tool loop after results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms.messages.history import is_human

__all__ = ["TOOL_LOOP_STEPS", "Boundary", "at_boundary", "boundary_in_force", "tool_steps"]

Boundary = Literal["auto", "turn", "tool"]

TOOL_LOOP_STEPS = 4
"""Tool-calling steps in a turn after which ``boundary="auto"`` also commits after results."""


def tool_steps(messages: Sequence[BaseMessage]) -> int:
    """Model calls that requested tools since the latest user message."""
    steps = 0
    for message in reversed(messages):
        if is_human(message):
            break
        if isinstance(message, AIMessage) and message.tool_calls:
            steps += 1
    return steps


def boundary_in_force(
    messages: Sequence[BaseMessage], boundary: Boundary
) -> Literal["turn", "tool"]:
    """The boundary in force: ``"auto"`` is ``"tool"`` inside a long tool loop, else ``"turn"``.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> boundary_in_force([HumanMessage("hi")], "auto"), boundary_in_force([], "tool")
        ('turn', 'tool')
    """
    if boundary == "auto":
        return "tool" if tool_steps(messages) >= TOOL_LOOP_STEPS else "turn"
    return boundary


def at_boundary(messages: Sequence[BaseMessage], boundary: Boundary = "auto") -> bool:
    """Whether the history ends at a point where a commit is safe.

    ``"turn"``: after a user message or an AI answer without tool calls; ``"tool"`` also once a
    tool call's results are all in; ``"auto"`` (default): see :func:`boundary_in_force`.

    Raises:
        ValueError: If ``boundary`` is not ``"auto"``, ``"turn"`` or ``"tool"``.

    Example:
        >>> from langchain_core.messages import HumanMessage, ToolMessage
        >>> call = {"name": "f", "args": {}, "id": "c"}
        >>> msgs = [HumanMessage("go"), AIMessage("", tool_calls=[call])]
        >>> at_boundary(msgs), at_boundary([*msgs, ToolMessage("1", tool_call_id="c")], "tool")
        (False, True)
    """
    if boundary not in ("auto", "turn", "tool"):
        raise ValueError(f"boundary must be 'auto', 'turn' or 'tool', not {boundary!r}")
    if not messages:
        return False
    last = messages[-1]
    if is_human(last) or (isinstance(last, AIMessage) and not last.tool_calls):
        return True
    if boundary_in_force(messages, boundary) == "turn" or last.type != "tool":
        return False
    call = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    answered = {str(getattr(m, "tool_call_id", "")) for m in messages if m.type == "tool"}
    return call is not None and all(str(c.get("id")) in answered for c in call.tool_calls)
