"""Fold, mask and prune objects on a copy of a history (fold and mask keep ids and tool calls)."""

from __future__ import annotations

import json
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from langchain_pacms.lifecycle.fold import (
    Scope,
    SidecarRecord,
    fold_object,
    stub_shows,
    visible_locators,
)
from langchain_pacms.lifecycle.mask import mask_object
from langchain_pacms.lifecycle.objects import ContextIndex, ContextObject
from langchain_pacms.lifecycle.rewrite import message_size
from langchain_pacms.lifecycle.tuning import Masking
from langchain_pacms.messages.locators import ShownBefore
from langchain_pacms.messages.payload import LIFECYCLE_KEY
from langchain_pacms.tokens import resolve_token_counter

__all__ = [
    "Action",
    "ActionResult",
    "Op",
    "action_gain",
    "apply_actions",
    "provider_problems",
    "restore",
]
_MASKING = Masking()

Op = Literal["fold", "mask", "prune"]


@dataclass(frozen=True)
class Action:
    """One planned action on one object.

    Attributes:
        target: The object id.
        reason: Why (shown in logs and events).
        scope: For a fold of a tool span: ``"output"`` folds its results only; ``"span"`` also
            the call message's text and long string arguments.

    Example:
        >>> Action("fold", "function:tool:2", "old script", scope="span").scope
        'span'
    """

    op: Op
    target: str
    reason: str = ""
    scope: Scope = "output"


@dataclass(frozen=True)
class ActionResult:
    """The outcome of :func:`apply_actions`.

    Attributes:
        sidecars: One record per folded object (store them before using ``messages``).
        replaced: ``message id -> new message`` for rewritten messages.
        removed: Ids of removed messages.
        tokens_before: Tokens of the objects touched, before (``tokens_after``: after).
        saved: ``object id -> tokens removed`` (negative when a stub is larger).
    """

    messages: list[BaseMessage]
    sidecars: tuple[SidecarRecord, ...] = ()
    replaced: Mapping[str, BaseMessage] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    applied: tuple[Action, ...] = ()
    tokens_before: int = 0
    tokens_after: int = 0
    saved: Mapping[str, int] = field(default_factory=dict)


def _rewrite_object(
    messages: Sequence[BaseMessage],
    out: list[BaseMessage],
    obj: ContextObject,
    action: Action,
    shown: Container[str],
    masking: Masking,
) -> tuple[list[int], SidecarRecord | None]:
    """Fold or mask ``obj`` in ``out``: the rewritten indices and the sidecar record."""
    if action.op == "mask":
        return mask_object(out, obj, masking.head, masking.tail), None
    if action.op != "fold":
        raise ValueError(f"unknown op {action.op!r} (expected fold, mask or prune)")
    return fold_object(messages, out, obj, action.scope, shown)


def action_gain(
    messages: Sequence[BaseMessage],
    obj: ContextObject,
    action: Action,
    *,
    shown: frozenset[str] = frozenset(),
    masking: Masking = _MASKING,
) -> int:
    """Characters a fold or mask of ``obj`` takes out of view (negative: the stub is larger)."""
    if action.op == "prune":
        return sum(message_size(messages[i], len) for i in obj.indices)
    out = list(messages)
    indices, _ = _rewrite_object(messages, out, obj, action, shown, masking)
    return sum(message_size(messages[i], len) - message_size(out[i], len) for i in indices)


def apply_actions(
    messages: Sequence[BaseMessage],
    index: ContextIndex,
    actions: Sequence[Action],
    *,
    token_counter: Any = None,
    masking: Masking = _MASKING,
    dedupe: bool = True,
    shown: frozenset[str] | ShownBefore | None = None,
) -> ActionResult:
    """Apply actions to a copy of ``messages`` (one action per object; the first one wins).

    Only the targets are checked here; :func:`check_actions` validates plans.

    Args:
        messages: The history that ``index`` was built from (not modified).
        index: Its :class:`ContextIndex`.
        actions: The actions.
        token_counter: Counter for ``tokens_after`` (default: offline ``o200k_base``).
        masking: What a mask keeps of each content (default ``Masking()``).
        dedupe: Leave out of fold stubs the locators visible elsewhere in the history.
        shown: With ``dedupe``, what counts as visible: a set or a ``shown_before`` (default:
            the whole history).

    Raises:
        KeyError: If an action targets an id that is not in ``index``.
        ValueError: If an action targets a system object or has an unknown op.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle import index_messages
        >>> msgs = [HumanMessage("old brief " * 40, id="h1"), HumanMessage("next", id="h2")]
        >>> fold = Action("fold", "conversation:user:1")
        >>> result = apply_actions(msgs, index_messages(msgs), [fold])
        >>> result.messages[0].content[:9], result.sidecars[0].payload == msgs[0].content
        ('[folded: ', True)
    """
    count = resolve_token_counter(token_counter)
    out = list(messages)
    sidecars: list[SidecarRecord] = []
    touched: dict[int, None] = {}
    drop: set[int] = set()
    applied: list[Action] = []
    saved: dict[str, int] = {}  # also: the objects done (one action per object)
    before = after = 0
    shown = shown if dedupe else None
    grown: set[str] | None = None  # ``shown`` and the locators of this call's stubs so far
    for action in actions:
        obj = index.by_id[action.target]
        if obj.kind == "system":
            raise ValueError(f"{obj.id}: system prompts are never folded, masked or pruned")
        if obj.id in saved:
            continue
        before += obj.tokens
        applied.append(action)
        if action.op == "prune":
            drop.update(obj.indices)
            saved[obj.id] = obj.tokens
            continue
        if shown is None and dedupe and action.op == "fold":
            # what this edit prunes is no longer visible: its call arguments do not count
            gone = {
                i
                for a in actions
                if a.op == "prune" and a.target in index.by_id
                for i in index.by_id[a.target].indices
            }
            shown = visible_locators([m for i, m in enumerate(messages) if i not in gone])
        seen: Container[str]
        if isinstance(shown, ShownBefore):
            seen = shown.upto(obj.indices[0] + 1)
        else:
            seen = grown if grown is not None else shown or frozenset()
        indices, record = _rewrite_object(messages, out, obj, action, seen, masking)
        touched.update(dict.fromkeys(indices))
        if record is not None:
            sidecars.append(record)
            if isinstance(shown, frozenset):  # a later stub need not repeat its locators
                grown = set(shown) if grown is None else grown
                grown.update(stub_shows(out[indices[0]]))
        # the messages it left alone count the same before and after
        now = obj.tokens + sum(
            message_size(out[i], count, held=True) - message_size(messages[i], count, held=True)
            for i in dict.fromkeys(indices)
        )
        after += now
        saved[obj.id] = obj.tokens - now
    replaced = {str(out[i].id): out[i] for i in touched if out[i].id and i not in drop}
    removed = tuple(str(messages[i].id) for i in sorted(drop) if messages[i].id)
    kept = [m for i, m in enumerate(out) if i not in drop]
    return ActionResult(
        kept, tuple(sidecars), replaced, removed, tuple(applied), before, max(after, 0), saved
    )


def provider_problems(messages: Sequence[BaseMessage]) -> list[str]:
    """What a provider would reject in ``messages`` (empty when the list is valid).

    Example:
        >>> provider_problems([ToolMessage("x", tool_call_id="c")])
        ['ToolMessage c answers no call', 'first non-system message is a tool message']
    """
    problems: list[str] = []
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            cid = str(message.tool_call_id)
            if cid not in open_calls:
                problems.append(f"ToolMessage {cid} answers no call")
            open_calls.discard(cid)
            continue
        if open_calls:
            problems.append(f"tool call(s) {sorted(open_calls)} have no result")
            open_calls.clear()
        if isinstance(message, AIMessage):
            open_calls.update(str(c["id"]) for c in message.tool_calls if c.get("id"))
    if open_calls:
        problems.append(f"tool call(s) {sorted(open_calls)} have no result")
    first = next((m for m in messages if m.type != "system"), None)
    if first is not None and first.type != "human":
        problems.append(f"first non-system message is a {first.type} message")
    return problems


def restore(
    messages: Sequence[BaseMessage],
    index: ContextIndex,
    record: SidecarRecord,
    *,
    token_counter: Any = None,
) -> ActionResult:
    r"""Re-activate a folded object from its sidecar record (on a copy of ``messages``).

    The folded messages (in ``replaced``) get their exact content back, without lifecycle mark.

    Args:
        messages: The history that ``index`` was built from (not modified).
        index: Its :class:`ContextIndex`.
        record: The object's :class:`SidecarRecord` (as a sidecar store returns it).
        token_counter: Counter for the token figures (default: offline ``o200k_base``).

    Raises:
        KeyError: If ``record.object_id`` is not in ``index``.
        ValueError: If the object is not folded or the record is not what its stub points at.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle import index_messages
        >>> msgs = [HumanMessage("a brief\x00", id="h1"), HumanMessage("next", id="h2")]
        >>> fold = Action("fold", "conversation:user:1")
        >>> folded = apply_actions(msgs, index_messages(msgs), [fold])
        >>> back = restore(folded.messages, index_messages(folded.messages), folded.sidecars[0])
        >>> back.messages[0].content == msgs[0].content, back.messages[0].additional_kwargs
        (True, {})
    """
    obj = index.by_id[record.object_id]
    if obj.state != "folded":
        raise ValueError(f"{obj.id} is {obj.state}, not folded: nothing to restore")
    if SidecarRecord.of(obj.id, record.payload, record.kind).sha256 != record.sha256:
        raise ValueError(f"{obj.id}: the sidecar payload does not match its sha256")
    if record.sha256 != obj.sha256:
        raise ValueError(f"{obj.id}: the sidecar is not the payload its fold stub points at")
    out = list(messages)
    targets = [i for i in obj.indices if isinstance(out[i], ToolMessage)] or [obj.indices[0]]
    span = bool((out[obj.indices[0]].additional_kwargs.get(LIFECYCLE_KEY) or {}).get("span"))
    payload: dict[str, Any] = json.loads(record.payload) if span else {"results": record.payload}
    results = payload["results"]
    texts = [str(p["content"]) for p in json.loads(results)] if len(targets) > 1 else [results]
    changes: list[tuple[int, str, dict[str, Any]]] = [
        (i, t, {}) for i, t in zip(targets, texts, strict=True)
    ]
    if span:
        calls = [{**c, "type": "tool_call"} for c in payload["tool_calls"]]
        changes.insert(0, (obj.indices[0], payload["text"], {"tool_calls": calls}))
    count = resolve_token_counter(token_counter)
    replaced: dict[str, BaseMessage] = {}
    after = obj.tokens
    for i, text, extra in changes:
        old = out[i]
        mark = old.additional_kwargs.get(LIFECYCLE_KEY) or {}
        content: str | list[Any] = json.loads(text) if mark.get("list_content") else text
        kwargs = {k: v for k, v in old.additional_kwargs.items() if k != LIFECYCLE_KEY}
        out[i] = old.model_copy(update={"content": content, "additional_kwargs": kwargs, **extra})
        after += message_size(out[i], count) - message_size(old, count)
        if old.id:
            replaced[str(old.id)] = out[i]
    return ActionResult(out, (), replaced, (), (), obj.tokens, max(after, 0))
