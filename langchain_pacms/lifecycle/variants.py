r"""Fold-stub variants of tool spans, for per-call selection inside a long tool loop.

When the selector drops a tool span, the model need not lose it: the span can be sent as its
fold stub instead, the lifecycle's own ``[folded function:tool:N: ...; exact payload via
recover_context("function:tool:N"); locators: ...]`` line (see
:mod:`langchain_pacms.lifecycle.actions`), at a small token cost. :func:`fold_variants` folds
every active tool span of a history on a copy and returns, per span, the messages the stub
variant sends (the call and its folded results; a call's own text and long arguments are
folded with them, its tool calls stay) and the
:class:`~langchain_pacms.lifecycle.actions.SidecarRecord` that must be in the sidecar store
before those messages reach the model.

Object ids are the lifecycle's (:func:`~langchain_pacms.lifecycle.objects.index_messages`):
numbered in order over the whole history, so a span keeps its id from one call to the next
while the history only grows.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> call = {"name": "read", "args": {"path": "src/app.py"}, "id": "c1"}
    >>> msgs = [HumanMessage("fix it"), AIMessage("", tool_calls=[call]),
    ...         ToolMessage("def main():\n    port=8080", tool_call_id="c1")]
    >>> variant = fold_variants(msgs)[1]
    >>> variant.record.object_id, variant.messages[0] is msgs[1]
    ('function:tool:1', True)
    >>> print(variant.messages[1].content)  # doctest: +NORMALIZE_WHITESPACE
    [folded function:tool:1: 2 lines, 25 chars; exact payload via
    recover_context("function:tool:1"); locators: port=8080]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from langchain_pacms.lifecycle.actions import Action, SidecarRecord, apply_actions, call_texts
from langchain_pacms.lifecycle.objects import index_messages

__all__ = ["FoldVariant", "fold_variants"]


@dataclass(frozen=True)
class FoldVariant:
    """One tool span as its fold stub.

    Attributes:
        messages: What the variant sends: the span's call message (the same object) and its
            results with the stub as content.
        record: The exact payload, for the sidecar store.

    Example:
        >>> FoldVariant((), SidecarRecord.of("function:tool:1", "x", "tool")).record.kind
        'tool'
    """

    messages: tuple[BaseMessage, ...]
    record: SidecarRecord


def fold_variants(
    messages: Sequence[BaseMessage],
    *,
    token_counter: Callable[[str], int] | str | None = None,
    calls: bool = True,
) -> dict[int, FoldVariant]:
    """The fold-stub variant of every active tool span with results, by its call's index.

    Spans that an earlier fold or mask already rewrote are left out (their stub is what the
    history holds). ``messages`` is not modified.

    Args:
        messages: The history, oldest first.
        token_counter: As in :func:`~langchain_pacms.lifecycle.objects.index_messages`.
        calls: Fold a call message that carries text or long arguments with its results
            (``scope="span"``: its tool calls stay, with long arguments replaced by a pointer,
            and the record's payload is :func:`~langchain_pacms.lifecycle.actions.span_payload`
            JSON); a call with neither, or any call when false, stays as it is and the payload
            is the results alone.

    Returns:
        ``index of the span's AIMessage -> FoldVariant``.
    """
    index = index_messages(messages, token_counter=token_counter)
    spans = [o for o in index.objects if o.kind == "tool" and o.state == "active"
             and len(o.indices) > 1]
    if not spans:
        return {}
    # no dedupe: the selector may drop the messages a stub would lean on
    actions = [Action("fold", o.id, scope="span" if calls and any(call_texts(
        messages[o.indices[0]])) else "output") for o in spans]
    folded = apply_actions(messages, index, actions, token_counter=token_counter, dedupe=False)
    records = {r.object_id: r for r in folded.sidecars}
    return {
        o.indices[0]: FoldVariant(tuple(folded.messages[i] for i in o.indices), records[o.id])
        for o in spans
    }
