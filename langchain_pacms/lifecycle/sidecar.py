"""Folded payloads in a LangGraph ``BaseStore``, keyed by object id and content, hash-checked.

Keys are ``<object id>@<16 hex digits of the sha256>``; payloads are stored as base64 (any code
point survives), verified on read and never embedded (``index=False``).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore, GetOp, Item, Op, PutOp, Result, SearchOp

from langchain_pacms._steps import Call, adrive, drive
from langchain_pacms.errors import PACMSError
from langchain_pacms.lifecycle.fold import SidecarRecord, span_results
from langchain_pacms.lifecycle.objects import KEY_HEX, record_key
from langchain_pacms.messages.history import is_human
from langchain_pacms.messages.runs import run_thread

__all__ = [
    "AUDIT_NAMESPACE",
    "SIDECAR_NAMESPACE",
    "SidecarAmbiguousError",
    "SidecarError",
    "SidecarIntegrityError",
    "SidecarNotFoundError",
    "SidecarStore",
    "acopy_thread_sidecars",
    "adelete_thread_sidecars",
    "copy_thread_sidecars",
    "delete_thread_sidecars",
    "record_key",
    "split_key",
    "thread_label",
]

SIDECAR_NAMESPACE = "pacms_sidecar"
"""First label of every sidecar namespace: ``("pacms_sidecar", thread_label(thread_id))``."""
AUDIT_NAMESPACE = "pacms_audit"
"""First label of the audit records: the whole messages of masked and pruned objects."""

_NAMESPACES = (SIDECAR_NAMESPACE, AUDIT_NAMESPACE)
_ENCODING = "base64:utf-8+surrogatepass"
_PAGE = 500
_PLAIN_LABEL = re.compile(r"[A-Za-z0-9_\-:@+=,]+")


class SidecarError(PACMSError):
    """Base class of the sidecar errors."""


class SidecarIntegrityError(SidecarError, ValueError):
    """A stored sidecar does not match its sha256 or is not a sidecar value (a ``ValueError``)."""


class SidecarNotFoundError(SidecarError, KeyError):
    """No sidecar is stored for this object id in this thread (a ``KeyError``).

    Example:
        >>> str(SidecarNotFoundError("no sidecar for 'x'"))
        "no sidecar for 'x'"
    """

    def __str__(self) -> str:
        # KeyError quotes its argument; show the message as written
        return str(self.args[0]) if self.args else ""


class SidecarAmbiguousError(SidecarError, LookupError):
    """Several payloads were folded under one object id (a forked thread) and nothing says which."""


def _one_round(records: list[SidecarRecord]) -> SidecarRecord | None:
    """The span record, when ``records`` are one round folded as a span and as its output.

    The selection folds a dropped round as a span (its call and results) and the lifecycle may
    fold the same round's output under the same id: both hold the same results, and the span
    holds them all.
    """
    spans = [r for r in records if span_results(r.payload) is not None]
    if len(spans) != 1:
        return None
    results = span_results(spans[0].payload)
    if all(r is spans[0] or r.payload == results for r in records):
        return spans[0]
    return None


def thread_label(thread_id: str) -> str:
    r"""The namespace label for a thread id: the id itself when plain, else ``~`` and its hex.

    Example:
        >>> thread_label("thread-1"), thread_label("a.b")
        ('thread-1', '~612e62')
    """
    if _PLAIN_LABEL.fullmatch(thread_id) and not thread_id.startswith("~"):
        return thread_id
    return "~" + thread_id.encode("utf-8", "surrogatepass").hex()


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def split_key(key: str) -> tuple[str, str | None]:
    """``(object id, hash prefix)`` of a key (no prefix for a key written without one).

    Example:
        >>> split_key("function:tool:3@" + "0" * 16), split_key("function:tool:3")
        (('function:tool:3', '0000000000000000'), ('function:tool:3', None))
    """
    head, sep, tail = key.rpartition("@")
    if sep and len(tail) == KEY_HEX and all(c in "0123456789abcdef" for c in tail):
        return head, tail
    return key, None


def _storable(text: str) -> str:
    """``text`` with each NUL and lone surrogate as U+FFFD (PostgreSQL and SQLite refuse them)."""
    return _UNSTORABLE.sub("\ufffd", text)


def _encode(record: SidecarRecord, marks: Mapping[str, str | None]) -> dict[str, Any]:
    """The store value for ``record`` (refuses a record whose hash does not match).

    The payload goes as base64 of its bytes, exact; the lineage and description, which nothing
    reads back to restore a payload, go as text a database can hold (:func:`_storable`).
    ``marks`` (``run``, ``turn``, ``tail``) say where it was folded (see :class:`SidecarStore`).
    """
    data = record.payload.encode("utf-8", "surrogatepass")
    if hashlib.sha256(data).hexdigest() != record.sha256:
        raise SidecarIntegrityError(
            f"refusing to store {record.object_id!r}: its payload does not match its sha256"
        )
    return {
        "object_id": record.object_id,
        "encoding": _ENCODING,
        "payload": base64.b64encode(data).decode("ascii"),
        "sha256": record.sha256,
        "kind": record.kind,
        "lineage": [_storable(m) for m in record.lineage],
        "description": _storable(record.description),
        "created_at": datetime.now(timezone.utc).isoformat(),
        **{k: _storable(v) for k, v in marks.items() if v is not None},
    }


def _decode(object_id: str, thread_id: str, value: Mapping[str, Any]) -> SidecarRecord:
    """The record in a store value, after checking its hash."""
    where = f"sidecar {object_id!r} in thread {thread_id!r}"
    try:
        stored_id, encoding = value["object_id"], value["encoding"]
        data = base64.b64decode(value["payload"], validate=True)
        expected = str(value["sha256"])
        kind, description = str(value["kind"]), str(value["description"])
        lineage = tuple(str(m) for m in value["lineage"])
    except (KeyError, TypeError, ValueError) as exc:  # binascii.Error is a ValueError
        raise SidecarIntegrityError(f"{where}: not a sidecar value ({exc!r})") from exc
    if encoding != _ENCODING:
        raise SidecarIntegrityError(f"{where}: unknown encoding {encoding!r}")
    if stored_id != object_id:
        raise SidecarIntegrityError(f"{where}: the value is the sidecar of {stored_id!r}")
    if hashlib.sha256(data).hexdigest() != expected:
        raise SidecarIntegrityError(f"{where}: the stored payload does not match its sha256")
    payload = data.decode("utf-8", "surrogatepass")
    return SidecarRecord(object_id, payload, expected, kind, lineage, description)


def _latest(turns: Mapping[str, int], among: Iterable[str]) -> set[str]:
    """Those of ``among`` whose turn (a position in ``turns``) is the latest of them."""
    held = {h: turns[h] for h in among if h in turns}
    return {h for h, at in held.items() if at == max(held.values())}


def _natural(object_id: str) -> list[tuple[int, int | str]]:
    """Sort key: ``function:tool:2`` before ``function:tool:10``."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", object_id) if p]


class SidecarStore:
    r"""Sidecar records of one thread in a LangGraph ``BaseStore``.

    Args:
        store: Any ``BaseStore`` (``InMemoryStore``, ``SqliteStore``, ``PostgresStore``, ...).
        thread_id: The thread the sidecars belong to: any non-empty string.
        namespace: The first namespace label (:data:`AUDIT_NAMESPACE` for audit records).
        run: The run that writes and reads (``run_thread`` of its messages), when known: its
            records carry it, and an object id that several runs of the thread folded with
            different payloads (subagents called from a tool share their parent's thread id,
            and each numbers its rounds from 1) reads as this run's own.
        turn: The ids of the latest user message and of the last message of the history that
            writes (``(turn, tail)``): its records carry them (see ``held``).
        held: The message ids of the history that reads, oldest first: an object id folded
            with different payloads in the branches of a forked thread reads as the one folded
            where this history's messages are (at its last message, else at the latest of its
            turns). :meth:`of_history` sets ``run``, ``turn`` and ``held`` from a history.

    Raises:
        TypeError: If ``store`` is not a ``BaseStore`` or ``thread_id`` not a string.
        ValueError: If ``thread_id`` is empty.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> from langchain_pacms.lifecycle.fold import SidecarRecord, span_results
        >>> sidecars = SidecarStore(InMemoryStore(), "t")
        >>> sidecars.put_many(SidecarRecord.of(f"function:tool:{n}", "x", "tool") for n in (9, 10))
        >>> sidecars.namespace, sidecars.list_ids()
        (('pacms_sidecar', 't'), ['function:tool:9', 'function:tool:10'])
    """

    def __init__(
        self,
        store: BaseStore,
        thread_id: str,
        *,
        namespace: str = SIDECAR_NAMESPACE,
        run: str | None = None,
        turn: tuple[str | None, str | None] = (None, None),
        held: Sequence[str] = (),
    ) -> None:
        if not isinstance(store, BaseStore):
            raise TypeError(f"store must be a langgraph BaseStore, got {type(store).__name__}")
        if not isinstance(thread_id, str):
            raise TypeError(f"thread_id must be a string, got {type(thread_id).__name__}")
        if not thread_id:
            raise ValueError("thread_id must be a non-empty string")
        self.store, self.thread_id, self.run, self.turn = store, thread_id, run, turn
        self.held = {mid: k for k, mid in enumerate(held)}  # a message id -> its position
        self.namespace: tuple[str, str] = (namespace, thread_label(thread_id))

    def __repr__(self) -> str:
        return f"SidecarStore({type(self.store).__name__}, thread_id={self.thread_id!r})"

    @classmethod
    def of_history(
        cls, store: BaseStore, thread_id: str, messages: Sequence[BaseMessage]
    ) -> SidecarStore:
        """The sidecars of a thread as a history writes and reads them (its run, turn, ids).

        Example:
            >>> from langchain_core.messages import HumanMessage
            >>> from langgraph.store.memory import InMemoryStore
            >>> history = [HumanMessage("fix it", id="h1")]
            >>> sidecars = SidecarStore.of_history(InMemoryStore(), "t", history)
            >>> sidecars.run, sidecars.turn, sorted(sidecars.held)
            ('run:h1', ('h1', 'h1'), ['h1'])
        """
        users = [m.id for m in messages if is_human(m) and m.id]
        return cls(
            store,
            thread_id,
            run=run_thread(messages) if messages else None,
            turn=(users[-1] if users else None, messages[-1].id if messages else None),
            held=[m.id for m in messages if m.id],
        )

    def _ops(self, records: Iterable[SidecarRecord]) -> list[PutOp]:
        # an object the index names by its key (merged runs sharing an id) is stored under its
        # id and its payload's hash, where a read of that key looks
        named = (replace(r, object_id=split_key(r.object_id)[0]) for r in records)
        return [
            PutOp(
                self.namespace,
                record_key(r.object_id, r.sha256),
                _encode(r, {"run": self.run, "turn": self.turn[0], "tail": self.turn[1]}),
                index=False,
            )
            for r in named
        ]

    def _search(self, object_id: str | None) -> Generator[list[Op], list[Result], list[Item]]:
        """Every item of this thread (of one object id when given), page by page."""
        where = {"object_id": object_id} if object_id is not None else None
        items: list[Item] = []
        offset = 0
        while True:
            page = (yield [SearchOp(self.namespace, filter=where, limit=_PAGE, offset=offset)])[0]
            found = [i for i in page if isinstance(i, Item)] if isinstance(page, list) else []
            # a prefix search also returns deeper namespaces: keep this thread's items only
            items.extend(i for i in found if tuple(i.namespace) == self.namespace)
            offset += len(found)
            if len(found) < _PAGE:
                return items

    def _getting(
        self, object_id: str, sha256: str | None
    ) -> Generator[list[Op], list[Result], SidecarRecord]:
        """The body of :meth:`get` and :meth:`aget`: yields store batches, returns the record."""
        object_id, prefix = split_key(object_id)
        wanted = (sha256 or prefix or "")[:KEY_HEX] or None
        where = f"{object_id!r} in thread {self.thread_id!r}"
        if wanted is not None:
            found = (yield [GetOp(self.namespace, record_key(object_id, wanted))])[0]
            if isinstance(found, Item):
                record = _decode(object_id, self.thread_id, found.value)
                if sha256 is not None and record.sha256 != sha256:
                    raise SidecarIntegrityError(
                        f"the sidecar of {where} is not the payload its stub points at "
                        f"(sha256 {record.sha256[:12]}..., the stub says {sha256[:12]}...)"
                    )
                return record
        versions = yield from self._search(object_id)
        records = [_decode(object_id, self.thread_id, i.value) for i in versions]
        if not records:
            raise SidecarNotFoundError(f"no sidecar for {where}")
        if wanted is not None:
            # a record stored under its bare object id (before keys carried the hash)
            same = [r for r in records if r.sha256.startswith(wanted)]
            if same and (sha256 is None or same[0].sha256 == sha256):
                return same[0]
            stored = ", ".join(sorted({r.sha256[:12] for r in records}))
            raise SidecarIntegrityError(
                f"no sidecar of {where} matches the sha256 its stub carries "
                f"({wanted[:12]}...); stored versions: {stored}"
            )
        distinct = {r.sha256: r for r in records}
        values = [(r.sha256, i.value) for r, i in zip(records, versions)]
        turns = {h: self.held[v["turn"]] for h, v in values if v.get("turn") in self.held}
        for ours in (  # this run's own folds, then those made where this history's messages are
            lambda _: {h for h, v in values if self.run is not None and v.get("run") == self.run},
            lambda _: {h for h, v in values if v.get("tail") in self.held},
            lambda left: _latest(turns, left),
        ):
            if len(distinct) > 1 and (kept := ours(distinct) & set(distinct)):
                distinct = {h: r for h, r in distinct.items() if h in kept}
        if len(distinct) > 1 and (whole := _one_round(list(distinct.values()))) is not None:
            return whole
        if len(distinct) > 1:
            keys = ", ".join(sorted(record_key(object_id, h) for h in distinct))
            raise SidecarAmbiguousError(
                f"{len(distinct)} different payloads were folded as {where} (a forked "
                f"thread); name one by its key: {keys}"
            )
        return next(iter(distinct.values()))

    def _listing(self) -> Generator[list[Op], list[Result], list[str]]:
        items = yield from self._search(None)
        return sorted({split_key(i.key)[0] for i in items}, key=_natural)

    def _clearing(self) -> Generator[list[Op], list[Result], int]:
        items = yield from self._search(None)
        if items:
            yield [PutOp(self.namespace, i.key, None) for i in items]  # a None value deletes
        return len(items)

    async def _abatch(self, ops: Sequence[Op]) -> list[Result]:
        # a sync-only store (SqliteStore) runs in a thread (Call.arun)
        return cast("list[Result]", await Call(self.store.batch, self.store.abatch, (ops,)).arun())

    def put(self, record: SidecarRecord) -> None:
        """Store one record (never replacing another payload).

        Raises:
            SidecarIntegrityError: If ``record.sha256`` does not match its payload.
        """
        self.store.batch(self._ops([record]))

    def put_many(self, records: Iterable[SidecarRecord]) -> None:
        """Store several records in one batch (nothing is written if one is invalid).

        Raises:
            SidecarIntegrityError: If a record's sha256 does not match its payload.
        """
        ops = self._ops(records)
        if ops:
            self.store.batch(ops)

    def get(self, object_id: str, sha256: str | None = None) -> SidecarRecord:
        """The record of ``object_id``, hash-checked.

        Args:
            object_id: The object id, or a key ``object_id@<hash>`` naming one version.
            sha256: The sha256 the object's stub carries (without it the id must have one payload).

        Raises:
            SidecarNotFoundError: If no sidecar is stored for it in this thread.
            SidecarIntegrityError: If the stored value does not match its sha256 or ``sha256``.
            SidecarAmbiguousError: If the object id has several payloads and nothing names one.
        """
        return drive(self._getting(object_id, sha256), self.store.batch)

    def list_ids(self) -> list[str]:
        """Object ids with a sidecar in this thread (``function:tool:2`` before ``...:10``)."""
        return drive(self._listing(), self.store.batch)

    def clear(self) -> int:
        """Delete every record of this thread in this namespace; returns how many there were.

        Example:
            >>> from langgraph.store.memory import InMemoryStore
            >>> from langchain_pacms.lifecycle.fold import SidecarRecord, span_results
            >>> sidecars = SidecarStore(InMemoryStore(), "t")
            >>> sidecars.put(SidecarRecord.of("function:tool:1", "x", "tool"))
            >>> sidecars.clear(), sidecars.list_ids()
            (1, [])
        """
        return drive(self._clearing(), self.store.batch)

    async def aput(self, record: SidecarRecord) -> None:
        """Async :meth:`put` (a sync-only store such as ``SqliteStore`` runs in a thread)."""
        await self._abatch(self._ops([record]))

    async def aput_many(self, records: Iterable[SidecarRecord]) -> None:
        """Async :meth:`put_many`."""
        ops = self._ops(records)
        if ops:
            await self._abatch(ops)

    async def aget(self, object_id: str, sha256: str | None = None) -> SidecarRecord:
        """Async :meth:`get`."""
        return await adrive(self._getting(object_id, sha256), self._abatch)

    async def alist_ids(self) -> list[str]:
        """Async :meth:`list_ids`."""
        return await adrive(self._listing(), self._abatch)

    async def aclear(self) -> int:
        """Async :meth:`clear`."""
        return await adrive(self._clearing(), self._abatch)


def delete_thread_sidecars(store: BaseStore, thread_id: str) -> int:
    """Delete a thread's folded payloads and audit records; returns how many records went.

    A checkpointer's ``delete_thread`` leaves the store alone: call this beside it, or the
    payloads of a deleted thread stay in the store. A run without a thread id keeps its records
    under :func:`~langchain_pacms.messages.runs.run_thread` of its messages.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> from langchain_pacms.lifecycle.fold import SidecarRecord, span_results
        >>> store = InMemoryStore()
        >>> SidecarStore(store, "t").put(SidecarRecord.of("function:tool:1", "x", "tool"))
        >>> SidecarStore(store, "u").put(SidecarRecord.of("function:tool:1", "y", "tool"))
        >>> delete_thread_sidecars(store, "t"), SidecarStore(store, "u").list_ids()
        (1, ['function:tool:1'])
    """
    return drive(_deleting(store, thread_id), store.batch)


async def adelete_thread_sidecars(store: BaseStore, thread_id: str) -> int:
    """Async :func:`delete_thread_sidecars`."""
    return await adrive(_deleting(store, thread_id), SidecarStore(store, thread_id)._abatch)


def _deleting(store: BaseStore, thread_id: str) -> Generator[list[Op], list[Result], int]:
    total = 0
    for namespace in _NAMESPACES:
        total += yield from SidecarStore(store, thread_id, namespace=namespace)._clearing()
    return total


def copy_thread_sidecars(store: BaseStore, source_thread_id: str, thread_id: str) -> int:
    """Copy a thread's folded payloads and audit records to another thread; returns how many.

    Call it beside a thread copy (LangGraph's ``threads.copy``, or a thread's state written into
    a new thread): the copy holds the stubs of what was folded before, and ``recover_context``
    reads only its own thread's namespace. Nothing is read across threads otherwise, so no
    thread can reach another one's payloads through its state.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> store = InMemoryStore()
        >>> SidecarStore(store, "a").put(SidecarRecord.of("function:tool:1", "x", "tool"))
        >>> copy_thread_sidecars(store, "a", "b")
        1
        >>> SidecarStore(store, "b").get("function:tool:1").payload
        'x'
    """
    return drive(_copying(store, source_thread_id, thread_id), store.batch)


async def acopy_thread_sidecars(store: BaseStore, source_thread_id: str, thread_id: str) -> int:
    """Async :func:`copy_thread_sidecars`."""
    steps = _copying(store, source_thread_id, thread_id)
    return await adrive(steps, SidecarStore(store, thread_id)._abatch)


def _copying(
    store: BaseStore, source_thread_id: str, thread_id: str
) -> Generator[list[Op], list[Result], int]:
    total = 0
    for namespace in _NAMESPACES:
        source = SidecarStore(store, source_thread_id, namespace=namespace)
        target = SidecarStore(store, thread_id, namespace=namespace)
        items = yield from source._search(None)
        if items:
            yield [PutOp(target.namespace, i.key, i.value, index=False) for i in items]
        total += len(items)
    return total
