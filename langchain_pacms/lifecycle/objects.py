"""Index a message history into context objects with stable ids.

A tool call and its results are one object. Ids are ``system:N``, ``conversation:user:N``,
``conversation:assistant:N`` and ``function:tool:N``; ``known_ids`` keeps them after a prune.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Literal, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from langchain_pacms.messages.history import is_human
from langchain_pacms.messages.identity import by_message, by_messages
from langchain_pacms.messages.payload import LIFECYCLE_KEY, payload_of, readable_of
from langchain_pacms.messages.runs import RUN_KEY, run_head
from langchain_pacms.messages.spans import cut_spans, span_text
from langchain_pacms.messages.text import blocks_cost, content_text
from langchain_pacms.tokens import resolve_token_counter

__all__ = [
    "KEY_HEX",
    "NUMBERS_KEY",
    "OBJECT_KEY",
    "ContextIndex",
    "ContextObject",
    "ObjectKind",
    "ObjectState",
    "carry_ids",
    "carry_numbers",
    "index_messages",
    "record_key",
]

ObjectKind = Literal["system", "user", "assistant", "tool"]
ObjectState = Literal["active", "folded", "masked", "pruned"]
_PREFIX: dict[str, str] = {
    "system": "system",
    "user": "conversation:user",
    "assistant": "conversation:assistant",
    "tool": "function:tool",
}
NUMBERS_KEY = "pacms_numbers"
"""Message field with the highest number each kind of object id took in a history rewritten
by the pre-model hook (``output_key="messages"``) or by a commit, so that an id is never given
again."""
OBJECT_KEY = "pacms_object"
"""Message field with the id of the object the message belongs to, written by a commit: a
history given back without the state's ``pacms_lifecycle_ids`` keeps its objects' ids."""


@dataclass(frozen=True)
class ContextObject:
    """One indexed unit of the history.

    Attributes:
        id: Stable id (``conversation:user:3``, ``function:tool:7``, ...).
        indices: Positions of its messages in the indexed list.
        lineage: The ids of the original messages (``""`` for a message without id).
        tokens: What it costs the model now: its text, and its other blocks (images by pixels).
        position: Order among the objects (0-based).
        sha256: Hex digest of its payload (what a fold would store).
        text: The text scored and counted.
        latest: Protected as the current work (see ``latest`` of :func:`index_messages`).
        signature: For a tool object, its calls as ``name(json args)`` lines.
        shown_sha256: Hex digest of what it shows (content blocks as their text, so two equal
            outputs whose blocks carry different ids match); ``sha256`` for string contents.

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
    shown_sha256: str = ""


KEY_HEX = 16  # hex digits of the sha256 in a key: 64 bits, no accidental collision


def record_key(object_id: str, sha256: str) -> str:
    """The store key of a payload: its object id and the start of its sha256.

    It also names a folded object whose stub's id another object of the history carries.

    Example:
        >>> record_key("function:tool:2", "ab" * 32)
        'function:tool:2@abababababababab'
    """
    return f"{object_id}@{sha256[:KEY_HEX]}"


@dataclass(frozen=True)
class ContextIndex:
    """The objects of one history, in order, with a lookup by id.

    Attributes:
        objects: The objects, oldest first.
        latest_index: Position of the latest user message in the list (``-1`` when none).
        shared: Ids that several objects' marks carry (runs merged into one history, each
            numbering its own folds), each with the ids its objects have here instead:
            ``<id>@<sha256 prefix>`` (:func:`record_key`, the key their payloads are stored at).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> index_messages([HumanMessage("hi", id="h")]).id_map
        {'h': 'conversation:user:1'}
    """

    objects: tuple[ContextObject, ...]
    by_id: Mapping[str, ContextObject]
    latest_index: int
    shared: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def carried_id(self, object_id: str) -> str:
        """The id ``object_id``'s stub carries, which its payload is stored under.

        ``object_id`` itself, but for an object of merged runs named apart (``shared``).

        Example:
            >>> index_messages([]).carried_id("function:tool:1")
            'function:tool:1'
        """
        return next((k for k, names in self.shared.items() if object_id in names), object_id)

    @property
    def id_map(self) -> dict[str, str]:
        """``message id -> object id`` for every message with an id (pass back as ``known_ids``)."""
        return {mid: o.id for o in self.objects for mid in o.lineage if mid}

    @property
    def active_tokens(self) -> int:
        """Tokens of the whole current view."""
        return sum(o.tokens for o in self.objects)


def _kind(message: BaseMessage, span_kind: str) -> ObjectKind:
    if span_kind == "system":
        return "system"
    if span_kind == "tool":
        return "tool"
    return "assistant" if isinstance(message, AIMessage) else "user"


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


def _shown(messages: Sequence[BaseMessage], indices: Sequence[int], digest: str) -> str:
    """The digest of what an object shows: ``digest`` unless a message holds content blocks."""
    if all(isinstance(messages[i].content, str) for i in indices):
        return digest
    return _digest(readable_of(messages, indices))


def _digest(payload: str) -> str:
    """sha256 of a payload, memoised for short payloads only."""
    return _cached_sha256(payload) if len(payload) <= _CACHED_CHARS else _sha256(payload)


class _Read(NamedTuple):
    """What an object's messages say, as :func:`index_messages` reads them."""

    text: str  # the object's text (a call without text: its signature)
    counted: str  # what its tokens count: its span's text
    sha256: str  # of its payload
    signature: str  # a tool object's calls


# what each object's messages say, by the message objects (see ``_read``)
_READS: by_messages[_Read] = by_messages(8_192)


def _read(held: tuple[BaseMessage, ...], span_kind: str) -> _Read:
    """What the messages of a span of ``span_kind`` say (memoised when each content is a string).

    Only the span's own messages are read, their ``name`` and ``tool_call_id`` too (held in the
    memo's key). List contents are read afresh: LangChain reads their blocks together with other
    fields of the message.
    """

    def compute() -> _Read:
        return _Read(
            "\n".join(content_text(m.content) or _signature(m) for m in held),
            span_text(held, span_kind, range(len(held))),
            _digest(payload_of(held, range(len(held)))),
            _signature(held[0]) if span_kind == "tool" else "",
        )

    if not all(isinstance(m.content, str) for m in held):
        return compute()
    named = tuple((m.name, m.tool_call_id) for m in held if isinstance(m, ToolMessage))
    return _READS(held, (span_kind, named), compute)


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
        messages: The history, oldest first (not modified).
        token_counter: Callable, encoding name or ``None`` (offline ``o200k_base``).
        known_ids: ``message id -> object id`` from an earlier index of the same thread.
        latest: What no action may touch: ``"turn"`` (the latest user message and all after
            it) or ``"step"`` (the latest user message and the newest object only).

    Raises:
        ValueError: If ``latest`` is unknown.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> call = {"name": "read", "args": {"path": "a.py"}, "id": "c1"}
        >>> msgs = [HumanMessage("read a.py", id="h1"), AIMessage("", tool_calls=[call], id="a1"),
        ...         ToolMessage("print(1)", tool_call_id="c1", id="t1")]
        >>> [(o.id, o.indices) for o in index_messages(msgs).objects]
        [('conversation:user:1', (0,)), ('function:tool:1', (1, 2))]
    """
    if latest not in ("turn", "step"):
        raise ValueError(f"latest must be 'turn' or 'step', not {latest!r}")
    count = resolve_token_counter(token_counter)
    known = dict(known_ids or {})
    spans, _ = cut_spans(messages, pair_turns=False)
    newest = spans[-1][1][0] if spans else -1
    users = [
        indices[0]
        for span_kind, indices in spans
        if span_kind == "turn" and is_human(messages[indices[0]])
    ]
    latest_index = users[-1] if users else -1
    turn = messages[latest_index].id if latest_index >= 0 else None
    marks: list[Any] = [m.additional_kwargs.get(LIFECYCLE_KEY) for m in messages]
    numbers = _numbers(messages, known.values())
    objects: list[ContextObject] = []
    for span_kind, indices in spans:
        kind = _kind(messages[indices[0]], span_kind)
        lineage = tuple(messages[i].id or "" for i in indices)
        held = [marks[i] for i in indices if isinstance(marks[i], Mapping)]
        # a fold's or mask's mark, not a reactivation pin a later fold left on the call message
        mark: Mapping[str, Any] = next((m for m in held if "reactivated" not in m), {})
        pinned = turn is not None and any(m.get("reactivated") == turn for m in held)
        object_id = (
            str(mark.get("object") or "")
            or next((known[m] for m in lineage if m in known), "")
            or next((n for i in indices if isinstance(n := _named(messages[i]), str) and n), "")
        )
        if not object_id:
            numbers[kind] += 1
            object_id = f"{_PREFIX[kind]}:{numbers[kind]}"
        read = _read(tuple(messages[i] for i in indices), span_kind)
        digest = str(mark.get("sha256") or read.sha256)
        objects.append(
            ContextObject(
                id=object_id,
                kind=kind,
                indices=tuple(indices),
                lineage=lineage,
                tokens=count(read.counted)
                + sum(blocks_cost(messages[i].content, count) for i in indices),
                position=len(objects),
                state=mark.get("state", "active"),
                sha256=digest,
                text=read.text,
                # an object restored in this turn (reactivated) stays in view until the next
                latest=_is_latest(indices[0], latest_index, newest, latest) or pinned,
                signature=read.signature,
                shown_sha256=_shown(messages, indices, digest),
            )
        )
    objects, shared = _named_apart(objects)
    return ContextIndex(tuple(objects), {o.id: o for o in objects}, latest_index, shared)


def _numbers(messages: Sequence[BaseMessage], ids: Iterable[str] = ()) -> dict[str, int]:
    """The highest id number of each kind in ``ids``, the messages' marks and NUMBERS_KEY."""
    numbers = dict.fromkeys(_PREFIX, 0)
    carried: list[str] = list(ids)
    for message in messages:
        mark = message.additional_kwargs.get(LIFECYCLE_KEY)
        if isinstance(mark, Mapping):
            carried.append(str(mark.get("object", "")))
        if isinstance(named := _named(message), str):
            carried.append(named)
        held = message.additional_kwargs.get(NUMBERS_KEY)
        for kind, number in held.items() if isinstance(held, Mapping) else ():
            if kind in numbers and isinstance(number, int) and not isinstance(number, bool):
                numbers[kind] = max(numbers[kind], number)
    for object_id in carried:
        for kind, prefix in _PREFIX.items():
            tail = object_id.removeprefix(prefix + ":")
            if tail != object_id and tail.isdigit():
                numbers[kind] = max(numbers[kind], int(tail))
    return numbers


def carry_numbers(
    before: Sequence[BaseMessage], after: list[BaseMessage], ids: Iterable[str] = ()
) -> list[BaseMessage]:
    """``after`` (a history replacing ``before``) keeping the id numbers either took.

    Its first and last messages hold the highest number of each kind (:data:`NUMBERS_KEY`: a
    step that trims the history from either end leaves one); objects without a mark are
    numbered after those, so an id a dropped fold stub named is not given to another object
    (``recover_context`` with it finds that stub's payload, or none). ``ids``: the object ids
    an index of ``before`` gave (objects without a mark hold their number nowhere else).

    Example:
        >>> from langchain_core.messages import HumanMessage, ToolMessage
        >>> stub = ToolMessage("[folded]", tool_call_id="c", additional_kwargs={
        ...     LIFECYCLE_KEY: {"object": "function:tool:7", "state": "folded"}})
        >>> task = HumanMessage("task")
        >>> carry_numbers([task, stub], [task])[0].additional_kwargs[NUMBERS_KEY]["tool"]
        7
    """
    numbers = {k: n for k, n in _numbers([*before, *after], ids).items() if n}
    if not after or not numbers:
        return after
    ends = {id(run_head(after)), id(after[-1])}
    return [
        m.model_copy(update={"additional_kwargs": {**m.additional_kwargs, NUMBERS_KEY: numbers}})
        if id(m) in ends and m.additional_kwargs.get(NUMBERS_KEY) != numbers
        else m
        for m in after
    ]


def _named(message: BaseMessage) -> Any:
    return message.additional_kwargs.get(OBJECT_KEY)


def carry_ids(
    before: Sequence[BaseMessage],
    after: list[BaseMessage],
    index: ContextIndex,
    run: str | None = None,
) -> list[BaseMessage]:
    """``after`` (a history replacing ``before``, which ``index`` indexed) keeping its ids.

    The first message of each object still in ``after`` carries its id (:data:`OBJECT_KEY`;
    a fold or mask stub carries it in its mark), and the history's first and last messages the
    highest number of each kind (:func:`carry_numbers`). Indexed again without the state's
    ``pacms_lifecycle_ids``, every object keeps its id and a new one is numbered after every
    id ``index`` gave, pruned ones too, so no id ever names two objects. With ``run`` (the
    name of a run without a thread id), those messages carry it too (``RUN_KEY``): its sidecars
    stay found when a caller drops or replaces the first message.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> msgs = [HumanMessage("a", id="h1"), HumanMessage("b", id="h2")]
        >>> kept = carry_ids(msgs, msgs[1:], index_messages(msgs))
        >>> [o.id for o in index_messages([*kept, HumanMessage("c", id="h3")]).objects]
        ['conversation:user:2', 'conversation:user:3']
    """
    first = {o.lineage[0]: o.id for o in index.objects if o.lineage and o.lineage[0]}

    def named(m: BaseMessage) -> BaseMessage:
        object_id = first.get(m.id or "")
        if object_id is None:
            return m
        mark = m.additional_kwargs.get(LIFECYCLE_KEY)
        marked = isinstance(mark, Mapping) and mark.get("object") == object_id
        held = {
            **({} if marked or _named(m) == object_id else {OBJECT_KEY: object_id}),
            **({} if run is None or m.additional_kwargs.get(RUN_KEY) == run else {RUN_KEY: run}),
        }
        if not held:
            return m
        return m.model_copy(update={"additional_kwargs": {**m.additional_kwargs, **held}})

    return carry_numbers(before, [named(m) for m in after], [o.id for o in index.objects])


def _named_apart(
    objects: list[ContextObject],
) -> tuple[list[ContextObject], dict[str, tuple[str, ...]]]:
    """``objects`` with each id several carry (merged runs) made ``<id>@<sha256 prefix>``."""
    seen: dict[str, int] = {}
    for o in objects:
        seen[o.id] = seen.get(o.id, 0) + 1
    if all(n == 1 for n in seen.values()):
        return objects, {}
    taken = set(seen)
    shared: dict[str, tuple[str, ...]] = {}
    named: list[ContextObject] = []
    for o in objects:
        if seen[o.id] > 1:
            new = record_key(o.id, o.sha256)
            while new in taken:  # the same payload folded in several runs
                new += "+"
            taken.add(new)
            shared[o.id] = (*shared.get(o.id, ()), new)
            o = replace(o, id=new)
        named.append(o)
    return named, shared
