"""The ``recover_context`` tool: an agent gets a folded payload back, byte for byte."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException
from langgraph.prebuilt import InjectedState
from langgraph.store.base import BaseStore
from pydantic import BaseModel, Field

from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls
from langchain_pacms.lifecycle.fold import SidecarRecord, span_payload
from langchain_pacms.lifecycle.graph_store import GraphStore
from langchain_pacms.lifecycle.node import known_ids_of
from langchain_pacms.lifecycle.objects import ContextObject, index_messages
from langchain_pacms.lifecycle.sidecar import (
    SidecarError,
    SidecarIntegrityError,
    SidecarNotFoundError,
    SidecarStore,
    split_key,
)
from langchain_pacms.messages.media import carries_media
from langchain_pacms.messages.payload import LIFECYCLE_KEY
from langchain_pacms.messages.runs import run_thread, state_messages, thread_id_of

__all__ = [
    "RECOVER_TOOL_NAME",
    "RecoverCheck",
    "RecoverInput",
    "RecoverTool",
    "make_recover_tool",
    "object_hashes",
    "recovered_again",
    "unreadable_store",
]

logger = logging.getLogger(__name__)

RECOVER_TOOL_NAME = "recover_context"
"""The tool's name, as fold stubs spell it."""

_DESCRIPTION = (
    "Return the exact, complete content of a folded context object. Call it when a message "
    "reads '[folded: ...; recover_context(\"<object_id>\") ...]' and you need the original "
    "content (exact text, values, paths or ids not shown in the stub). Pass the object id "
    "from the stub, e.g. function:tool:3."
)
_KNOWN_SHOWN = 20


class RecoverInput(BaseModel):
    """Arguments of ``recover_context`` (``state`` is injected by the graph, not by the model).

    Example:
        >>> RecoverInput(object_id="function:tool:3").object_id
        'function:tool:3'
    """

    object_id: str = Field(
        description="Id of the folded object, as written in its stub (e.g. function:tool:3)."
    )
    state: Annotated[Any, InjectedState] = None


def expected_sha256(
    messages: Sequence[BaseMessage], object_id: str, known_ids: Mapping[str, str] | None = None
) -> tuple[tuple[str, ...], bool]:
    """The sha256 candidates of ``object_id``'s payload in a conversation, and whether it is folded.

    Folded: the hash its stub carries; still whole: its result and span payloads'; unknown: none.

    Example:
        >>> from langchain_core.messages import AIMessage, ToolMessage
        >>> msgs = [AIMessage("", tool_calls=[{"name": "sh", "args": {}, "id": "c1"}], id="a1"),
        ...         ToolMessage("a.py", tool_call_id="c1", id="t1")]
        >>> hashes, folded = expected_sha256(msgs, "function:tool:1")
        >>> len(hashes), folded, expected_sha256(msgs, "function:tool:9")
        (2, False, ((), False))
    """
    return object_hashes(messages, _object(messages, object_id, known_ids))


def _object(
    messages: Sequence[BaseMessage], object_id: str, known: Mapping[str, str] | None
) -> ContextObject | None:
    """The object ``object_id`` names in ``messages`` (``None``: unknown, or no messages)."""
    return index_messages(messages, known_ids=known).by_id.get(object_id) if messages else None


def object_hashes(
    messages: Sequence[BaseMessage], obj: ContextObject | None
) -> tuple[tuple[str, ...], bool]:
    """:func:`expected_sha256` of an object of ``messages``' index: what recovery accepts for it.

    A folded object: the hash its stub carries; a whole one: its results' payload (the index's
    own hash of it) and its span's. A fold stub the selection sends must name one of these.

    Example:
        >>> from langchain_core.messages import AIMessage, ToolMessage
        >>> msgs = [AIMessage("", tool_calls=[{"name": "sh", "args": {}, "id": "c1"}], id="a1"),
        ...         ToolMessage("a.py", tool_call_id="c1", id="t1")]
        >>> obj = index_messages(msgs).objects[0]
        >>> hashes, folded = object_hashes(msgs, obj)
        >>> hashes[0] == obj.sha256, len(hashes), folded
        (True, 2, False)
    """
    if obj is None:
        return (), False
    if obj.state == "folded":
        return (obj.sha256,), True
    span = SidecarRecord.of(obj.id, span_payload(messages, obj), obj.kind).sha256
    return tuple(dict.fromkeys((obj.sha256, span))), False


def _failure(exc: BaseException, known: list[str]) -> ToolException:
    shown = ", ".join(known[:_KNOWN_SHOWN]) + (" ..." if len(known) > _KNOWN_SHOWN else "")
    hint = f" Folded ids in this thread: {shown}." if known else ""
    return ToolException(f"recover_context failed: {exc}.{hint}")


def _listed(messages: Sequence[BaseMessage], obj: ContextObject | None) -> tuple[bool, ...]:
    """For each tool result of the object, whether it had list content (blocks) before a fold."""
    held = obj.indices if obj is not None else ()
    results = [messages[i] for i in held if isinstance(messages[i], ToolMessage)]

    def blocks(result: BaseMessage) -> bool:
        mark = result.additional_kwargs.get(LIFECYCLE_KEY) or {}
        return isinstance(result.content, list) or bool(mark.get("list_content"))

    return tuple(blocks(r) for r in results)


def _media(payload: str) -> list[Any] | None:
    """The blocks of a result's payload (list content as JSON) if one holds media, else ``None``."""
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    if isinstance(value, list) and any(carries_media(b) for b in value):
        return value
    return None


def _content(payload: str, listed: Sequence[bool]) -> str | list[Any]:
    """What the tool returns: the payload, or a result's blocks again when they hold media.

    A folded result whose content was blocks with an image, a file, audio or video (a
    screenshot tool, :func:`~langchain_pacms.messages.media.carries_media`) comes
    back as those blocks (after a span's call, as text), so the model sees the image again; of
    several results, each comes back as a text block naming its call, followed by its blocks
    when they were blocks and hold media (a string result stays the string, whatever it reads).
    """
    if not any(listed):
        return payload
    results, head = payload, []
    try:
        value = json.loads(payload)
    except ValueError:
        return payload
    if isinstance(value, dict) and isinstance(value.get("results"), str):  # a span's payload
        call = {"text": value.get("text"), "tool_calls": value.get("tool_calls")}
        head = [{"type": "text", "text": json.dumps(call, ensure_ascii=False)}]
        results = value["results"]
    if len(listed) == 1:
        blocks = _media(results)
        return payload if blocks is None else [*head, *blocks]
    try:  # several results: [{"tool_call_id", "content"}, ...] (``payload_of``), in order
        found = json.loads(results)
        each = [(r, _media(r["content"]) if was else None) for r, was in zip(found, listed)]
    except (ValueError, TypeError, KeyError):
        return payload
    if len(found) != len(listed):
        return payload
    if all(blocks is None for _, blocks in each):
        return payload
    parts: list[Any] = list(head)
    for result, blocks in each:
        shown = result if blocks is None else {"tool_call_id": result["tool_call_id"]}
        parts.append({"type": "text", "text": json.dumps(shown, ensure_ascii=False)})
        parts.extend(blocks or ())
    return parts


def _recovering(
    store: BaseStore,
    thread_id: str | None,
    default: str | None,
    key: str,
    object_id: str,
    config: RunnableConfig,
    state: Any,
) -> Steps[str | list[Any]]:
    """The tool's body (sync and async): yields the store reads, returns the payload."""
    messages, known = state_messages(state, key), known_ids_of(state)
    found = thread_id if thread_id is not None else thread_id_of(config)
    thread = str(found) if found is not None else (run_thread(messages) if messages else default)
    if thread is None:
        raise ToolException(
            "recover_context has no thread id: build it with make_recover_tool(store, "
            "thread_id=...) or run with config={'configurable': {'thread_id': ...}}"
        )
    try:
        sidecars = SidecarStore.of_history(store, thread, messages)
    except ValueError as exc:
        raise ToolException(f"recover_context failed: {exc}") from exc
    index = index_messages(messages, known_ids=known) if messages else None
    by_id = index.by_id if index is not None else {}
    names = index.shared.get(object_id, ()) if index is not None else ()
    if names:
        raise ToolException(_ambiguous(object_id, [by_id[n] for n in names]))
    obj = by_id.get(object_id)
    if obj is not None and obj.state == "masked":
        raise ToolException(
            f"recover_context failed: {object_id!r} was masked, not folded: its head and tail "
            "are in the history and the rest is not recoverable (kept for audit only)"
        )
    hashes, folded = object_hashes(messages, obj)
    listed = _listed(messages, obj if obj is not None else _keyed(by_id, object_id))
    stored_id = index.carried_id(object_id) if index is not None else object_id
    try:
        record = yield from _stored(sidecars, stored_id, hashes)
        return _content(recovered_again(str(record.payload)), listed)
    except SidecarNotFoundError as exc:
        if hashes and not folded:
            raise ToolException(
                f"recover_context failed: {object_id!r} is not folded in this conversation "
                "(its content is in the history)"
            ) from exc
        if folded:
            logger.warning(
                "recover_context: %s is folded in thread %r but its payload is not there (a "
                "thread copied from another one needs copy_thread_sidecars)",
                object_id,
                thread,
            )
        try:
            ids = yield Call(sidecars.list_ids, sidecars.alist_ids)
        except Exception:  # the listing is only a hint
            ids = []
        raise _failure(exc, ids) from exc
    except SidecarError as exc:
        raise _failure(exc, []) from exc
    except ToolException:
        raise
    except Exception as exc:  # a store failure (connection lost, database locked, bad id)
        logger.warning("recover_context: the sidecar store failed: %r", exc)
        raise ToolException(
            f"recover_context failed: the sidecar store could not be read "
            f"({type(exc).__name__}: {exc}); try again later"
        ) from exc


def recovered_again(payload: str, depth: int = 64) -> str:
    """A folded round of ``recover_context`` calls as what those calls recovered.

    Such a round's span payload (``{"text", "tool_calls", "results"}``) holds the payload it
    recovered as an escaped string; recovering it again and again would nest the original ever
    deeper (its size doubling with the backslashes). One call's round gives its result, read
    again the same way; a round of several gives its span with each result read so. Any other
    payload is returned as it is.

    Example:
        >>> call = {"name": RECOVER_TOOL_NAME, "args": {"object_id": "function:tool:1"}, "id": "r"}
        >>> once = json.dumps({"text": "again", "tool_calls": [call], "results": "a.py"})
        >>> twice = json.dumps({"text": "", "tool_calls": [call], "results": once})
        >>> recovered_again(twice), recovered_again("a.py")
        ('a.py', 'a.py')
    """
    try:
        value = json.loads(payload) if depth > 0 and payload.startswith("{") else None
    except ValueError:
        return payload
    if not isinstance(value, dict):
        return payload
    calls, results = value.get("tool_calls"), value.get("results")
    recoveries = isinstance(calls, list) and all(
        isinstance(c, Mapping) and c.get("name") == RECOVER_TOOL_NAME for c in calls
    )
    if not calls or not recoveries or not isinstance(results, str):
        return payload
    if len(calls) == 1:
        return recovered_again(results, depth - 1)
    try:
        each = json.loads(results)
        read = [{**r, "content": recovered_again(r["content"], depth - 1)} for r in each]
    except (ValueError, TypeError, KeyError):
        return payload
    return json.dumps(
        {**value, "results": json.dumps(read, ensure_ascii=False)}, ensure_ascii=False
    )


def _keyed(by_id: Mapping[str, ContextObject], key: str) -> ContextObject | None:
    """The object a key (``<id>@<sha256 prefix>``) names in the history, else ``None``."""
    object_id, prefix = split_key(key)
    obj = by_id.get(object_id) if prefix is not None else None
    return obj if obj is not None and obj.sha256.startswith(prefix or "") else None


def _ambiguous(object_id: str, objects: Sequence[ContextObject]) -> str:
    """The error for an id that several stubs carry, naming each object and its stub.

    Only a folded object is offered as recoverable; a masked or active one is named as such.
    """
    state = {"masked": "masked, not recoverable", "active": "in the history, not folded"}
    each = "; ".join(f"{o.id!r} ({state.get(o.state) or _stub_of(o)})" for o in objects)
    return (
        f"recover_context: {object_id!r} names {len(objects)} objects in this conversation "
        f"(runs merged into one history, each numbering its own folds); call it again with the "
        f"id of the one you need: {each}"
    )


def _stub_of(obj: ContextObject, shown: int = 160) -> str:
    """A folded object as the model saw it: its stub (not the call, which merged runs share)."""
    text = " ".join(obj.text.split())
    stub = text[max(0, text.find("[folded:")) :]
    return stub if len(stub) <= shown else stub[:shown] + " ..."


def _stored(sidecars: SidecarStore, object_id: str, hashes: Sequence[str]) -> Steps[SidecarRecord]:
    """This thread's record of ``object_id`` for one of ``hashes`` (the only one without any)."""
    for digest in hashes[:-1]:  # a span still whole may be stored as either of its payloads
        try:
            return (yield Call(sidecars.get, sidecars.aget, (object_id, digest)))
        except (SidecarNotFoundError, SidecarIntegrityError):
            continue
    return (yield Call(sidecars.get, sidecars.aget, (object_id, hashes[-1] if hashes else None)))


class RecoverTool(StructuredTool):
    """The ``recover_context`` tool :func:`make_recover_tool` builds: it reads ``sidecar_store``."""

    sidecar_store: BaseStore = Field(exclude=True, repr=False)


def unreadable_store(tools: Sequence[Any], store: BaseStore) -> str | None:
    """Why the agent's ``recover_context`` (among ``tools``) cannot read ``store``, else ``None``.

    ``None`` also when the agent has no such tool or one this package did not build. A
    :class:`~langchain_pacms.lifecycle.graph_store.GraphStore` counts as the store it uses now.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> store = InMemoryStore()
        >>> unreadable_store([make_recover_tool(store)], store) is None
        True
        >>> unreadable_store([make_recover_tool(InMemoryStore())], store)[:43]
        "the agent's recover_context reads another s"
    """
    for tool in tools:
        if isinstance(tool, RecoverTool) and tool.name == RECOVER_TOOL_NAME:
            theirs_now, mine_now = _now(tool.sidecar_store), _now(store)
            if theirs_now is mine_now:
                return None
            theirs, mine = type(theirs_now).__name__, type(mine_now).__name__
            return (
                f"the agent's {RECOVER_TOOL_NAME} reads another store ({theirs}) than the one "
                f"these payloads are written to ({mine}), so they cannot be recovered; an agent "
                "keeps one tool per name: give every middleware that folds the same store"
            )
    return None


def _now(store: BaseStore) -> BaseStore:
    """The store ``store``'s operations go to now (a :class:`GraphStore` follows the run)."""
    return store.current() if isinstance(store, GraphStore) else store


class RecoverCheck:
    """Logs a warning, on the first model call, when the agent's tool cannot read ``store``.

    Args:
        store: Where the middleware writes folded payloads.
        owner: The middleware's name, for the warning.
    """

    def __init__(self, store: BaseStore, owner: str) -> None:
        self.store, self.owner, self.done = store, owner, False

    def __call__(self, tools: Sequence[Any]) -> None:
        """Check ``tools`` (a model request's) once."""
        if self.done:
            return
        self.done = True
        why = unreadable_store(tools, self.store)
        if why is not None:
            logger.warning("%s: %s", self.owner, why)


def make_recover_tool(
    store: BaseStore,
    *,
    thread_id: str | None = None,
    default_thread_id: str | None = None,
    messages_key: str = "messages",
) -> RecoverTool:
    r"""Build the ``recover_context(object_id)`` tool over the sidecars in ``store``.

    The payload is checked against the sha256 its stub carries; every failure comes back to the
    model as the tool's error result, never as a wrong payload.

    Args:
        store: The ``BaseStore`` the folds wrote their sidecars to.
        thread_id: Read this thread's sidecars (default: the run's ``configurable.thread_id``,
            else the run's own namespace).
        default_thread_id: The thread for a direct call with neither a thread id nor a graph
            state (default: an error result). Do not share one between conversations.
        messages_key: The state key of the messages channel (as given to
            ``create_lifecycle_node`` and ``ToolNode``).

    Raises:
        TypeError: If ``store`` is not a ``BaseStore`` or ``thread_id`` is not a string.
        ValueError: If ``thread_id`` is empty.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> store = InMemoryStore()
        >>> SidecarStore(store, "t1").put(SidecarRecord.of("function:tool:1", "a\x00b", "tool"))
        >>> tool = make_recover_tool(store)
        >>> tool.invoke({"object_id": "function:tool:1"},
        ...             {"configurable": {"thread_id": "t1"}}) == "a\x00b"
        True
    """
    if thread_id is not None:
        SidecarStore(store, thread_id)  # fail at construction, not on the first call
    elif not isinstance(store, BaseStore):
        raise TypeError(f"store must be a langgraph BaseStore, got {type(store).__name__}")

    reads = (store, thread_id, default_thread_id, messages_key)  # what every call reads from

    def recover(object_id: str, config: RunnableConfig, state: Any = None) -> str | list[Any]:
        return drive_calls(_recovering(*reads, object_id, config, state))

    async def arecover(
        object_id: str, config: RunnableConfig, state: Any = None
    ) -> str | list[Any]:
        return await adrive_calls(_recovering(*reads, object_id, config, state))

    tool = RecoverTool.from_function(
        func=recover,
        coroutine=arecover,
        name=RECOVER_TOOL_NAME,
        description=_DESCRIPTION,
        args_schema=RecoverInput,
        handle_tool_error=True,
        sidecar_store=store,
    )
    assert isinstance(tool, RecoverTool)  # from_function builds its own class
    return tool
