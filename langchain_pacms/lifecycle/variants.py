"""Fold-stub variants of tool spans a selection drops (store their records before sending)."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from langchain_pacms._lru import LruMemo
from langchain_pacms.lifecycle.actions import Action, apply_actions
from langchain_pacms.lifecycle.fold import (
    Scope,
    SidecarRecord,
    call_texts,
    fold_locators,
    shown_before,
)
from langchain_pacms.lifecycle.objects import ContextObject, index_messages
from langchain_pacms.messages.payload import exact_payload

__all__ = ["FoldMemo", "FoldVariant", "fold_variants"]


@dataclass(frozen=True)
class FoldVariant:
    """One tool span as its fold stub.

    Attributes:
        messages: The span's call message and its results with the stub as content.
        record: The exact payload, for the sidecar store.

    Example:
        >>> FoldVariant((), SidecarRecord.of("function:tool:1", "x", "tool")).record.kind
        'tool'
    """

    messages: tuple[BaseMessage, ...]
    record: SidecarRecord


class FoldMemo(LruMemo[Hashable, FoldVariant]):
    """Fold variants memoised between calls (LRU), so a growing history folds only its new spans.

    Args:
        max_entries: Most variants remembered (> 0).
        max_chars: Most characters of payloads and stubs remembered (> 0).

    Example:
        >>> FoldMemo(0)
        Traceback (most recent call last):
        ...
        ValueError: max_entries must be an int >= 1, got 0
    """

    def __init__(self, max_entries: int = 4096, *, max_chars: int = 64_000_000) -> None:
        for name, cap in (("max_entries", max_entries), ("max_chars", max_chars)):
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
                raise ValueError(f"{name} must be an int >= 1, got {cap!r}")
        super().__init__(max_entries, max_bytes=max_chars, weigh=_variant_chars)


def _variant_chars(_: Hashable, variant: FoldVariant) -> int:
    stubs = sum(len(m.content) if isinstance(m.content, str) else 0 for m in variant.messages)
    return len(variant.record.payload) + stubs


def fold_variants(
    messages: Sequence[BaseMessage],
    *,
    token_counter: Callable[[str], int] | str | None = None,
    calls: bool = True,
    memo: FoldMemo | None = None,
    known_ids: Mapping[str, str] | None = None,
) -> dict[int, FoldVariant]:
    """The fold-stub variant of every active tool span with results, by its ``AIMessage``'s index.

    A stub leaves out the locators shown up to its span's call, so it stays the same as the
    history grows; a variant is reused only for the same span, id and left-out locators.

    Args:
        messages: The history, oldest first.
        token_counter: As in :func:`~langchain_pacms.lifecycle.objects.index_messages`.
        calls: Fold a call message that carries text or long arguments with its results
            (``scope="span"``).
        memo: Variants of earlier calls to reuse; new ones are added.
        known_ids: The lifecycle's ``message id -> object id`` map of this history
            (:func:`~langchain_pacms.lifecycle.node.known_ids_of` of the state), so each stub
            names its span by the id ``recover_context`` finds it under after a prune.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = {"name": "read", "args": {"path": "src/app.py"}, "id": "c1"}
        >>> msgs = [HumanMessage("fix it"), AIMessage("", tool_calls=[call]),
        ...         ToolMessage("port=8080", tool_call_id="c1")]
        >>> memo = FoldMemo()
        >>> variant = fold_variants(msgs, memo=memo)[1]
        >>> variant.messages[1].content, fold_variants(msgs, memo=memo)[1] is variant
        ('[folded: 1 line; recover_context("function:tool:1"); locators: port=8080]', True)
    """
    index = index_messages(messages, token_counter=token_counter, known_ids=known_ids)
    spans = [
        o
        for o in index.objects
        if o.kind == "tool"
        and o.state == "active"
        and len(o.indices) > 1
        and exact_payload(messages, o.indices, calls=calls)  # else a stub would lose values
    ]
    shown = shown_before(messages)
    found: dict[int, FoldVariant] = {}
    todo: list[tuple[ContextObject, Scope, Hashable]] = []
    for o in spans:
        scope: Scope = "span" if calls and any(call_texts(messages[o.indices[0]])) else "output"
        seen = shown.upto(o.indices[0] + 1)  # what the history shows up to the span's call
        hidden = tuple(t for t in fold_locators(messages, o, scope) if t in seen)
        head = messages[o.indices[0]]
        text = head.content
        if not isinstance(text, str):
            text = json.dumps(text, sort_keys=True, default=str)
        # the messages' own ids too: another thread or branch can hold the same span's contents
        ids = tuple(
            (m.id, getattr(m, "tool_call_id", None)) for m in (messages[i] for i in o.indices)
        )
        call_ids = tuple(c.get("id") for c in getattr(head, "tool_calls", None) or [])
        key: Hashable = (o.id, o.sha256, o.signature, ids, call_ids, scope, text, hidden)
        hit = memo.get(key) if memo is not None else None
        if hit is not None:
            found[o.indices[0]] = hit
        else:
            todo.append((o, scope, key))
    if todo:
        actions = [Action("fold", o.id, scope=scope) for o, scope, _ in todo]
        folded = apply_actions(messages, index, actions, token_counter=token_counter, shown=shown)
        records = {r.object_id: r for r in folded.sidecars}
        for o, _, key in todo:
            variant = FoldVariant(tuple(folded.messages[i] for i in o.indices), records[o.id])
            found[o.indices[0]] = variant
            if memo is not None:
                memo.put(key, variant)
    return dict(sorted(found.items()))
