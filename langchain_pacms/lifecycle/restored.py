"""Rounds restored in place by a recovery (``reactivate=True``): their order and their notes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from langchain_pacms.lifecycle.objects import OBJECT_KEY
from langchain_pacms.messages.history import is_human
from langchain_pacms.messages.payload import LIFECYCLE_KEY

__all__ = ["restored_in_turn", "restored_note", "with_unsent_noted"]


def restored_note(object_id: str, *, sent: bool = True) -> str:
    """The recovery's tool result when its round is restored in place.

    ``sent=False``: the same round left out of one request (it points at ``recover_context``,
    which returns a restored round's payload as its result).

    Example:
        >>> restored_note("obj-1", sent=False)
        '[obj-1 restored in place, left out of this request: recover_context("obj-1") returns it]'
    """
    if sent:
        return (
            f"[{object_id} restored in place: its original message in the history above holds "
            "the exact payload again]"
        )
    return (
        f"[{object_id} restored in place, left out of this request: "
        f'recover_context("{object_id}") returns it]'
    )


def _mark(message: BaseMessage) -> Mapping[str, Any]:
    return message.additional_kwargs.get(LIFECYCLE_KEY) or {}


def restored_in_turn(messages: Sequence[BaseMessage]) -> dict[int, int]:
    """The messages of rounds restored in place in the latest turn, each with its recovery's rank.

    The rank is the position of the recovery's tool result (the newest recovery ranks highest;
    a round restored without a recovering tool call ranks ``-1``).

    Example:
        >>> from langchain_core.messages import HumanMessage, ToolMessage
        >>> held = {LIFECYCLE_KEY: {"reactivated": "h", "by": "r1"}}
        >>> restored_in_turn([HumanMessage("go", id="h"), ToolMessage("data", tool_call_id="c",
        ...     additional_kwargs=held), ToolMessage("[note]", tool_call_id="r1")])
        {1: 2}
    """
    turn = next((m.id for m in reversed(messages) if is_human(m)), None)
    if turn is None:
        return {}
    found = {i: _mark(m) for i, m in enumerate(messages) if _mark(m).get("reactivated") == turn}
    if not found:
        return {}
    results = {m.tool_call_id: i for i, m in enumerate(messages) if isinstance(m, ToolMessage)}
    return {i: results.get(str(mark.get("by")), -1) for i, mark in found.items()}


def with_unsent_noted(
    messages: Sequence[BaseMessage], sent: Sequence[BaseMessage]
) -> list[BaseMessage]:
    """``sent`` (a selection of ``messages``) with the note of each restored round it leaves out.

    A round restored in place in the latest turn that ``sent`` does not hold whole (left out,
    or sent as a stub or placeholder) would leave its recovery's result saying the payload is in
    the history above: that result says instead that ``recover_context`` returns it.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> ask = {"name": "recover_context", "args": {"object_id": "o1"}, "id": "r1"}
        >>> held = {LIFECYCLE_KEY: {"reactivated": "h", "by": "r1"}, OBJECT_KEY: "o1"}
        >>> history = [HumanMessage("go", id="h"),
        ...     ToolMessage("data", tool_call_id="c", id="t", additional_kwargs=held),
        ...     AIMessage("", tool_calls=[ask]),
        ...     ToolMessage(restored_note("o1"), tool_call_id="r1")]
        >>> [m.content[:24] for m in with_unsent_noted(history, [history[0], *history[2:]])]
        ['go', '', '[o1 restored in place, l']
    """
    restored = restored_in_turn(messages)
    if not restored:
        return list(sent)
    shown = {m.id: m.content for m in sent if m.id is not None}
    unsent: dict[str, str] = {}  # the recovering call's id -> the object id
    for i in restored:
        message = messages[i]
        by, object_id = _mark(message).get("by"), message.additional_kwargs.get(OBJECT_KEY)
        whole = message.id is not None and shown.get(message.id) == message.content
        if by is not None and object_id is not None and not whole:
            unsent[str(by)] = str(object_id)
    out = []
    for m in sent:
        object_id = unsent.get(m.tool_call_id) if isinstance(m, ToolMessage) else None
        if object_id is not None and m.content == restored_note(object_id):
            m = m.model_copy(update={"content": restored_note(object_id, sent=False)})
        out.append(m)
    return out
