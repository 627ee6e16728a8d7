"""Rounds restored in place by a recovery (``reactivate=True``): their order and their notes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from langchain_pacms.lifecycle.objects import OBJECT_KEY
from langchain_pacms.messages.history import is_human
from langchain_pacms.messages.payload import LIFECYCLE_KEY

__all__ = ["by_recovery", "restored_in_turn", "restored_note", "with_unsent_noted"]


_ABSENT = object()
_HELD = (
    " restored in place: its original message in the history above holds the exact payload again]"
)


def restored_note(object_id: str, *, sent: bool = True) -> str:
    """The recovery's tool result when its round is restored in place.

    ``sent=False``: the same note for a request that does not hold the round whole (left out,
    sent as a stub, folded again since); it points at ``recover_context``, which returns a
    restored round's payload as its result.

    Example:
        >>> restored_note("obj-1", sent=False)
        '[obj-1 was restored in place, not whole here: recover_context("obj-1") returns it]'
    """
    if sent:
        return f"[{object_id}{_HELD}"
    return (
        f"[{object_id} was restored in place, not whole here: "
        f'recover_context("{object_id}") returns it]'
    )


def _noted(message: BaseMessage) -> str | None:
    """The object a recovery result says is restored in the history above, if it says so."""
    content = message.content
    if not isinstance(message, ToolMessage) or not isinstance(content, str):
        return None
    if content.startswith("[") and content.endswith(_HELD):
        return content[1 : -len(_HELD)] or None
    return None


def _mark(message: BaseMessage) -> Mapping[str, Any]:
    mark = message.additional_kwargs.get(LIFECYCLE_KEY)
    return mark if isinstance(mark, Mapping) else {}


def by_recovery(restored: Sequence[BaseMessage], result: ToolMessage) -> list[BaseMessage]:
    """``restored`` (a round back in place) and the recovery's ``result``, marked as its own.

    Their mark names the turn the harness restored the round in and the recovering call
    (``{"reactivated": <turn>, "by": <call id>}``): the selection keeps the newest recovery's
    round first, and the result stays in view with it for that turn. A round restored before
    any user turn carries no turn, and nothing is marked.

    Example:
        >>> held = {LIFECYCLE_KEY: {"reactivated": "h"}}
        >>> out = by_recovery([ToolMessage("data", tool_call_id="c", additional_kwargs=held)],
        ...     ToolMessage("[note]", tool_call_id="r1"))
        >>> [m.additional_kwargs[LIFECYCLE_KEY] for m in out]
        [{'reactivated': 'h', 'by': 'r1'}, {'reactivated': 'h', 'by': 'r1'}]
    """
    turn = next(
        (mark["reactivated"] for m in restored if "reactivated" in (mark := _mark(m))), None
    )
    if turn is None:
        return [*restored, result]
    mark = {"reactivated": turn, "by": result.tool_call_id}
    return [
        m.model_copy(update={"additional_kwargs": {**m.additional_kwargs, LIFECYCLE_KEY: mark}})
        for m in (*restored, result)
    ]


def restored_in_turn(messages: Sequence[BaseMessage]) -> dict[int, int]:
    """The messages restored in place in the latest turn, and their recoveries' results.

    Each with its recovery's rank: the position of the recovery's tool result (the newest
    recovery ranks highest; a round restored without a recovering tool call ranks ``-1``).

    Example:
        >>> from langchain_core.messages import HumanMessage
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
    """``sent`` (drawn from ``messages``) with no recovery result claiming what it does not hold.

    A recovery with ``reactivate=True`` answers that the round is back in the history above.
    Where ``sent`` does not hold that round whole (a selection left it out or sent a stub of it,
    a later commit folded, masked or pruned it), the answer says so instead and points at
    ``recover_context``.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> ask = {"name": "recover_context", "args": {"object_id": "o1"}, "id": "r1"}
        >>> held = {LIFECYCLE_KEY: {"reactivated": "h"}, OBJECT_KEY: "o1"}
        >>> history = [HumanMessage("go", id="h"),
        ...     ToolMessage("data", tool_call_id="c", id="t", additional_kwargs=held),
        ...     AIMessage("", tool_calls=[ask]),
        ...     ToolMessage(restored_note("o1"), tool_call_id="r1")]
        >>> [m.content[:27] for m in with_unsent_noted(history, [history[0], *history[2:]])]
        ['go', '', '[o1 was restored in place, ']
        >>> with_unsent_noted(history, history) == history
        True
    """
    noted = {x for m in sent if (x := _noted(m)) is not None}
    if not noted:
        return list(sent)
    shown = {m.id: m.content for m in sent if m.id is not None}
    restored: dict[str, list[BaseMessage]] = {x: [] for x in noted}
    whole = set(noted)
    for m in messages:
        mark, held = _mark(m), m.additional_kwargs.get(OBJECT_KEY)
        if str(mark.get("object") or "") in noted:  # folded or masked again since
            whole.discard(str(mark["object"]))
        if held in restored and "reactivated" in mark:
            restored[held].append(m)
    for x, held_messages in restored.items():
        if not held_messages or any(
            m.id is None or shown.get(m.id, _ABSENT) != m.content for m in held_messages
        ):
            whole.discard(x)
    return [
        m.model_copy(update={"content": restored_note(x, sent=False)})
        if (x := _noted(m)) is not None and x not in whole
        else m
        for m in sent
    ]
