"""uvicorn's ``h11`` protocol with a deadline and a size bound for each request's head."""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

__all__ = ["MAX_HEAD_BYTES", "HeaderTimeoutProtocol", "header_timeout_protocol"]

MAX_HEAD_BYTES = 16 * 1024
"""A request head's bound when uvicorn sets none (``h11_max_incomplete_event_size``): h11's."""


def header_timeout_protocol(seconds: float) -> Callable[..., HeaderTimeoutProtocol]:
    """The uvicorn ``http=`` setting (picklable) for a ``seconds`` :class:`HeaderTimeoutProtocol`.

    Example:
        >>> header_timeout_protocol(0)
        Traceback (most recent call last):
        ...
        ValueError: header_timeout must be a positive number, got 0
    """
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"header_timeout must be a positive number, got {seconds!r}")
    return functools.partial(HeaderTimeoutProtocol, header_timeout=float(seconds))


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's ``h11`` protocol, closing a connection whose request head is too slow.

    A request's line and headers are also bounded to uvicorn's ``h11_max_incomplete_event_size``
    however they arrive (larger: 400): h11 itself bounds only the part of a head it waits for,
    so a head that came whole in one read would pass at any size.
    """

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        header_timeout: float,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_timeout = header_timeout
        limit = config.h11_max_incomplete_event_size
        self.max_head_bytes = MAX_HEAD_BYTES if limit is None else limit
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the clock for the first request's head."""
        super().connection_made(transport)
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        """Parse ``data``; stop the clock if a request's head is now complete.

        While a head is awaited, h11 gets at most one byte more than :attr:`max_head_bytes` of
        it at a time: a longer head is incomplete at that size, which h11 refuses.
        """
        while data and self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            room = max(1, self.max_head_bytes + 1 - len(self.conn.trailing_data[0]))
            super().data_received(data[:room])
            data = data[room:]
        if data and not self.transport.is_closing():
            super().data_received(data)
        self._watch_head()

    def on_response_complete(self) -> None:
        """Finish the response; start the clock for the next request's head."""
        super().on_response_complete()
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the clock and let the connection go."""
        self._stop_head_timer()
        super().connection_lost(exc)

    def _watch_head(self) -> None:
        """Run the clock while a request head is awaited, from the moment it started awaiting."""
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            self._stop_head_timer()
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        """Close the connection; with 408 when part of a head has come."""
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.conn.trailing_data[0]:  # h11 cannot answer before a request: write it as is
            detail = f"request head not received within {self.header_timeout}s"
            body = json.dumps({"detail": detail}).encode()
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
            )
        self.conn.send(h11.ConnectionClosed())
        self.transport.close()
