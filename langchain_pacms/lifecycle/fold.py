"""Fold: a payload leaves for a sidecar; a stub (pointer, description, new locators) stays."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from langchain_pacms.lifecycle.objects import ContextObject
from langchain_pacms.lifecycle.rewrite import LONG_ARGUMENT, REWRITES, rewrite
from langchain_pacms.messages.identity import by_message, by_messages
from langchain_pacms.messages.locators import (
    ShownBefore,
    durable_locators,
    ranked_stub_locators,
    stub_locators,
)
from langchain_pacms.messages.payload import LIFECYCLE_KEY, content_payload, payload_of
from langchain_pacms.messages.text import content_text

__all__ = [
    "Scope",
    "SidecarRecord",
    "call_texts",
    "fold_locators",
    "fold_object",
    "shown_before",
    "span_payload",
    "span_results",
    "stub_shows",
    "visible_locators",
]

Scope = Literal["output", "span"]

# a fold's payload, hash, description, locator source and length, per object's messages
_FOLDS: by_messages[tuple[str, str, str, str, str]] = by_messages(1_024)


@dataclass(frozen=True)
class SidecarRecord:
    """A folded payload, ready for a store.

    Attributes:
        sha256: Hex digest of ``payload`` encoded as UTF-8.
        lineage: Ids of the original messages.
        description: One line: the calls and the size of a tool result.

    Example:
        >>> SidecarRecord.of("function:tool:1", "x", "tool").sha256[:8]
        '2d711642'
    """

    object_id: str
    payload: str
    sha256: str
    kind: str
    lineage: tuple[str, ...] = ()
    description: str = ""

    @classmethod
    def of(
        cls,
        object_id: str,
        payload: str,
        kind: str,
        lineage: Sequence[str] = (),
        description: str = "",
    ) -> SidecarRecord:
        """Build a record, hashing the payload."""
        digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
        return cls(object_id, payload, digest, kind, tuple(lineage), description)


def _lines(text: str) -> str:
    lines = text.count("\n") + (not text.endswith("\n"))  # a final newline ends the last line
    return f"{lines} line{'s' * (lines != 1)}"


def _describe(messages: Sequence[BaseMessage], obj: ContextObject, payload: str) -> str:
    size = f"{_lines(payload)}, {len(payload)} chars"
    head = messages[obj.indices[0]]
    if obj.kind == "tool" and isinstance(head, AIMessage):
        calls = ", ".join(
            f"{c.get('name')}("
            + ", ".join(f"{k}={str(v)[:60]}" for k, v in (c.get("args") or {}).items())
            + ")"
            for c in head.tool_calls
        )
        return f"{calls} -> {size}"
    first = next((ln.strip() for ln in payload.splitlines() if ln.strip()), "")
    return f"{obj.kind} message ({size}): {first[:80]}"


def span_payload(messages: Sequence[BaseMessage], obj: ContextObject) -> str:
    r"""The payload of a span fold: JSON ``{"text", "tool_calls", "results"}`` of the span.

    Example:
        >>> from langchain_core.messages import ToolMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> msgs = [AIMessage("look", tool_calls=[{"name": "sh", "args": {}, "id": "c1"}], id="a"),
        ...         ToolMessage("a.py", tool_call_id="c1", id="t")]
        >>> json.loads(span_payload(msgs, index_messages(msgs).objects[0]))["results"]
        'a.py'
    """
    head = messages[obj.indices[0]]
    calls = [
        {"name": c.get("name"), "args": c.get("args") or {}, "id": c.get("id")}
        for c in getattr(head, "tool_calls", None) or []
    ]
    text = content_payload(head.content)
    return json.dumps(
        {"text": text, "tool_calls": calls, "results": payload_of(messages, obj.indices)},
        ensure_ascii=False,
        default=str,
    )


def _is_span(messages: Sequence[BaseMessage], obj: ContextObject, scope: Scope) -> bool:
    return (
        scope == "span"
        and obj.kind == "tool"
        and len(obj.indices) > 1
        and isinstance(messages[obj.indices[0]], AIMessage)
    )


def fold_object(
    messages: Sequence[BaseMessage],
    out: list[BaseMessage],
    obj: ContextObject,
    scope: Scope,
    shown: Container[str],
) -> tuple[list[int], SidecarRecord]:
    """Fold ``obj`` in ``out`` (a copy of ``messages``): the rewritten indices and its record.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> msgs = [HumanMessage("see /srv/app.py", id="h")]
        >>> out = list(msgs)
        >>> _, record = fold_object(msgs, out, index_messages(msgs).objects[0], "output", set())
        >>> out[0].content.split("; ")[1:], record.payload
        (['recover_context("conversation:user:1")', 'locators: /srv/app.py]'], 'see /srv/app.py')
    """
    span = _is_span(messages, obj, scope)
    payload, sha256, description, source, length = _fold_material(messages, obj, span)
    locators = stub_locators(sha256, source, shown)
    every = stub_locators(sha256, source).locators if shown else ()
    elsewhere = tuple(t for t in every if t in shown)
    record = SidecarRecord(obj.id, payload, sha256, obj.kind, obj.lineage, description)
    pointer = f"[folded with {obj.id}]"

    def mark(message: BaseMessage, extra: dict[str, Any]) -> dict[str, Any]:
        # list content is stored as JSON; the mark says so, for restore to parse it back
        listed = {"list_content": True} if isinstance(message.content, list) else {}
        return {"object": obj.id, "state": "folded", "sha256": sha256, **listed, **extra}

    def fold() -> list[tuple[int, BaseMessage]]:
        results = [i for i in obj.indices if isinstance(out[i], ToolMessage)]
        # a tool result's stub follows its call (in view): it gives only the results' length
        size = length if results else description
        stub = f'[folded: {size}; recover_context("{obj.id}")' + (
            f"; locators: {locators}]" if locators else "]"
        )
        targets = results or [obj.indices[0]]
        for n, i in enumerate(targets):
            left_out = {"elsewhere": list(elsewhere)} if n == 0 and elsewhere else {}
            out[i] = rewrite(out[i], pointer if n else stub, mark(out[i], left_out))
        if span:  # the call's text and long arguments go too; the stub stays first
            head = out[obj.indices[0]]
            out[obj.indices[0]] = rewrite(head, "", mark(head, {"span": True}), pointer)
            targets = [*targets, obj.indices[0]]
        return [(obj.indices.index(i), out[i]) for i in targets]

    # the stubs depend on the object's messages and what they leave out (memoised by id)
    held = tuple(messages[i] for i in obj.indices)
    key = ("fold", obj.id, obj.kind, span, locators, elsewhere)
    rewritten = REWRITES(held, key, fold) if all(m.id for m in held) else fold()
    for k, message in rewritten:
        out[obj.indices[k]] = message
    return [obj.indices[k] for k, _ in rewritten], record


def visible_locators(messages: Sequence[BaseMessage]) -> frozenset[str]:
    """What a stub need not repeat: locators of system and user messages, short arguments, stubs."""
    return durable_locators([t for m in messages for t in _visible_texts(m)])


def shown_before(messages: Sequence[BaseMessage]) -> ShownBefore:
    """What :func:`visible_locators` gives for every prefix of ``messages``, built in one pass.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> shown = shown_before([HumanMessage("fix HAT039"), HumanMessage("and HAT040")])
        >>> "HAT040" in shown.upto(1), "HAT040" in shown.upto(2)
        (False, True)
    """
    return ShownBefore(_visible_texts(m) for m in messages)


@by_message
def _visible_texts(m: BaseMessage) -> tuple[str, ...]:
    """The texts of one message that a fold leaves in view (see :func:`visible_locators`)."""
    mark = m.additional_kwargs.get(LIFECYCLE_KEY) or {}
    kept = m.type in ("system", "human") or mark.get("state") == "folded"
    return (
        *([content_text(m.content)] if kept else []),
        *(
            v
            for call in getattr(m, "tool_calls", None) or []
            for v in (call.get("args") or {}).values()
            if isinstance(v, str) and len(v) < LONG_ARGUMENT
        ),
    )


@by_message
def stub_shows(stub: BaseMessage) -> frozenset[str]:
    """What a fold stub shows (:func:`durable_locators` of its text)."""
    return durable_locators([str(stub.content)])


def _fold_material(
    messages: Sequence[BaseMessage], obj: ContextObject, span: bool
) -> tuple[str, str, str, str, str]:
    """A fold's payload, sha256, description, locator source and length (memoised)."""

    def compute() -> tuple[str, str, str, str, str]:
        payload = span_payload(messages, obj) if span else payload_of(messages, obj.indices)
        digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
        # locators, size and lines come from the texts as written (content blocks as their
        # text, several results one after another), not from their JSON-escaped payload
        results = _written(messages, obj.indices)
        source = "\n".join([*call_texts(messages[obj.indices[0]]), results]) if span else results
        return payload, digest, _describe(messages, obj, results), source, _lines(results)

    held = tuple(messages[i] for i in obj.indices)
    return _FOLDS(held, (span, obj.kind), compute)


def _written(messages: Sequence[BaseMessage], indices: Sequence[int]) -> str:
    """An object's results as written, one after another (a message's text if it has none)."""
    results = [messages[i] for i in indices if isinstance(messages[i], ToolMessage)]
    held = results or [messages[indices[0]]]
    return "\n".join(_unspanned(content_text(m.content)) for m in held)


def span_results(payload: str) -> str | None:
    """The results a span fold's payload (:func:`span_payload`) holds; ``None``: not one.

    Example:
        >>> span_results('{"text": "", "tool_calls": [], "results": "ok"}'), span_results("ok")
        ('ok', None)
    """
    value = _json(payload, '{"text": ')
    if isinstance(value, dict) and value.keys() == {"text", "tool_calls", "results"}:
        results = value["results"]
        return results if isinstance(results, str) else None
    return None


def _unspanned(text: str) -> str:
    """``text``, or a recovered payload's results as written.

    What ``recover_context`` returns for a span fold (JSON ``{"text", "tool_calls",
    "results"}``) or for a round of several results (a JSON list of ``{"tool_call_id",
    "content"}``) reads as its results' texts, one after another.
    """
    results = span_results(text)
    if results is not None:
        return _unspanned(results)
    value = _json(text, '[{"tool_call_id": ')
    if isinstance(value, list) and all(
        isinstance(v, dict) and isinstance(v.get("content"), str) for v in value
    ):
        return "\n".join(v["content"] for v in value)
    return text


def _json(text: str, start: str) -> Any:
    """``text`` read as JSON when it starts with ``start`` (``None`` otherwise or if unreadable)."""
    if not text.startswith(start):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def fold_locators(
    messages: Sequence[BaseMessage], obj: ContextObject, scope: Scope = "output"
) -> list[str]:
    """Every locator a fold stub of ``obj`` may show, best first (memoised by content).

    The locators of a span's call texts, then of its results (:func:`ranked_stub_locators`).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> msgs = [HumanMessage("see /srv/app.py, HAT039")]
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> fold_locators(msgs, index_messages(msgs).objects[0])
        ['/srv/app.py', 'HAT039']
    """
    _, sha256, _, source, _ = _fold_material(messages, obj, _is_span(messages, obj, scope))
    return ranked_stub_locators(sha256, source)


def call_texts(head: BaseMessage) -> list[str]:
    """What a span fold takes from a call message: its text and its long string arguments."""
    long = [
        v
        for c in getattr(head, "tool_calls", None) or []
        for v in (c.get("args") or {}).values()
        if isinstance(v, str) and len(v) >= LONG_ARGUMENT
    ]
    return [content_text(head.content), *long]
