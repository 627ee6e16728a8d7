"""RemoteSelector and kept-alive connections the service closes (``pacms serve``: after 5 s idle).

A request sent on a pooled connection just as the service closes it is dropped. The client lets
idle connections go well before the service would close them (``KEEPALIVE_EXPIRY``), and a
request dropped on a kept-alive connection is sent once more, on a new one (a selection is
idempotent): no fallback while the service is up. A fake service on loopback drops the second
request of each connection, or counts the connections each request came on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from langchain_pacms import Candidate
from langchain_pacms.cli.serve import KEEP_ALIVE_SECONDS
from langchain_pacms.remote import RemoteSelector
from langchain_pacms.remote_wire import KEEPALIVE_EXPIRY

POOL = [
    Candidate("You are terse.", "s", kind="system", mandatory=True),
    Candidate("The staging database listens on port 6543.", "a"),
    Candidate("Which port?", "q", mandatory=True),
]


def answer(req: dict[str, Any]) -> bytes:
    """A well-formed ``/select_debug`` answer keeping every candidate (the budget fits them)."""
    ids = [c["id"] for c in req["candidates"]]
    return json.dumps(
        {
            "kept_ids": ids,
            "pick_order": ids,
            "strategy": "pacms",
            "fell_back": False,
            "error": None,
            "timings": {"total": 0.001},
            "candidates": [{"id": i, "relevance": 0.5, "gain": 0.1} for i in ids],
            "info": {},
        }
    ).encode()


class FakeService(ThreadingHTTPServer):
    """Keeps connections alive; notes (connection, request on it) for each request."""

    daemon_threads = True

    def __init__(self, drop_second: bool) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.drop_second = drop_second
        self.connections = itertools.count()
        self.seen: list[tuple[int, int]] = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: FakeService

    def setup(self) -> None:
        super().setup()
        self.number, self.served = next(self.server.connections), 0

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append((self.number, self.served))
        self.served += 1
        if self.server.drop_second and self.served == 2:
            # as a service closing the idle connection when the request arrives: no answer
            self.close_connection = True
            return
        body = answer(json.loads(raw))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeService]:
    server = FakeService(drop_second=request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url_of(server: FakeService) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def select_twice(remote: RemoteSelector, use_async: bool, pause: float) -> list[Any]:
    """Two selections ``pause`` seconds apart, sync or in one event loop."""
    if not use_async:
        first = remote.select(POOL, "Which port?", 100)
        time.sleep(pause)
        return [first, remote.select(POOL, "Which port?", 100)]

    async def both() -> list[Any]:
        first = await remote.aselect(POOL, "Which port?", 100)
        await asyncio.sleep(pause)
        return [first, await remote.aselect(POOL, "Which port?", 100)]

    return asyncio.run(both())


@pytest.mark.parametrize("fake", [True], indirect=True)
@pytest.mark.parametrize("use_async", [False, True])
def test_a_request_dropped_on_a_kept_alive_connection_is_sent_again(
    fake: FakeService, use_async: bool
) -> None:
    remote = RemoteSelector(url_of(fake), timeout=5, strict=True)  # strict: a failure raises
    selections = select_twice(remote, use_async, pause=0)
    assert [s.fell_back for s in selections] == [False, False]
    assert selections[1].kept_ids == ("s", "a", "q")
    # the second went out on the kept-alive connection, was dropped, then came on a new one
    assert fake.seen == [(0, 0), (0, 1), (1, 0)]
    remote.close()


@pytest.mark.parametrize("fake", [False], indirect=True)
@pytest.mark.parametrize("use_async", [False, True])
def test_an_idle_connection_is_let_go_before_the_service_would_close_it(
    fake: FakeService, use_async: bool
) -> None:
    assert KEEPALIVE_EXPIRY <= KEEP_ALIVE_SECONDS / 2  # well before pacms serve closes it
    remote = RemoteSelector(url_of(fake), timeout=5, strict=True)
    selections = select_twice(remote, use_async, pause=KEEPALIVE_EXPIRY + 0.5)
    assert [s.fell_back for s in selections] == [False, False]
    assert fake.seen == [(0, 0), (1, 0)]  # a new connection, not the idle one
    remote.close()


@pytest.mark.parametrize("fake", [False], indirect=True)
def test_a_connection_in_use_is_kept_alive(fake: FakeService) -> None:
    remote = RemoteSelector(url_of(fake), timeout=5, strict=True)
    select_twice(remote, use_async=False, pause=0)
    assert fake.seen == [(0, 0), (0, 1)]
    remote.close()
