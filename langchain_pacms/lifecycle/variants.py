r"""Fold-stub variants of tool spans, for per-call selection inside a long tool loop.

When the selector drops a tool span, the model need not lose it: the span can be sent as its
fold stub instead, the lifecycle's own ``[folded: 40 lines;
recover_context("function:tool:N"); locators: ...]`` line (see
:mod:`langchain_pacms.lifecycle.actions`), at a small token cost. :func:`fold_variants` folds
every active tool span of a history on a copy and returns, per span, the messages the stub
variant sends (the call and its folded results; a call's own text and long arguments are
folded with them, its tool calls stay) and the
:class:`~langchain_pacms.lifecycle.actions.SidecarRecord` that must be in the sidecar store
before those messages reach the model.

A stub leaves out the locators that the history up to its span's call already shows (the
system prompt, user messages, short call arguments: see
:func:`~langchain_pacms.lifecycle.actions.visible_locators`) and lists them in its mark; the
selection shows them in the stub again when it sends none of the messages that show them
(:func:`~langchain_pacms.lifecycle.actions.reshow_left_out`). What a stub holds depends on its
span and the history before it alone, so it stays the same while the history grows.

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
    [folded: 2 lines; recover_context("function:tool:1"); locators: port=8080]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from langchain_pacms._lru import LruMemo
from langchain_pacms.lifecycle.actions import (
    Action,
    SidecarRecord,
    apply_actions,
    call_texts,
    shown_before,
)
from langchain_pacms.lifecycle.heuristic import call_values, read_paths, reusable_values
from langchain_pacms.lifecycle.objects import ContextObject, index_messages, payload_of

__all__ = ["FoldMemo", "FoldVariant", "fold_variants", "latest_reads", "reused_spans"]


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


class FoldMemo(LruMemo[Hashable, FoldVariant]):
    """Fold variants remembered between calls, so a growing history folds only its new spans.

    An entry is found by the span's object id, the hash of its payload, its calls and its call
    message's text, so a span whose messages changed is folded again. The same variant is
    returned while the span stays as it was: its messages are the same objects from call to
    call (which lets :class:`~langchain_pacms.integrations.messages.MessageMemo` count them
    once). The least recently used entries beyond ``max_entries`` are forgotten.

    Args:
        max_entries: Most variants remembered (> 0).

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = {"name": "read", "args": {"path": "a.py"}, "id": "c1"}
        >>> msgs = [HumanMessage("go"), AIMessage("", tool_calls=[call]),
        ...         ToolMessage("x = 1", tool_call_id="c1")]
        >>> memo = FoldMemo()
        >>> fold_variants(msgs, memo=memo)[1] is fold_variants(msgs, memo=memo)[1]
        True
    """

    def __init__(self, max_entries: int = 4096) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        super().__init__(max_entries)


def _span_key(messages: Sequence[BaseMessage], obj: ContextObject, calls: bool) -> Hashable:
    head = messages[obj.indices[0]].content
    text = head if isinstance(head, str) else json.dumps(head, sort_keys=True, default=str)
    return (obj.id, obj.sha256, obj.signature, len(obj.indices), calls, text)


def fold_variants(
    messages: Sequence[BaseMessage],
    *,
    token_counter: Callable[[str], int] | str | None = None,
    calls: bool = True,
    memo: FoldMemo | None = None,
) -> dict[int, FoldVariant]:
    """The fold-stub variant of every active tool span with results, by its call's index.

    Spans that an earlier fold or mask already rewrote are left out (their stub is what the
    history holds). A stub leaves out what the history up to its span's call shows (see the
    module docs). ``messages`` is not modified.

    Args:
        messages: The history, oldest first.
        token_counter: As in :func:`~langchain_pacms.lifecycle.objects.index_messages`.
        calls: Fold a call message that carries text or long arguments with its results
            (``scope="span"``: its tool calls stay, with long arguments replaced by a pointer,
            and the record's payload is :func:`~langchain_pacms.lifecycle.actions.span_payload`
            JSON); a call with neither, or any call when false, stays as it is and the payload
            is the results alone.
        memo: Variants of earlier calls to reuse (see :class:`FoldMemo`); the spans it does
            not hold are folded and added to it.

    Returns:
        ``index of the span's AIMessage -> FoldVariant``.
    """
    index = index_messages(messages, token_counter=token_counter)
    spans = [
        o for o in index.objects if o.kind == "tool" and o.state == "active" and len(o.indices) > 1
    ]
    found: dict[int, FoldVariant] = {}
    todo: list[tuple[ContextObject, Hashable]] = []
    for o in spans:
        key = _span_key(messages, o, calls)
        hit = memo.get(key) if memo is not None else None
        if hit is not None:
            found[o.indices[0]] = hit
        else:
            todo.append((o, key))
    if todo:
        # a stub leaves out what the history shows up to its span's call (so it depends on
        # that prefix alone, which a growing history keeps); the selection shows those
        # locators again if it drops every message that shows them
        actions = [
            Action(
                "fold",
                o.id,
                scope="span" if calls and any(call_texts(messages[o.indices[0]])) else "output",
            )
            for o, _ in todo
        ]
        folded = apply_actions(
            messages, index, actions, token_counter=token_counter, shown=shown_before(messages)
        )
        records = {r.object_id: r for r in folded.sidecars}
        for o, key in todo:
            variant = FoldVariant(tuple(folded.messages[i] for i in o.indices), records[o.id])
            found[o.indices[0]] = variant
            if memo is not None:
                memo.put(key, variant)
    return dict(sorted(found.items()))


def reused_spans(
    messages: Sequence[BaseMessage], values: Mapping[int, frozenset[str]]
) -> frozenset[int]:
    """The tool spans whose results hold a value that a later tool call already took up.

    Such a result is a record the run keeps coming back to (a customer profile whose ids later
    lookups use, a file listing whose paths later reads open): the selection counts it as
    relevant as the most relevant candidate (``SelectionConfig.lift_reused``), and its stub
    goes before the stub of an older result nothing used yet. It is the heuristic planner's
    *live handle* rule (values as
    :func:`~langchain_pacms.lifecycle.heuristic.reusable_values` finds them; a value the
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
    a line range: :func:`~langchain_pacms.lifecycle.heuristic.read_paths`) counts as reused
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
