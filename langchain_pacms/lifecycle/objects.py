"""Index a message history into context objects with stable ids (pure data, no LangGraph).

The history is cut with the one mapping of :mod:`langchain_pacms.integrations.messages`
(``messages_to_candidates`` with ``pair_turns=False``): a tool call and all its results are one
object. Ids follow the Self-GC naming: ``system:N``, ``conversation:user:N``,
``conversation:assistant:N`` and ``function:tool:N``, numbered from 1 per kind in order.

A message that a fold or mask rewrote carries its object id and state in
``additional_kwargs["pacms_lifecycle"]``, so re-indexing a committed history finds the same ids;
``known_ids`` (message id -> object id, see :attr:`ContextIndex.id_map`) keeps ids stable after a
prune removed earlier objects.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> call = {"name": "read", "args": {"path": "a.py"}, "id": "c1"}
    >>> msgs = [HumanMessage("read a.py", id="h1"), AIMessage("", tool_calls=[call], id="a1"),
    ...         ToolMessage("print(1)", tool_call_id="c1", id="t1"), AIMessage("done", id="a2")]
    >>> [(o.id, o.indices, o.lineage) for o in index_messages(msgs).objects]
    [('conversation:user:1', (0,), ('h1',)), ('function:tool:1', (1, 2), ('a1', 't1')), \
('conversation:assistant:1', (3,), ('a2',))]
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from langchain_pacms._lru import LruMemo
from langchain_pacms.integrations.messages import content_text, messages_to_candidates
from langchain_pacms.tokens import resolve_token_counter

__all__ = [
    "LIFECYCLE_KEY",
    "ContextIndex",
    "ContextObject",
    "ObjectKind",
    "ObjectState",
    "index_messages",
    "payload_of",
]

T = TypeVar("T")

LIFECYCLE_KEY = "pacms_lifecycle"
"""Key in ``additional_kwargs`` of a rewritten message: ``{"object": id, "state": ...}``."""

ObjectKind = Literal["system", "user", "assistant", "tool"]
ObjectState = Literal["active", "folded", "masked", "pruned"]
_PREFIX: dict[str, str] = {
    "system": "system",
    "user": "conversation:user",
    "assistant": "conversation:assistant",
    "tool": "function:tool",
}


@dataclass(frozen=True)
class ContextObject:
    """One indexed unit of the history.

    Attributes:
        id: Stable id (``conversation:user:3``, ``function:tool:7``, ...).
        kind: ``system``, ``user``, ``assistant`` or ``tool``.
        indices: Positions of its messages in the indexed list.
        lineage: The ids of the original messages it stands for (``""`` for a message without id).
        tokens: Token count of its text as the model sees it now.
        position: Order among the objects (0-based).
        state: ``active``, ``folded``, ``masked`` (``pruned`` objects leave the list).
        sha256: Hex digest of :func:`payload_of` (the exact payload a fold would store).
        text: The text scored and counted.
        latest: Protected as the current work: with ``latest="turn"`` the latest user message
            and everything after it; with ``latest="step"`` the latest user message and the
            newest object only (for long single-task tool loops).
        signature: For a tool object, its calls as ``name(json args)`` lines (equal signatures
            mean the same call repeated); empty otherwise.

    Example:
        >>> ContextObject("function:tool:1", "tool", (1, 2), ("a", "b"), 10, 0).state
        'active'
    """

    id: str
    kind: ObjectKind
    indices: tuple[int, ...]
    lineage: tuple[str, ...]
    tokens: int
    position: int
    state: ObjectState = "active"
    sha256: str = ""
    text: str = field(default="", repr=False)
    latest: bool = False
    signature: str = ""


@dataclass(frozen=True)
class ContextIndex:
    """The objects of one history, in order, with a lookup by id.

    Attributes:
        objects: The objects, oldest first.
        by_id: ``id -> object``.
        latest_index: Position of the latest user message in the list (``-1`` when none).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> index = index_messages([HumanMessage("hi", id="h")])
        >>> index.by_id["conversation:user:1"].latest, index.id_map
        (True, {'h': 'conversation:user:1'})
    """

    objects: tuple[ContextObject, ...]
    by_id: Mapping[str, ContextObject]
    latest_index: int

    @property
    def id_map(self) -> dict[str, str]:
        """``message id -> object id`` for every message with an id (pass back as ``known_ids``)."""
        return {mid: o.id for o in self.objects for mid in o.lineage if mid}

    @property
    def active_tokens(self) -> int:
        """Tokens of the whole current view."""
        return sum(o.tokens for o in self.objects)


def _content_payload(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, sort_keys=True, default=str)


def payload_of(messages: Sequence[BaseMessage], indices: Sequence[int]) -> str:
    r"""The exact payload of an object: what a fold stores and recovery returns.

    For a tool object it is the content of its result(s): the one result's string content
    unchanged, or, for several results, a JSON list of ``{"tool_call_id", "content"}``. For other
    objects it is the message content (list content as JSON).

    Args:
        messages: The history.
        indices: The object's message positions.

    Returns:
        The payload text.

    Example:
        >>> from langchain_core.messages import ToolMessage, AIMessage
        >>> call = {"name": "f", "args": {}, "id": "c"}
        >>> payload_of([AIMessage("", tool_calls=[call]), ToolMessage("x\0y", tool_call_id="c")],
        ...            (0, 1))
        'x\x00y'
    """
    results = [messages[i] for i in indices if isinstance(messages[i], ToolMessage)]
    if not results:
        return _content_payload(messages[indices[0]].content)
    if len(results) == 1:
        return _content_payload(results[0].content)
    parts = [
        {"tool_call_id": str(m.tool_call_id), "content": _content_payload(m.content)}  # type: ignore[attr-defined]
        for m in results
    ]
    return json.dumps(parts, ensure_ascii=False)


def _kind(message: BaseMessage, span_kind: str) -> ObjectKind:
    if span_kind == "system":
        return "system"
    if span_kind == "tool":
        return "tool"
    return "assistant" if isinstance(message, AIMessage) else "user"


def _marker(messages: Sequence[BaseMessage], indices: Sequence[int]) -> Mapping[str, Any]:
    for i in indices:
        mark = messages[i].additional_kwargs.get(LIFECYCLE_KEY)
        if isinstance(mark, Mapping):
            return mark
    return {}


class by_message(Generic[T]):
    """Memoise a function of one message by the message's identity.

    Histories are re-indexed at every step, and their messages are never changed in place (an
    edit makes a copy), so a value computed from a message object stays valid while the object
    lives; each entry holds its message, so an id is not reused while it is cached.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> length = by_message(lambda m: len(m.content))
        >>> m = HumanMessage("hello")
        >>> length(m), length(m), length.hits
        (5, 5, 1)
    """

    def __init__(self, fn: Callable[[BaseMessage], T], size: int = 50_000) -> None:
        self.fn, self.size, self.hits = fn, size, 0
        self._memo: LruMemo[int, tuple[BaseMessage, T]] = LruMemo(size)

    def __call__(self, message: BaseMessage) -> T:
        hit = self._memo.get(id(message))
        if hit is not None and hit[0] is message:
            self.hits += 1
            return hit[1]
        value = self.fn(message)
        self._memo.put(id(message), (message, value))
        return value


class by_messages(Generic[T]):
    """Memoise values computed from a few messages, by the messages' identity and a key.

    The multi-message sibling of :class:`by_message`, for a value of an object (its messages)
    or of one message under some options: ``memo(messages, key, compute)`` returns what
    ``compute()`` returned for the same message objects and ``key``, else calls it. Each entry
    holds its messages, so their ids are not reused while it is cached.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> memo = by_messages()
        >>> a, b = HumanMessage("ab"), HumanMessage("cd")
        >>> memo((a, b), "joined", lambda: a.content + b.content), memo.hits
        ('abcd', 0)
        >>> memo((a, b), "joined", lambda: "not called"), memo.hits
        ('abcd', 1)
        >>> memo((HumanMessage("ab"), b), "joined", lambda: "another a"), memo.hits
        ('another a', 1)
    """

    def __init__(self, size: int = 8_192) -> None:
        self.size, self.hits = size, 0
        self._memo: LruMemo[tuple[Any, ...], tuple[tuple[BaseMessage, ...], T]] = LruMemo(size)

    def __call__(self, messages: tuple[BaseMessage, ...], key: Any, compute: Callable[[], T]) -> T:
        slot = (key, *map(id, messages))
        hit = self._memo.get(slot)
        if hit is not None and all(a is b for a, b in zip(hit[0], messages, strict=True)):
            self.hits += 1
            return hit[1]
        value = compute()
        self._memo.put(slot, (messages, value))
        return value


@by_message
def _signature(message: BaseMessage) -> str:
    calls = getattr(message, "tool_calls", None) or []
    return "\n".join(
        f"{c.get('name')}({json.dumps(c.get('args') or {}, sort_keys=True, default=str)})"
        for c in calls
    )


def _sha256(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


_cached_sha256 = lru_cache(maxsize=1024)(_sha256)
_CACHED_CHARS = 32_768  # the memo holds its keys: keep it small (at most ~32 MB of payloads)


def _digest(payload: str) -> str:
    """sha256 of a payload, memoised for the short ones (re-indexing hashes them every step).

    Long payloads are hashed each time rather than kept alive by the memo after a fold has
    taken them out of the history.
    """
    return _cached_sha256(payload) if len(payload) <= _CACHED_CHARS else _sha256(payload)


def _is_latest(start: int, latest_index: int, newest: int, latest: str) -> bool:
    if latest == "step" and start == newest:
        return True
    if latest_index < 0:
        return False
    return start >= latest_index if latest == "turn" else start == latest_index


def index_messages(
    messages: Sequence[BaseMessage],
    *,
    token_counter: Callable[[str], int] | str | None = None,
    known_ids: Mapping[str, str] | None = None,
    latest: Literal["turn", "step"] = "turn",
) -> ContextIndex:
    """Index a history into :class:`ContextObject` s.

    Args:
        messages: The history, oldest first (not modified). Orphan ``ToolMessage`` objects (no
            earlier call) belong to no object and are left alone by every action.
        token_counter: Callable, encoding name or ``None`` (offline ``o200k_base``), as in
            :class:`~langchain_pacms.ContextSelector`.
        known_ids: ``message id -> object id`` from an earlier index of the same thread, so that
            ids stay stable after earlier objects were pruned.
        latest: What counts as the current work that no action may touch: ``"turn"`` (the
            latest user message and all after it) or ``"step"`` (the latest user message and
            the newest object: earlier tool spans of a long tool loop become plannable).

    Returns:
        The :class:`ContextIndex`.

    Raises:
        ValueError: If ``known_ids`` maps two objects of this history to one id, or
            ``latest`` is not ``"turn"`` or ``"step"``.
    """
    if latest not in ("turn", "step"):
        raise ValueError(f"latest must be 'turn' or 'step', not {latest!r}")
    count = resolve_token_counter(token_counter)
    known = dict(known_ids or {})
    _, spans = messages_to_candidates(messages, pair_turns=False, keep_latest_turn=True)
    newest = spans[-1].indices[0] if spans else -1
    last_user = max(
        (
            i
            for i, s in enumerate(spans)
            if s.kind == "turn" and not isinstance(messages[s.indices[0]], AIMessage)
        ),
        default=-1,
    )
    latest_index = spans[last_user].indices[0] if last_user >= 0 else -1
    numbers = {kind: 0 for kind in _PREFIX}
    for object_id in [
        *known.values(),
        *(
            str(m.additional_kwargs[LIFECYCLE_KEY].get("object", ""))
            for m in messages
            if isinstance(m.additional_kwargs.get(LIFECYCLE_KEY), Mapping)
        ),
    ]:
        for kind, prefix in _PREFIX.items():
            tail = object_id.removeprefix(prefix + ":")
            if tail != object_id and tail.isdigit():
                numbers[kind] = max(numbers[kind], int(tail))
    objects: list[ContextObject] = []
    for span in spans:
        kind = _kind(messages[span.indices[0]], span.kind)
        lineage = tuple(messages[i].id or "" for i in span.indices)
        mark = _marker(messages, span.indices)
        object_id = str(mark.get("object") or "") or next(
            (known[m] for m in lineage if m in known), ""
        )
        if not object_id:
            numbers[kind] += 1
            object_id = f"{_PREFIX[kind]}:{numbers[kind]}"
        payload = payload_of(messages, span.indices)
        text = "\n".join(
            content_text(messages[i].content) or _signature(messages[i]) for i in span.indices
        )
        objects.append(
            ContextObject(
                id=object_id,
                kind=kind,
                indices=tuple(span.indices),
                lineage=lineage,
                tokens=count(span.text),
                position=len(objects),
                state=mark.get("state", "active"),
                sha256=str(mark.get("sha256") or _digest(payload)),
                text=text,
                latest=_is_latest(span.indices[0], latest_index, newest, latest),
                signature=_signature(messages[span.indices[0]]) if kind == "tool" else "",
            )
        )
    by_id = {o.id: o for o in objects}
    if len(by_id) != len(objects):
        raise ValueError("known_ids maps two objects of this history to the same id")
    return ContextIndex(tuple(objects), by_id, latest_index)
