"""A hung Redis (it accepts connections and never answers) costs ``pacms serve --cache-url`` at
most one short timeout, then nothing for a while: selections go on, without the shared cache
and the live records, well within ``RemoteSelector``'s default 2 s.

The hung Redis is a loopback socket that accepts and never reads; no redis-server is needed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
pytest.importorskip("redis", reason='needs the "redis" extra (pip install redis)')
import redis
from pacms_server import running

from langchain_pacms.remote import RemoteSelector
from langchain_pacms.server.app import CONFIG_ENV, app_from_env
from langchain_pacms.server.best_effort import SOCKET_SECONDS, BestEffortStore, Circuit
from langchain_pacms.server.live_redis import RedisSessions

T = TypeVar("T")


@pytest.fixture
def hung() -> Iterator[str]:
    """The URL of a "Redis" that accepts every connection and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        stop.set()
        thread.join(5)
        for sock in [listener, *held]:
            sock.close()


def timed(work: Callable[[], T]) -> tuple[T, float]:
    started = time.monotonic()
    result = work()
    return result, time.monotonic() - started


def test_after_one_timeout_the_cache_and_the_sessions_leave_redis_alone(hung: str) -> None:
    circuit = Circuit(cool_down=1.0)
    store = BestEffortStore(hung, circuit=circuit, local_bytes=1 << 20)
    sessions = RedisSessions(hung, circuit=circuit)
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):  # the embedding cache logs it and embeds
        store.mget(["a"])
    assert time.monotonic() - started < SOCKET_SECONDS + 0.5
    assert circuit.open
    for work in (
        lambda: store.mget(["a"]),
        lambda: store.mset([("a", b"vector")]),
        lambda: sessions.add("s", {"n": 1}),
        lambda: sessions.since("s", 0),
        sessions.summary,
    ):
        _, seconds = timed(work)
        assert seconds < 0.05  # left alone: no wait at all
    assert store.mget(["a", "b"]) == [b"vector", None]  # what this process holds still counts
    assert sessions.add("s", {"n": 2}) == 0  # not kept
    time.sleep(1.1)  # the cool-down is over: Redis is tried again, once
    assert not circuit.open
    added, seconds = timed(lambda: sessions.add("s", {"n": 3}))
    assert added == 0 and SOCKET_SECONDS * 0.8 < seconds < SOCKET_SECONDS + 0.5
    assert circuit.open


def test_a_hung_redis_holds_no_selection(hung: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, json.dumps({"cache_url": hung}))
    with running(app_from_env()) as url:
        remote = RemoteSelector(url, session="agent-1")  # the default timeout: 2 s
        for i in range(4):
            texts = [f"new text {i} {j} about the port" for j in range(5)]  # never embedded
            sel, seconds = timed(lambda texts=texts: remote.select(texts, "port", budget=30))
            assert not sel.fell_back, sel.error
            assert seconds < SOCKET_SECONDS + 1.0  # at most one short wait on Redis
