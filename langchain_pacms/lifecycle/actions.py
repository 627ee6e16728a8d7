r"""Fold, mask and prune context objects on a plain message list (pure data, no LangGraph).

* **fold**: the exact payload (:func:`~langchain_pacms.lifecycle.objects.payload_of`) leaves
  the history for a sidecar (a :class:`SidecarRecord` the caller stores); the messages keep a
  short stub: the recovery pointer, a one-line description (for a tool result only its length in
  lines: its call stays in view just before it) and the locators found in the payload
  (:mod:`~langchain_pacms.lifecycle.locators`: paths, URLs, ids, quoted values, numbers, within
  a budget that grows with the payload; paths that do not fit whole are grouped by directory,
  and what still does not fit is counted, ``(+12 more)``);
* **mask**: the head and tail of the content stay, the middle is replaced by a marker saying how
  many characters and lines were elided (no recovery promise);
* **prune**: every message of the object goes (an ``AIMessage`` tool call with all its results).

Fold and mask rewrite content only: message ids, ``tool_calls`` and ``tool_call_id`` are kept,
so the list stays one a provider accepts. The rewritten message records its object id and state
in ``additional_kwargs["pacms_lifecycle"]``; a fold stub's mark also lists, under ``"elsewhere"``,
the payload's locators it leaves out because the history shows them elsewhere (what a later
reader needs to know which values the folded payload holds). Inputs are never modified.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> from langchain_pacms.lifecycle.objects import index_messages
    >>> call = {"name": "read", "args": {"path": "src/main.py"}, "id": "c1"}
    >>> msgs = [HumanMessage("read it", id="h1"), AIMessage("", tool_calls=[call], id="a1"),
    ...         ToolMessage("def main():\n    port=8080", tool_call_id="c1", id="t1"),
    ...         HumanMessage("thanks", id="h2")]
    >>> result = apply_actions(msgs, index_messages(msgs), [Action("fold", "function:tool:1")])
    >>> print(result.messages[2].content)  # doctest: +NORMALIZE_WHITESPACE
    [folded: 2 lines; recover_context("function:tool:1"); locators: port=8080]
    >>> result.sidecars[0].payload == msgs[2].content
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from langchain_pacms.lifecycle.locators import (
    ShownBefore,
    StubLocators,
    durable_locators,
    find_locators,
    locator_budget,
    locator_lines,
    stub_locators,
)
from langchain_pacms.lifecycle.objects import (
    LIFECYCLE_KEY,
    ContextIndex,
    ContextObject,
    _content_payload,
    by_message,
    by_messages,
    payload_of,
)

__all__ = [
    "LONG_ARGUMENT",
    "Action",
    "ActionResult",
    "Op",
    "Scope",
    "SidecarRecord",
    "action_gain",
    "apply_actions",
    "call_texts",
    "find_locators",
    "fold_source",
    "mask_text",
    "provider_problems",
    "reshow_left_out",
    "restore",
    "shown_before",
    "span_payload",
    "visible_locators",
]

Op = Literal["fold", "mask", "prune"]
Scope = Literal["output", "span"]

LONG_ARGUMENT = 200
"""Characters from which a span fold replaces a tool call's string argument with a pointer."""

# a history is rehearsed again at every step and by every check: what a fold or mask of a
# message object computes is remembered (payloads by object, rewritten copies by message)
_FOLDS: by_messages[tuple[str, str, str, str, str]] = by_messages(1_024)
_REWRITES: by_messages[Any] = by_messages(8_192)


@dataclass(frozen=True)
class Action:
    """One planned action on one object.

    Attributes:
        op: ``fold``, ``mask`` or ``prune``.
        target: The object id.
        reason: Why (shown in logs and events).
        scope: For a fold of a tool span: ``"output"`` (default) folds its results and leaves
            the call message as it is; ``"span"`` also folds the call message's text and its
            long string arguments (:data:`LONG_ARGUMENT` characters or more), which the
            payload (:func:`span_payload`) keeps byte for byte.

    Example:
        >>> Action("prune", "function:tool:2", "the same file is read again later").op
        'prune'
        >>> Action("fold", "function:tool:2", "old script", scope="span").scope
        'span'
    """

    op: Op
    target: str
    reason: str = ""
    scope: Scope = "output"


@dataclass(frozen=True)
class SidecarRecord:
    """A folded payload, ready for a store.

    Attributes:
        object_id: The folded object.
        payload: The exact payload.
        sha256: Hex digest of ``payload`` encoded as UTF-8.
        kind: The object's kind.
        lineage: Ids of the original messages.
        description: The one-line description (the calls and the size of a tool result; its
            stub shows only the length in lines, the call being in view).

    Example:
        >>> SidecarRecord.of("function:tool:1", "x", "tool", ("m1",)).sha256[:8]
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


@dataclass(frozen=True)
class ActionResult:
    """The outcome of :func:`apply_actions`.

    Attributes:
        messages: The new message list.
        sidecars: One record per folded object (store them before using ``messages``).
        replaced: ``message id -> new message`` for rewritten messages.
        removed: Ids of removed messages.
        applied: The actions applied, in order.
        tokens_before: Tokens of the objects touched, before.
        tokens_after: Their tokens after (0 for pruned objects).
        saved: ``object id -> tokens removed`` per applied action (negative when a stub is
            larger than what it replaced).
    """

    messages: list[BaseMessage]
    sidecars: tuple[SidecarRecord, ...] = ()
    replaced: Mapping[str, BaseMessage] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    applied: tuple[Action, ...] = ()
    tokens_before: int = 0
    tokens_after: int = 0
    saved: Mapping[str, int] = field(default_factory=dict)


def mask_text(text: str, head: int = 400, tail: int = 200, locator_chars: int = 0) -> str:
    r"""Keep ``head`` and ``tail`` characters; replace the middle with a marker.

    With ``locator_chars`` the marker is followed by the elided lines that hold a path, URL or
    identifier not shown on an earlier kept line (:func:`~langchain_pacms.lifecycle.locators.
    locator_lines`), up to that many characters.

    Args:
        text: The content.
        head: Characters kept at the start.
        tail: Characters kept at the end.
        locator_chars: Characters of elided locator lines kept (``0``: none).

    Returns:
        The masked text (``text`` itself when it is not longer than ``head + tail``).

    Example:
        >>> mask_text("a" * 10 + "\n" + "b" * 10, head=3, tail=2)
        'aaa\n[... 16 chars, 2 lines elided by mask ...]\nbb'
        >>> print(mask_text("ok\n" * 9 + "FAIL src/a.py\n" + "ok\n" * 9 + "end", 2, 3, 99))
        ok
        [... 66 chars, 20 lines elided by mask; kept 1 line with locators ...]
        FAIL src/a.py
        end
    """
    if len(text) <= head + tail:
        return text
    middle = text[head : len(text) - tail]
    lines = middle.count("\n") + 1
    end = text[len(text) - tail :] if tail else ""
    kept = locator_lines(middle, locator_chars) if locator_chars > 0 else []
    if not kept:
        return f"{text[:head]}\n[... {len(middle)} chars, {lines} lines elided by mask ...]\n{end}"
    shown = "\n".join(kept)
    note = f"kept {len(kept)} line{'s' * (len(kept) > 1)} with locators"
    return (
        f"{text[:head]}\n[... {len(middle)} chars, {lines} lines elided by mask; {note} ...]"
        f"\n{shown}\n{end}"
    )


def _lines(text: str) -> str:
    lines = text.count("\n") + 1
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


def _rewrite(
    message: BaseMessage, content: str, mark: Mapping[str, Any], pointer: str | None = None
) -> BaseMessage:
    """A copy of ``message`` with ``content`` and the lifecycle ``mark``.

    With ``pointer``, its calls' long string arguments are replaced by it (a span fold). The
    copy is remembered per message object and edit, so rehearsing a history again makes no new
    copies (not for a message without an id, which a LangGraph channel would give one in place).
    """

    def compute() -> BaseMessage:
        kwargs = {**message.additional_kwargs, LIFECYCLE_KEY: dict(mark)}
        update: dict[str, Any] = {"content": content, "additional_kwargs": kwargs}
        if pointer is not None:
            update["tool_calls"] = [
                {**c, "args": _short_args(c.get("args") or {}, pointer)}
                for c in getattr(message, "tool_calls", None) or []
            ]
        return message.model_copy(update=update)

    if not message.id:
        return compute()
    edit = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in mark.items())
    return _REWRITES((message,), ("rewrite", content, edit, pointer), compute)


def span_payload(messages: Sequence[BaseMessage], obj: ContextObject) -> str:
    r"""The payload of a span fold: the call message's text and calls, and the results.

    A JSON object ``{"text", "tool_calls", "results"}``: ``text`` is the call message's content
    (list content as JSON), ``tool_calls`` its calls (name, args, id), ``results`` the
    :func:`~langchain_pacms.lifecycle.objects.payload_of` of the span.

    Example:
        >>> from langchain_core.messages import ToolMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> call = {"name": "sh", "args": {"command": "ls"}, "id": "c1"}
        >>> msgs = [AIMessage("look", tool_calls=[call], id="a1"),
        ...         ToolMessage("a.py", tool_call_id="c1", id="t1")]
        >>> payload = json.loads(span_payload(msgs, index_messages(msgs).objects[0]))
        >>> payload["text"], payload["tool_calls"][0]["args"], payload["results"]
        ('look', {'command': 'ls'}, 'a.py')
    """
    head = messages[obj.indices[0]]
    calls = [
        {"name": c.get("name"), "args": c.get("args") or {}, "id": c.get("id")}
        for c in getattr(head, "tool_calls", None) or []
    ]
    text = _content_payload(head.content)
    return json.dumps(
        {"text": text, "tool_calls": calls, "results": payload_of(messages, obj.indices)},
        ensure_ascii=False,
        default=str,
    )


def _short_args(args: Mapping[str, Any], pointer: str) -> dict[str, Any]:
    """``args`` with each long string value replaced by ``pointer``."""
    return {
        k: pointer if isinstance(v, str) and len(v) >= LONG_ARGUMENT else v for k, v in args.items()
    }


def _is_span(messages: Sequence[BaseMessage], obj: ContextObject, scope: Scope) -> bool:
    return (
        scope == "span"
        and obj.kind == "tool"
        and len(obj.indices) > 1
        and isinstance(messages[obj.indices[0]], AIMessage)
    )


def _fold(
    messages: list[BaseMessage],
    obj: ContextObject,
    record: SidecarRecord,
    locators: StubLocators,
    span: bool,
    elsewhere: list[str],
    length: str,
) -> list[int]:
    results = [i for i in obj.indices if isinstance(messages[i], ToolMessage)]
    # a tool result's stub follows its call: the call is in view, the stub gives only the
    # results' ``length`` in lines (every token of a stub counts where many share a budget)
    shown = length if results else record.description
    stub = f'[folded: {shown}; recover_context("{obj.id}")' + (
        f"; locators: {locators}]" if locators else "]"
    )
    mark = {"object": obj.id, "state": "folded", "sha256": record.sha256}
    targets = results or [obj.indices[0]]
    for n, i in enumerate(targets):
        text = stub if n == 0 else f"[folded with {obj.id}]"
        # list content is stored as JSON; the mark says so, for restore to parse it back
        listed = {"list_content": True} if isinstance(messages[i].content, list) else {}
        left_out = {"elsewhere": elsewhere} if n == 0 and elsewhere else {}
        messages[i] = _rewrite(messages[i], text, {**mark, **listed, **left_out})
    if not span:
        return targets
    head = messages[obj.indices[0]]
    assert isinstance(head, AIMessage)
    listed = {"list_content": True} if isinstance(head.content, list) else {}
    pointer = f"[folded with {obj.id}]"
    messages[obj.indices[0]] = _rewrite(head, "", {**mark, **listed, "span": True}, pointer)
    return [*targets, obj.indices[0]]  # the stub first


def _sized_texts(message: BaseMessage) -> tuple[str, ...]:
    """What :func:`_size` counts: a message's content and each of its calls' arguments."""
    calls = getattr(message, "tool_calls", None) or []
    return (
        str(message.content),
        *(json.dumps(c.get("args") or {}, ensure_ascii=False, default=str) for c in calls),
    )


_held_texts = by_message(_sized_texts)


def _size(message: BaseMessage, count: Callable[[str], int], *, held: bool = False) -> int:
    """Tokens of a message's content and, for a call message, of its calls' arguments.

    ``held``: the message is one of the history's own or a remembered rewrite of one, so its
    texts are remembered.
    """
    return sum(count(t) for t in (_held_texts if held else _sized_texts)(message))


def visible_locators(messages: Sequence[BaseMessage]) -> frozenset[str]:
    """The locators (and words) a fold leaves in view, so a fold stub need not repeat them.

    They are those of the system prompt, the user messages, the short string arguments of tool
    calls (a span fold only replaces long ones) and the fold stubs already in the history (a
    folded object is never folded again). Two exceptions keep this a bound rather than a
    promise: a prune removes a superseded span's call (its planner checks the later object
    holds the same values), and a very large later user message may itself be folded (its
    stub keeps its own locators). See :func:`~langchain_pacms.lifecycle.locators.
    durable_locators`.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> call = {"name": "read", "args": {"path": "src/app.py"}, "id": "c1"}
        >>> shown = visible_locators([HumanMessage("fix HAT039"), AIMessage("", tool_calls=[call])])
        >>> {"HAT039", "src/app.py"} <= shown, "read" in shown
        (True, False)
    """
    return durable_locators([t for m in messages for t in _visible_texts(m)])


def shown_before(messages: Sequence[BaseMessage]) -> ShownBefore:
    """What :func:`visible_locators` gives for every prefix of ``messages``, built in one pass.

    ``shown_before(messages).upto(k)`` holds what ``visible_locators(messages[:k])`` holds, so a
    caller that folds each object against the history before it does not rebuild a set per
    object.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> shown = shown_before([HumanMessage("fix HAT039"), HumanMessage("and HAT040")])
        >>> "HAT039" in shown.upto(1), "HAT040" in shown.upto(1), "HAT040" in shown.upto(2)
        (True, False, True)
    """
    return ShownBefore(_visible_texts(m) for m in messages)


@by_message
def _visible_texts(m: BaseMessage) -> tuple[str, ...]:
    """The texts of one message that a fold leaves in view (see :func:`visible_locators`)."""
    mark = m.additional_kwargs.get(LIFECYCLE_KEY) or {}
    kept = m.type in ("system", "human") or mark.get("state") == "folded"
    return (
        *([_content_payload(m.content)] if kept else []),
        *(
            v
            for call in getattr(m, "tool_calls", None) or []
            for v in (call.get("args") or {}).values()
            if isinstance(v, str) and len(v) < LONG_ARGUMENT
        ),
    )


def reshow_left_out(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` with every fold stub showing again the left-out locators no message shows.

    A fold stub leaves out the locators that the history shows elsewhere (its mark's
    ``"elsewhere"``), so it leans on the messages that show them. A selection that sends only
    some of the history may drop those messages; the stub then lists the values it lost
    again, in its locators, so they stay in view. Messages are copied, never modified, and a
    list without such stubs comes back as it was.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> def call(i, arg):
        ...     return AIMessage("", id=f"a{i}",
        ...                      tool_calls=[{"name": "get", "args": {"id": arg}, "id": f"c{i}"}])
        >>> msgs = [HumanMessage("go", id="h"), call(1, "me"),
        ...         ToolMessage("reservations: HAT039, 4WQ150", tool_call_id="c1", id="t1"),
        ...         call(2, "HAT039"), ToolMessage("flight on 2024-05-21", tool_call_id="c2")]
        >>> folded = apply_actions(msgs, index_messages(msgs), [Action("fold", "function:tool:1")])
        >>> folded.messages[2].content.rsplit("; ", 1)[-1]  # HAT039 is in the second call
        'locators: 4WQ150]'
        >>> sent = reshow_left_out(folded.messages[:3])  # the second call is not sent
        >>> sent[2].content.rsplit("; ", 1)[-1]
        'locators: 4WQ150, HAT039]'
    """
    marked = [
        i
        for i, m in enumerate(messages)
        if (m.additional_kwargs.get(LIFECYCLE_KEY) or {}).get("elsewhere")
    ]
    out = list(messages)
    if not marked:
        return out
    texts = [
        _content_payload(m.content)
        + "".join(
            json.dumps(c.get("args") or {}, ensure_ascii=False, default=str)
            for c in getattr(m, "tool_calls", None) or []
        )
        for m in messages
    ]
    every = "\n".join(texts)
    seen: dict[str, int] = {}  # value -> its occurrences in every text (stubs share values)

    def occurrences(value: str) -> int:
        if value not in seen:
            seen[value] = every.count(value)
        return seen[value]

    for i in marked:
        stub = str(messages[i].content)
        # shown by another message: more occurrences in all the texts than in this one's
        lost = [
            v
            for v in map(str, messages[i].additional_kwargs[LIFECYCLE_KEY]["elsewhere"])
            if v not in stub and occurrences(v) == texts[i].count(v)
        ]
        if lost and stub.endswith("]"):
            joint = ", " if "; locators: " in stub else "; locators: "
            out[i] = messages[i].model_copy(
                update={"content": f"{stub[:-1]}{joint}{', '.join(lost)}]"}
            )
    return out


def _mask(messages: list[BaseMessage], obj: ContextObject, head: int, tail: int) -> list[int]:
    mark = {"object": obj.id, "state": "masked", "sha256": obj.sha256}
    results = [i for i in obj.indices if isinstance(messages[i], ToolMessage)]
    targets = results or [obj.indices[0]]
    for i in targets:
        messages[i] = _rewrite(messages[i], _masked(messages[i], head, tail), mark)
    return targets


def _masked(message: BaseMessage, head: int, tail: int) -> str:
    """The masked content of ``message`` (remembered per message object)."""

    def compute() -> str:
        content = message.content
        text = content if isinstance(content, str) else payload_of((message,), (0,))
        return mask_text(text, head, tail, locator_budget(len(text) - head - tail))

    return _REWRITES((message,), ("mask", head, tail), compute)


def _rewrite_object(
    messages: Sequence[BaseMessage],
    out: list[BaseMessage],
    obj: ContextObject,
    action: Action,
    shown: Container[str],
    mask_head: int,
    mask_tail: int,
) -> tuple[list[int], SidecarRecord | None]:
    """Fold or mask ``obj`` in ``out`` (a copy of ``messages``): the rewritten indices, a record."""
    if action.op == "mask":
        return _mask(out, obj, mask_head, mask_tail), None
    if action.op != "fold":
        raise ValueError(f"unknown op {action.op!r} (expected fold, mask or prune)")
    span = _is_span(messages, obj, action.scope)
    payload, sha256, description, source, length = _fold_material(messages, obj, span)
    locators = stub_locators(sha256, source, shown)
    every = stub_locators(sha256, source).locators if shown else ()
    elsewhere = tuple(t for t in every if t in shown)

    record = SidecarRecord(obj.id, payload, sha256, obj.kind, obj.lineage, description)

    def fold() -> list[tuple[int, BaseMessage]]:
        indices = _fold(out, obj, record, locators, span, list(elsewhere), length)
        return [(obj.indices.index(i), out[i]) for i in indices]

    # the stubs depend on the object's messages and what they leave out, not on the rest
    # (and a message without an id is never shared: a messages channel gives it one in place)
    held = tuple(messages[i] for i in obj.indices)
    key = ("fold", obj.id, obj.kind, span, locators, elsewhere)
    rewritten = _REWRITES(held, key, fold) if all(m.id for m in held) else fold()
    for k, message in rewritten:
        out[obj.indices[k]] = message
    return [obj.indices[k] for k, _ in rewritten], record


@by_message
def _stub_shows(stub: BaseMessage) -> frozenset[str]:
    """What a fold stub shows (:func:`durable_locators` of its text)."""
    return durable_locators([str(stub.content)])


def _fold_material(
    messages: Sequence[BaseMessage], obj: ContextObject, span: bool
) -> tuple[str, str, str, str, str]:
    """A fold's payload, its sha256, description, locator source and length in lines.

    Remembered per message objects: a history is rehearsed again and again while it grows.
    """

    def compute() -> tuple[str, str, str, str, str]:
        results = payload_of(messages, obj.indices)
        payload = span_payload(messages, obj) if span else results
        digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
        description = _describe(messages, obj, results)
        return payload, digest, description, _source(messages, obj, span, results), _lines(results)

    held = tuple(messages[i] for i in obj.indices)
    return _FOLDS(held, (span, obj.kind), compute)


def fold_source(
    messages: Sequence[BaseMessage], obj: ContextObject, scope: Scope = "output"
) -> str:
    r"""The text whose locators a fold stub of ``obj`` shows.

    That is the payload, or for a span fold its call's texts and then its results as written
    (not their JSON-escaped payload).

    Example:
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> call = {"name": "sh", "args": {"command": "ls"}, "id": "c1"}
        >>> msgs = [AIMessage("look", tool_calls=[call], id="a1"),
        ...         ToolMessage("a.py", tool_call_id="c1", id="t1")]
        >>> obj = index_messages(msgs).objects[0]
        >>> fold_source(msgs, obj), fold_source(msgs, obj, "span")
        ('a.py', 'look\na.py')
    """
    span = _is_span(messages, obj, scope)
    return _source(messages, obj, span, payload_of(messages, obj.indices))


def _source(messages: Sequence[BaseMessage], obj: ContextObject, span: bool, results: str) -> str:
    # a span's locators come from its texts as written, not from their JSON-escaped payload
    return "\n".join([*call_texts(messages[obj.indices[0]]), results]) if span else results


def call_texts(head: BaseMessage) -> list[str]:
    """What a span fold takes from a call message: its text and its long string arguments.

    Example:
        >>> call = {"name": "sh", "args": {"command": "x" * 300, "timeout": "9"}, "id": "c"}
        >>> [len(t) for t in call_texts(AIMessage("why", tool_calls=[call]))]
        [3, 300]
    """
    long = [
        v
        for c in getattr(head, "tool_calls", None) or []
        for v in (c.get("args") or {}).values()
        if isinstance(v, str) and len(v) >= LONG_ARGUMENT
    ]
    return [_content_payload(head.content), *long]


def action_gain(
    messages: Sequence[BaseMessage],
    obj: ContextObject,
    action: Action,
    *,
    shown: frozenset[str] = frozenset(),
    mask_head: int = 400,
    mask_tail: int = 200,
) -> int:
    """Characters a fold or mask of ``obj`` takes out of view (negative: the stub is larger).

    A planner calls it to leave out actions that save nothing (prune always saves the whole
    object). ``shown`` is what :func:`visible_locators` gives for ``messages``.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> call = {"name": "cat", "args": {"path": "a.txt"}, "id": "c1"}
        >>> msgs = [HumanMessage("go", id="h"), AIMessage("", tool_calls=[call], id="a"),
        ...         ToolMessage("ok", tool_call_id="c1", id="t")]
        >>> obj = index_messages(msgs).objects[1]
        >>> action_gain(msgs, obj, Action("fold", obj.id)) < 0  # a stub for "ok" costs more
        True
    """
    if action.op == "prune":
        return sum(_size(messages[i], len) for i in obj.indices)
    out = list(messages)
    indices, _ = _rewrite_object(messages, out, obj, action, shown, mask_head, mask_tail)
    return sum(_size(messages[i], len) - _size(out[i], len) for i in indices)


def apply_actions(
    messages: Sequence[BaseMessage],
    index: ContextIndex,
    actions: Sequence[Action],
    *,
    token_counter: Any = None,
    mask_head: int = 400,
    mask_tail: int = 200,
    dedupe: bool = True,
    shown: frozenset[str] | ShownBefore | None = None,
) -> ActionResult:
    """Apply actions to a copy of ``messages`` (one action per object; the first one wins).

    No validation happens here beyond the target existing (see
    :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness` for the full checks). A fold
    stub leaves out the locators that stay visible elsewhere (:func:`visible_locators`) unless
    ``dedupe`` is off (for a caller that may drop those messages itself).

    Args:
        messages: The history that ``index`` was built from. Not modified.
        index: Its :class:`~langchain_pacms.lifecycle.objects.ContextIndex`.
        actions: The actions.
        token_counter: Counter for ``tokens_after`` (default: offline ``o200k_base``).
        mask_head: Characters a mask keeps at the start of each content.
        mask_tail: Characters a mask keeps at the end.
        dedupe: Leave out of fold stubs the locators visible elsewhere.
        shown: With ``dedupe``, what counts as visible elsewhere instead of what
            :func:`visible_locators` finds in ``messages``: a set, or a :func:`shown_before`
            of ``messages``, which counts for each object what the history shows up to its
            first message (then the stubs of this call do not count for one another).

    Returns:
        The :class:`ActionResult`.

    Raises:
        KeyError: If an action targets an id that is not in ``index``.
        ValueError: If an action targets a system object or has an unknown op.
    """
    from langchain_pacms.tokens import resolve_token_counter

    count = resolve_token_counter(token_counter)
    out = list(messages)
    sidecars: list[SidecarRecord] = []
    touched: dict[int, None] = {}
    drop: set[int] = set()
    applied: list[Action] = []
    done: set[str] = set()
    saved: dict[str, int] = {}
    before = after = 0
    shown = shown if dedupe else None
    grown: set[str] | None = None  # ``shown`` and the locators of this call's stubs so far
    for action in actions:
        obj = index.by_id[action.target]
        if obj.kind == "system":
            raise ValueError(f"{obj.id}: system prompts are never folded, masked or pruned")
        if obj.id in done:
            continue
        done.add(obj.id)
        before += obj.tokens
        if action.op == "prune":
            drop.update(obj.indices)
        else:
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
            indices, record = _rewrite_object(
                messages, out, obj, action, seen, mask_head, mask_tail
            )
            touched.update(dict.fromkeys(indices))
            if record is not None:
                sidecars.append(record)
                if isinstance(shown, frozenset):  # a later stub need not repeat its locators
                    grown = set(shown) if grown is None else grown
                    grown.update(_stub_shows(out[indices[0]]))
        now = 0
        if action.op != "prune":  # the messages it left alone count the same before and after
            now = obj.tokens + sum(
                _size(out[i], count, held=True) - _size(messages[i], count, held=True)
                for i in dict.fromkeys(indices)
            )
        after += now
        saved[obj.id] = obj.tokens - now
        applied.append(action)
    replaced = {str(out[i].id): out[i] for i in touched if out[i].id and i not in drop}
    removed = tuple(str(messages[i].id) for i in sorted(drop) if messages[i].id)
    kept = [m for i, m in enumerate(out) if i not in drop]
    return ActionResult(
        kept, tuple(sidecars), replaced, removed, tuple(applied), before, max(after, 0), saved
    )


def provider_problems(messages: Sequence[BaseMessage]) -> list[str]:
    """What a provider would reject in ``messages`` (empty when the list is valid).

    Checked: every tool call is answered by a ``ToolMessage`` before the next non-tool message,
    every ``ToolMessage`` answers an earlier call, and the first non-system message is a user
    message (when there is one).

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

    The folded messages get their exact original content back and lose the lifecycle mark; ids,
    ``tool_calls`` and ``tool_call_id`` are untouched, so ``payload_of`` of the restored object
    equals ``record.payload`` byte for byte. A span fold's call message gets its text and calls
    back too (its ``span_payload`` equals the record's). ``ActionResult.applied`` is empty
    (restore is not a plannable action); ``replaced`` holds the restored messages.

    Args:
        messages: The history that ``index`` was built from. Not modified.
        index: Its :class:`~langchain_pacms.lifecycle.objects.ContextIndex`.
        record: The object's :class:`SidecarRecord` (as a sidecar store returns it).
        token_counter: Counter for the token figures (default: offline ``o200k_base``).

    Returns:
        The :class:`ActionResult`.

    Raises:
        KeyError: If ``record.object_id`` is not in ``index``.
        ValueError: If the object is not folded, the record's hash does not match its payload,
            or the record is not the payload the fold stub points at.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> msgs = [HumanMessage("a long brief\x00", id="h1"), HumanMessage("next", id="h2")]
        >>> folded = apply_actions(msgs, index_messages(msgs), [Action("fold",
        ...                        "conversation:user:1")])
        >>> back = restore(folded.messages, index_messages(folded.messages), folded.sidecars[0])
        >>> back.messages[0].content == msgs[0].content, back.messages[0].additional_kwargs
        (True, {})
    """
    from langchain_pacms.tokens import resolve_token_counter

    obj = index.by_id[record.object_id]
    if obj.state != "folded":
        raise ValueError(f"{obj.id} is {obj.state}, not folded: nothing to restore")
    if SidecarRecord.of(obj.id, record.payload, record.kind).sha256 != record.sha256:
        raise ValueError(f"{obj.id}: the sidecar payload does not match its sha256")
    if record.sha256 != obj.sha256:
        raise ValueError(f"{obj.id}: the sidecar is not the payload its fold stub points at")
    out = list(messages)
    results = [i for i in obj.indices if isinstance(out[i], ToolMessage)]
    targets = results or [obj.indices[0]]
    head = out[obj.indices[0]]
    span = bool((head.additional_kwargs.get(LIFECYCLE_KEY) or {}).get("span"))
    payload: dict[str, Any] = json.loads(record.payload) if span else {"results": record.payload}
    if len(targets) > 1:
        texts = [str(part["content"]) for part in json.loads(payload["results"])]
    else:
        texts = [payload["results"]]
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
        after += _size(out[i], count) - _size(old, count)
        if old.id:
            replaced[str(old.id)] = out[i]
    return ActionResult(out, (), replaced, (), (), obj.tokens, max(after, 0))
