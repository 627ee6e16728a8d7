"""What the heuristic planner knows about a history before it decides: per object and overall."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage

from langchain_pacms.lifecycle.fold import visible_locators
from langchain_pacms.lifecycle.objects import ContextIndex, ContextObject
from langchain_pacms.messages.calls import ToolCall, classify_call
from langchain_pacms.messages.handles import SCAN, distinct_chunks, handles_of
from langchain_pacms.messages.payload import readable_of

__all__ = ["Analysis", "Features", "analyse", "object_features", "recent_turns", "words_of"]

_WORD = re.compile(r"[^\W\d_]{3,}")
_NOISE = re.compile(
    r"\b(?:PASSED|FAILED|ERROR|WARNING|WARN|INFO|DEBUG|passed|failed|error|warning|Traceback"
    r"|Exception|collected|seconds)\b|^\s*(?:at |File \")|\d\d:\d\d:\d\d",
    re.MULTILINE,
)
_NOISE_SCAN = 20_000
_STOP_WORDS = (
    "the and for are but not you your with this that from have has was were will would can could "
    "should about into over than then them they there their what when where which who why how all "
    "any our out its also just more most some such only own same very now new use let one yes"
)
_STOP = frozenset(_STOP_WORDS.split())


@dataclass(frozen=True)
class Features:
    """One object's classified calls, handles, words and log-marker count (cached by hash)."""

    calls: tuple[ToolCall, ...]
    handles: frozenset[str]
    words: frozenset[str]
    noise: int


def words_of(text: str) -> frozenset[str]:
    """Lower-cased words of three letters or more, without common function words.

    Example:
        >>> sorted(words_of("The port of the Staging server"))
        ['port', 'server', 'staging']
    """
    return frozenset(w.lower() for w in _WORD.findall(distinct_chunks(text))) - _STOP


def object_features(obj: ContextObject, messages: Sequence[BaseMessage]) -> Features:
    """The :class:`Features` of one object of ``messages`` (a tool object: of its results).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> msgs = [HumanMessage("FAILED tests/test_a.py in 3 seconds")]
        >>> f = object_features(index_messages(msgs).objects[0], msgs)
        >>> sorted(f.handles), f.noise
        (['tests/test_a.py'], 2)
    """
    head = messages[obj.indices[0]]
    calls: tuple[ToolCall, ...] = ()
    if obj.kind == "tool" and isinstance(head, AIMessage):
        calls = tuple(classify_call(c) for c in head.tool_calls)
    payload = readable_of(messages, obj.indices) if obj.kind == "tool" else obj.text
    sample = payload[:SCAN]
    noise = len(_NOISE.findall(sample[:_NOISE_SCAN]))
    return Features(calls, handles_of(sample), words_of(obj.text[:SCAN]), noise)


def recent_turns(
    index: ContextIndex, *, tail: int = 4, max_chars: int = 1_000
) -> list[tuple[ContextObject, str]]:
    """The latest user message and the last ``tail`` objects after it, each with a text snippet.

    Args:
        index: The indexed history.
        tail: How many of the latest objects to include.
        max_chars: Characters kept of each object's text (head and tail halves).

    Returns:
        ``(object, snippet)`` pairs, oldest first.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> index = index_messages([HumanMessage("old"), AIMessage("a"), HumanMessage("now")])
        >>> [(o.id, text) for o, text in recent_turns(index)]
        [('conversation:user:2', 'now')]
    """
    latest = [o for o in index.objects if o.latest]
    chosen = [latest[0], *latest[1:][-tail:]] if latest else list(index.objects[-tail:])
    half = max(max_chars // 2, 1)

    def snippet(text: str) -> str:
        return text if len(text) <= max_chars else f"{text[:half]}\n[...]\n{text[-half:]}"

    return [(o, snippet(o.text)) for o in chosen if o.kind != "system"]


@dataclass
class Analysis:
    """The pure part of one planning round (see :func:`analyse`), which the decisions read."""

    index: ContextIndex
    candidates: list[ContextObject]
    scored: list[ContextObject]  # candidates big enough for a value-dependent action
    calls: dict[str, tuple[ToolCall, ...]]
    features: dict[str, Features]
    live: dict[str, frozenset[str]]
    superseded: dict[str, tuple[str, str, frozenset[str]]]  # id -> (by, why, its handles)
    edited: dict[str, list[str]]
    views: frozenset[str]  # ids holding the latest whole read of some file
    recency: dict[str, float]
    query: str
    first_user: str
    messages: Sequence[BaseMessage]
    shown: frozenset[str]
    cutoff: int  # objects at or after this position are protected


def analyse(
    index: ContextIndex,
    messages: Sequence[BaseMessage],
    features_of: Callable[[ContextObject, Sequence[BaseMessage]], Features],
    *,
    keep_recent: int,
    keep_file_views: bool,
    recency_half_life: float,
    smallest: int,
) -> Analysis:
    """The pure part of one planning round: what each plannable object is and how it is used.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.lifecycle.objects import index_messages
        >>> msgs = [HumanMessage("old task"), HumanMessage("now")]
        >>> a = analyse(index_messages(msgs), msgs, object_features, keep_recent=0,
        ...             keep_file_views=True, recency_half_life=12.0, smallest=1)
        >>> [o.id for o in a.candidates]
        ['conversation:user:1']
    """
    objects = index.objects
    # the trailing run of protected objects: the latest turn, or with latest="step" the
    # newest object (the task message, protected too, may sit far earlier)
    boundary = len(objects)
    while boundary > 0 and objects[boundary - 1].latest:
        boundary -= 1
    protect = keep_recent if boundary < len(objects) else max(keep_recent, 1)
    cutoff = boundary - protect
    features = {o.id: features_of(o, messages) for o in objects if o.kind != "system"}
    calls = {i: f.calls for i, f in features.items() if f.calls}
    known = frozenset().union(
        *(features_of(o, messages).handles for o in objects if o.kind in ("system", "user"))
    )
    # where each value is used in a call's arguments (last use) and what is written when
    last_use: dict[str, int] = {}
    last_write: dict[str, int] = {}
    last_whole_read: dict[str, tuple[int, str]] = {}
    last_signature: dict[str, tuple[int, str]] = {}
    changes: list[int] = []  # positions of objects with a call that may change state
    for o in objects:
        if any(c.kind not in ("read", "search") for c in calls.get(o.id, ())):
            changes.append(o.position)
        for call in calls.get(o.id, ()):
            last_use.update(dict.fromkeys(call.uses, o.position))
            last_signature[call.signature] = (o.position, o.id)
            if call.kind == "write":
                last_write.update(dict.fromkeys(call.paths, o.position))
            if call.kind == "read" and call.whole:
                last_whole_read.update(dict.fromkeys(call.paths, (o.position, o.id)))
    used = frozenset(last_use)
    candidates = [
        o
        for o in objects
        if o.kind != "system" and not o.latest and o.state == "active" and o.position < cutoff
    ]
    live: dict[str, frozenset[str]] = {}
    superseded: dict[str, tuple[str, str, frozenset[str]]] = {}
    edited: dict[str, list[str]] = {}
    for o in [c for c in candidates if c.kind == "tool"]:
        handles = features[o.id].handles
        live[o.id] = frozenset(t for t in (handles & used) - known if last_use[t] > o.position)
        reads = [p for c in calls.get(o.id, ()) if c.kind == "read" for p in c.paths]
        edited[o.id] = sorted(p for p in reads if last_write.get(p, -1) > o.position)
        cover = _cover(o, calls.get(o.id, ()), last_signature, last_whole_read, index, changes)
        if cover is not None:
            by, why = cover
            superseded[o.id] = (by, why, features[by].handles)
    latest_views = {by for _, by in last_whole_read.values()} if keep_file_views else set()
    views = frozenset(o.id for o in candidates if o.id in latest_views)
    span = max(cutoff, 1)
    recency = {o.id: 0.5 ** ((span - o.position) / recency_half_life) for o in candidates}
    query = "\n".join(text for _, text in recent_turns(index))
    first_user = next((o.id for o in objects if o.kind == "user"), "")
    scored = [o for o in candidates if o.tokens >= smallest]
    return Analysis(
        index,
        candidates,
        scored,
        calls,
        features,
        live,
        superseded,
        edited,
        views,
        recency,
        query,
        first_user,
        messages,
        visible_locators(messages),
        cutoff,
    )


def _cover(
    obj: ContextObject,
    calls: Sequence[ToolCall],
    last_signature: Mapping[str, tuple[int, str]],
    last_whole_read: Mapping[str, tuple[int, str]],
    index: ContextIndex,
    changes: Sequence[int],
) -> tuple[str, str] | None:
    """The later object that supersedes every call of ``obj``, with why (or ``None``)."""
    by: tuple[int, str] | None = None
    why = ""
    for call in calls:
        repeat = last_signature.get(call.signature)
        if (
            repeat is not None
            and repeat[0] > obj.position
            and _unchanged(obj, index.by_id[repeat[1]], call, changes)
        ):
            found, reason = repeat, "the same call runs again later"
        elif call.kind == "read" and call.paths:
            reads = [last_whole_read.get(p) for p in sorted(call.paths)]
            if not all(r is not None and r[0] > obj.position for r in reads):
                return None
            found = max(r for r in reads if r is not None)
            reason = f"{', '.join(sorted(call.paths))} is read again later"
        else:
            return None
        if by is None or found[0] > by[0]:
            by, why = found, reason
    return (by[1], why) if by is not None else None


def _unchanged(
    obj: ContextObject, later: ContextObject, call: ToolCall, changes: Sequence[int]
) -> bool:
    """Whether ``later``, a rerun of ``call``, shows what ``obj`` shows."""
    if later.shown_sha256 == obj.shown_sha256:
        return True
    between = bisect.bisect_left(changes, later.position) - bisect.bisect_right(
        changes, obj.position
    )
    return call.kind in ("read", "search") and between == 0
