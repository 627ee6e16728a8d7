"""Live mode: each session's recent selections, kept (bounded) and streamed to the page."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import anyio

from langchain_pacms.remote import SESSION_HEADER, session_id

__all__ = [
    "MAX_BYTES",
    "MAX_CLIENTS",
    "MAX_RECORDS",
    "MAX_SESSIONS",
    "SESSION_HEADER",
    "WATCH_SESSION",
    "JsonlTail",
    "LiveSessions",
    "SessionLog",
    "StreamCount",
    "WatchedLog",
    "event_stream",
    "record_json",
    "session_id",
]

WATCH_SESSION = "watch"
"""The session under which ``--watch`` shows the records of the followed log."""
POLL_SECONDS = 0.2
"""How often a stream looks for new records (and a followed log for new lines)."""
KEEPALIVE_SECONDS = 10.0
"""Longest silence on a stream: a comment line is sent after it (it also finds gone clients)."""
MAX_SESSIONS = 64
"""Default sessions a log keeps (the least recently updated go first)."""
MAX_RECORDS = 64
"""Default records a log keeps per session (the oldest go first)."""
MAX_BYTES = 32 * 1024 * 1024
"""Default bytes of all records' JSON together a log keeps (the newest record always stays)."""
MAX_CLIENTS = 16
"""Default streams a process serves at once (one more gets 503)."""


def record_json(record: dict[str, Any]) -> str:
    r"""``record`` as the compact JSON a log keeps and a stream sends, always valid UTF-8.

    A lone surrogate (a file name that is not UTF-8, as ``os.listdir`` decodes it) is written as
    its JSON escape (``\udce9``), which a page decodes to the same string.

    Example:
        >>> record_json({"id": "caf\udce9", "n": 1})
        '{"id":"caf\\udce9","n":1}'
    """
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # escape only what UTF-8 cannot carry
        return json.dumps(record, separators=(",", ":"), default=str)
    return text


class SessionLog(Protocol):
    """Where the service keeps each session's recent selections and counts its open streams."""

    @property
    def max_clients(self) -> int:
        """Streams this process serves at once."""

    def add(self, session: str, record: dict[str, Any]) -> int:
        """Keep ``record`` as the newest of ``session``; its sequence number."""

    def since(self, session: str, after: int) -> list[tuple[int, str]]:
        """The kept records of ``session`` numbered above ``after`` (number, JSON), oldest first.

        All of them if even the newest is numbered below ``after``: numbers went back (the
        service restarted, or its store lost its data), so ``after`` is an older numbering's.
        """

    def summary(self) -> list[dict[str, Any]]:
        """Each session's ``id``, ``records`` kept and ``last`` number, newest first."""

    def open_stream(self) -> bool:
        """Count one more stream, unless :attr:`max_clients` are open already (``False``)."""

    def close_stream(self) -> None:
        """Count one stream fewer."""


class StreamCount:
    """The streams this process serves, at most ``max_clients`` at once (any thread may count)."""

    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        self.clients = 0
        self._streams_lock = threading.Lock()

    def open_stream(self) -> bool:
        """Count one more stream, unless :attr:`max_clients` are open already (``False``)."""
        with self._streams_lock:
            if self.clients >= self.max_clients:
                return False
            self.clients += 1
            return True

    def close_stream(self) -> None:
        """Count one stream fewer."""
        with self._streams_lock:
            self.clients -= 1


class LiveSessions(StreamCount):
    """The recent records of each session in this process's memory, bounded, thread-safe.

    Records are numbered from ``start + 1``; by default ``start`` is the clock in microseconds,
    so a restarted service numbers above whatever the one before it gave (a page that reconnects
    late with the ``Last-Event-ID`` of the earlier process gets every record of the new one).

    Example:
        >>> live = LiveSessions(start=0)
        >>> live.add("s", {"candidates": []}), [n for n, _ in live.since("s", 0)]
        (1, [1])
    """

    def __init__(
        self,
        *,
        max_sessions: int = MAX_SESSIONS,
        max_records: int = MAX_RECORDS,
        max_bytes: int = MAX_BYTES,
        max_clients: int = MAX_CLIENTS,
        start: int | None = None,
    ) -> None:
        super().__init__(max_clients)
        self.max_sessions, self.max_records, self.max_bytes = max_sessions, max_records, max_bytes
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, deque[tuple[int, str]]] = OrderedDict()
        self._bytes = 0
        self._seq = time.time_ns() // 1000 if start is None else start

    def add(self, session: str, record: dict[str, Any]) -> int:
        """Keep ``record`` (as compact JSON) as the newest of ``session``; its sequence number."""
        data = record_json(record)
        with self._lock:
            self._seq += 1
            records = self._sessions.pop(session, None) or deque()
            self._sessions[session] = records  # the most recently updated comes last
            records.append((self._seq, data))
            self._bytes += len(data)
            if len(records) > self.max_records:
                self._bytes -= len(records.popleft()[1])
            while len(self._sessions) > self.max_sessions:
                _, dropped = self._sessions.popitem(last=False)
                self._bytes -= sum(len(d) for _, d in dropped)
            while self._bytes > self.max_bytes and self._bytes > len(data):
                oldest_name, oldest = next(iter(self._sessions.items()))
                self._bytes -= len(oldest.popleft()[1])
                if not oldest:
                    del self._sessions[oldest_name]
            return self._seq

    def since(self, session: str, after: int) -> list[tuple[int, str]]:
        """The kept records of ``session`` numbered above ``after``, oldest first.

        All of them if the newest is numbered below ``after`` (an older numbering's: this
        process started after the one that numbered it).
        """
        with self._lock:
            records = self._sessions.get(session, ())
            if records and records[-1][0] < after:
                after = 0
            return [(seq, data) for seq, data in records if seq > after]

    def summary(self) -> list[dict[str, Any]]:
        """Each session's id, number of records kept and newest sequence number, newest first."""
        with self._lock:
            items = list(self._sessions.items())
        return [
            {"id": name, "records": len(records), "last": records[-1][0]}
            for name, records in reversed(items)
            if records
        ]


class JsonlTail:
    """Follow a JSONL selection log into ``live`` (records only; reread if shrunk or replaced)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        live: LiveSessions,
        *,
        session: str = WATCH_SESSION,
        chunk: int = 4 * 1024 * 1024,
        max_line: int = 16 * 1024 * 1024,
    ) -> None:
        self.path, self.live, self.session = Path(path), live, session
        self.chunk, self.max_line = chunk, max_line
        self._lock = threading.Lock()
        self._file: tuple[int, int] | None = None  # (device, inode) being followed
        self._offset, self._partial, self._skipping = 0, b"", False  # skipping a too long line

    def poll(self) -> int:
        """Read what was appended since the last call; the number of records added."""
        with self._lock:
            try:
                with self.path.open("rb") as handle:
                    self._start(os.fstat(handle.fileno()), handle)
                    handle.seek(self._offset)
                    data = handle.read(self.chunk)
            except OSError:
                return 0
            self._offset += len(data)
            return self._lines(data)

    def _start(self, stat: os.stat_result, handle: Any) -> None:
        """Begin (again) when the file is new, replaced or shorter than what was read."""
        ident = (stat.st_dev, stat.st_ino)
        if ident == self._file and stat.st_size >= self._offset:
            return
        self._file, self._partial, self._skipping = ident, b"", False
        self._offset = max(0, stat.st_size - self.live.max_bytes)
        if self._offset:  # start at the first whole line of the tail
            handle.seek(self._offset - 1)
            self._skipping = handle.read(1) != b"\n"

    def _lines(self, data: bytes) -> int:
        *lines, rest = (self._partial + data).split(b"\n")
        if self._skipping and lines:  # the end of a line longer than max_line
            lines, self._skipping = lines[1:], False
        added = 0
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("candidates"), list):
                self.live.add(self.session, record)
                added += 1
        if len(rest) > self.max_line:
            rest, self._skipping = b"", True
        self._partial = b"" if self._skipping else rest
        return added


class WatchedLog:
    """``rest``, plus session :data:`WATCH_SESSION`: a followed JSONL log kept in this process."""

    def __init__(self, tail: JsonlTail, rest: SessionLog) -> None:
        self.tail, self.rest = tail, rest

    @property
    def max_clients(self) -> int:
        """Streams this process serves at once (``rest``'s)."""
        return self.rest.max_clients

    def add(self, session: str, record: dict[str, Any]) -> int:
        """Keep ``record`` as the newest of ``session``; its sequence number."""
        log = self.tail.live if session == WATCH_SESSION else self.rest
        return log.add(session, record)

    def since(self, session: str, after: int) -> list[tuple[int, str]]:
        """The kept records of ``session`` numbered above ``after`` (the log read first)."""
        if session != WATCH_SESSION:
            return self.rest.since(session, after)
        self.tail.poll()
        return self.tail.live.since(session, after)

    def summary(self) -> list[dict[str, Any]]:
        """The followed log's session (read first), then ``rest``'s sessions, newest first."""
        self.tail.poll()
        others = [s for s in self.rest.summary() if s["id"] != WATCH_SESSION]
        return [*self.tail.live.summary(), *others]

    def open_stream(self) -> bool:
        """Count one more stream on ``rest``, unless it is full (``False``)."""
        return self.rest.open_stream()

    def close_stream(self) -> None:
        """Count one stream fewer on ``rest``."""
        self.rest.close_stream()


async def event_stream(live: SessionLog, session: str, after: int) -> AsyncIterator[bytes]:
    """``session``'s records above ``after``, then each new one, as server-sent events.

    Where numbers went back (a restarted service: ``after`` is beyond its newest record), the
    session is sent from its start (:meth:`SessionLog.since`).
    """
    yield b"retry: 1000\n\n"
    quiet = 0.0
    while True:
        fresh = await anyio.to_thread.run_sync(live.since, session, after)
        for seq, data in fresh:
            yield f"id: {seq}\nevent: selection\ndata: {data}\n\n".encode()
            after = seq
        quiet = 0.0 if fresh else quiet + POLL_SECONDS
        if quiet >= KEEPALIVE_SECONDS:
            quiet = 0.0
            yield b": keep-alive\n\n"
        await anyio.sleep(POLL_SECONDS)
