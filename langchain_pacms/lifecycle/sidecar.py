r"""Folded payloads in any LangGraph ``BaseStore``, keyed by object id, hash-checked on read.

A :class:`SidecarStore` writes each :class:`~langchain_pacms.lifecycle.actions.SidecarRecord`
under the namespace ``("pacms_sidecar", thread_id)`` with the object id as key. The payload is
stored as base64 of its UTF-8 bytes (``surrogatepass``), so NUL bytes, lone surrogates and any
other code point survive a JSON column or a PostgreSQL ``jsonb`` value unchanged. The stored value
also holds the sha256 of those bytes, the kind, the lineage, the description and the creation
time (UTC, ISO 8601). Reading verifies the hash: a changed value raises
:class:`SidecarIntegrityError`, never returns a wrong payload. Items are written with
``index=False``, so a store configured for semantic search does not embed payloads.

The stores: ``InMemoryStore`` (tests, one process), LangGraph's ``SqliteStore`` (a file; needs no
server) and ``PostgresStore`` (shared by many workers); the last two come with the ``lifecycle``
extra.

Example:
    >>> from langgraph.store.memory import InMemoryStore
    >>> from langchain_pacms.lifecycle.actions import SidecarRecord
    >>> sidecars = SidecarStore(InMemoryStore(), "thread-1")
    >>> sidecars.put(SidecarRecord.of("function:tool:1", "a\x00b \ud800", "tool", ("t1",)))
    >>> sidecars.get("function:tool:1").payload == "a\x00b \ud800", sidecars.list_ids()
    (True, ['function:tool:1'])
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from langchain_core.runnables.config import run_in_executor
from langgraph.store.base import BaseStore, GetOp, Item, Op, PutOp, Result, SearchOp

from langchain_pacms.lifecycle.actions import SidecarRecord

__all__ = [
    "AUDIT_NAMESPACE",
    "SIDECAR_NAMESPACE",
    "SidecarError",
    "SidecarIntegrityError",
    "SidecarNotFoundError",
    "SidecarStore",
]

SIDECAR_NAMESPACE = "pacms_sidecar"
"""First label of every sidecar namespace: ``("pacms_sidecar", thread_id)``."""
AUDIT_NAMESPACE = "pacms_audit"
"""First label of the audit records: the originals of masked and pruned objects (no recovery
tool reads them; they keep the full transcript for audit)."""

_ENCODING = "base64:utf-8+surrogatepass"
_PAGE = 500


class SidecarError(Exception):
    """Base class of the sidecar errors (catch this to handle both).

    Example:
        >>> issubclass(SidecarNotFoundError, SidecarError), issubclass(SidecarError, ValueError)
        (True, False)
    """


class SidecarIntegrityError(SidecarError, ValueError):
    """A stored sidecar does not match its sha256 (or is not a sidecar value at all).

    Example:
        >>> issubclass(SidecarIntegrityError, ValueError)
        True
    """


class SidecarNotFoundError(SidecarError, KeyError):
    """No sidecar is stored for this object id in this thread.

    Example:
        >>> str(SidecarNotFoundError("no sidecar for 'x' in thread 't'"))
        "no sidecar for 'x' in thread 't'"
    """

    def __str__(self) -> str:
        # KeyError quotes its argument; show the message as written
        return str(self.args[0]) if self.args else ""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _encode(record: SidecarRecord) -> dict[str, Any]:
    """The store value for ``record`` (refuses a record whose hash does not match)."""
    data = record.payload.encode("utf-8", "surrogatepass")
    if _digest(data) != record.sha256:
        raise SidecarIntegrityError(
            f"refusing to store {record.object_id!r}: its payload does not match its sha256"
        )
    return {
        "object_id": record.object_id,
        "encoding": _ENCODING,
        "payload": base64.b64encode(data).decode("ascii"),
        "sha256": record.sha256,
        "kind": record.kind,
        "lineage": list(record.lineage),
        "description": record.description,
        "created_at": datetime.now(timezone.utc).isoformat(),
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
    if _digest(data) != expected:
        raise SidecarIntegrityError(f"{where}: the stored payload does not match its sha256")
    payload = data.decode("utf-8", "surrogatepass")
    return SidecarRecord(object_id, payload, expected, kind, lineage, description)


def _natural(object_id: str) -> list[tuple[int, int | str]]:
    """Sort key: ``function:tool:2`` before ``function:tool:10``."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", object_id) if p]


class SidecarStore:
    r"""Sidecar records of one thread in a LangGraph ``BaseStore``.

    Args:
        store: Any ``BaseStore`` (``InMemoryStore``, ``SqliteStore``, ``PostgresStore``, ...).
        thread_id: The thread (conversation) the sidecars belong to; the second namespace label,
            so it may not be empty or contain ``.`` or NUL.
        namespace: The first namespace label (:data:`AUDIT_NAMESPACE` for audit records).

    Raises:
        TypeError: If ``store`` is not a ``BaseStore`` or ``thread_id`` not a string.
        ValueError: If ``thread_id`` is not a valid namespace label.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> from langchain_pacms.lifecycle.actions import SidecarRecord
        >>> sidecars = SidecarStore(InMemoryStore(), "t")
        >>> sidecars.put_many([SidecarRecord.of(f"function:tool:{n}", "x" * n, "tool")
        ...                    for n in (10, 2)])
        >>> sidecars.namespace, sidecars.list_ids(), sidecars.get("function:tool:2").payload
        (('pacms_sidecar', 't'), ['function:tool:2', 'function:tool:10'], 'xx')
    """

    def __init__(
        self, store: BaseStore, thread_id: str, *, namespace: str = SIDECAR_NAMESPACE
    ) -> None:
        if not isinstance(store, BaseStore):
            raise TypeError(f"store must be a langgraph BaseStore, got {type(store).__name__}")
        if not isinstance(thread_id, str):
            raise TypeError(f"thread_id must be a string, got {type(thread_id).__name__}")
        if not thread_id or "." in thread_id or "\x00" in thread_id:
            raise ValueError(
                f"thread_id {thread_id!r} cannot be a store namespace label "
                "(it must be non-empty, without '.' or NUL)"
            )
        self.store = store
        self.thread_id = thread_id
        self.namespace: tuple[str, str] = (namespace, thread_id)

    def __repr__(self) -> str:
        return f"SidecarStore({type(self.store).__name__}, thread_id={self.thread_id!r})"

    def _ops(self, records: Iterable[SidecarRecord]) -> list[PutOp]:
        return [PutOp(self.namespace, r.object_id, _encode(r), index=False) for r in records]

    def _get_op(self, object_id: str) -> GetOp:
        return GetOp(self.namespace, object_id)

    def _search_op(self, offset: int) -> SearchOp:
        return SearchOp(self.namespace, limit=_PAGE, offset=offset)

    def _record(self, object_id: str, item: Result) -> SidecarRecord:
        if not isinstance(item, Item):
            raise SidecarNotFoundError(f"no sidecar for {object_id!r} in thread {self.thread_id!r}")
        return _decode(object_id, self.thread_id, item.value)

    def _own(self, page: Result) -> tuple[list[str], int]:
        """This thread's keys in a search page, and the page's length."""
        items = [i for i in page if isinstance(i, Item)] if isinstance(page, list) else []
        # a prefix search also returns deeper namespaces: keep this thread's items only
        return [i.key for i in items if tuple(i.namespace) == self.namespace], len(items)

    async def _abatch(self, ops: Sequence[Op]) -> list[Result]:
        try:
            return await self.store.abatch(ops)
        except NotImplementedError:  # a sync-only store (SqliteStore): run it in a thread
            return await run_in_executor(None, self.store.batch, ops)

    def put(self, record: SidecarRecord) -> None:
        """Store one record (replacing any record with the same object id).

        Raises:
            SidecarIntegrityError: If ``record.sha256`` does not match its payload.
        """
        self.store.batch(self._ops([record]))

    def put_many(self, records: Iterable[SidecarRecord]) -> None:
        """Store several records in one ``batch`` call (nothing is written if one is invalid).

        Raises:
            SidecarIntegrityError: If a record's sha256 does not match its payload.
        """
        ops = self._ops(records)
        if ops:
            self.store.batch(ops)

    def get(self, object_id: str) -> SidecarRecord:
        """The record of ``object_id``, hash-checked.

        Raises:
            SidecarNotFoundError: If no sidecar is stored for it in this thread.
            SidecarIntegrityError: If the stored value does not match its sha256.
        """
        return self._record(object_id, self.store.batch([self._get_op(object_id)])[0])

    def list_ids(self) -> list[str]:
        """Object ids with a sidecar in this thread (``function:tool:2`` before ``...:10``)."""
        ids: list[str] = []
        offset = 0
        while True:
            keys, found = self._own(self.store.batch([self._search_op(offset)])[0])
            ids.extend(keys)
            offset += found
            if found < _PAGE:
                return sorted(ids, key=_natural)

    async def aput(self, record: SidecarRecord) -> None:
        """Async :meth:`put` (a sync-only store such as ``SqliteStore`` runs in a thread)."""
        await self._abatch(self._ops([record]))

    async def aput_many(self, records: Iterable[SidecarRecord]) -> None:
        """Async :meth:`put_many`."""
        ops = self._ops(records)
        if ops:
            await self._abatch(ops)

    async def aget(self, object_id: str) -> SidecarRecord:
        """Async :meth:`get`."""
        return self._record(object_id, (await self._abatch([self._get_op(object_id)]))[0])

    async def alist_ids(self) -> list[str]:
        """Async :meth:`list_ids`."""
        ids: list[str] = []
        offset = 0
        while True:
            keys, found = self._own((await self._abatch([self._search_op(offset)]))[0])
            ids.extend(keys)
            offset += found
            if found < _PAGE:
                return sorted(ids, key=_natural)
