"""RemoteSelector.aselect keeps a connection pool per event loop and lets it go with the loop:
``asyncio.run`` after ``asyncio.run`` holds no socket and no loop; ``aclose`` closes the running
loop's pool, ``close`` every pool it can (on its own loop, which may run in another thread)."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
import httpx
from pacms_server import running

from langchain_pacms.remote import RemoteSelector
from langchain_pacms.server import create_app

POOL = ["a note about port 6543", "lunch"]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running(create_app()) as base:
        yield base


def only_pool(remote: RemoteSelector) -> httpx.AsyncClient:
    """The selector's one async pool (not what holds it: that must go with the selector's hold)."""
    ((client, _),) = remote._aclients.values()
    return client


def open_files() -> int:
    return len(os.listdir(f"/proc/{os.getpid()}/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_one_event_loop_after_another_holds_no_socket_and_no_loop(url: str) -> None:
    remote = RemoteSelector(url, timeout=5)
    asyncio.run(remote.aselect(POOL, "port 0", 50))  # the first call's imports and the like
    before = open_files()
    for i in range(60):
        sel = asyncio.run(remote.aselect(POOL, f"port {i}", 50))
        assert not sel.fell_back, sel.error
        assert not remote._aclients  # the loop's pool went with it
    gc.collect()
    assert open_files() <= before + 2  # was one socket per loop


async def test_aclose_closes_this_loops_pool_and_a_later_call_opens_one(url: str) -> None:
    remote = RemoteSelector(url, timeout=5)
    assert not (await remote.aselect(POOL, "port", 50)).fell_back
    client = only_pool(remote)
    await remote.aclose()
    assert client.is_closed and not remote._aclients
    assert not (await remote.aselect(POOL, "port", 50)).fell_back
    assert len(remote._aclients) == 1
    await remote.aclose()


def test_close_closes_the_pool_of_a_loop_running_in_another_thread(url: str) -> None:
    remote = RemoteSelector(url, timeout=5)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        sel = asyncio.run_coroutine_threadsafe(remote.aselect(POOL, "port", 50), loop).result(10)
        assert not sel.fell_back
        client = only_pool(remote)
        remote.close()
        deadline = time.monotonic() + 5
        while not client.is_closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.is_closed and not remote._aclients
        again = asyncio.run_coroutine_threadsafe(remote.aselect(POOL, "port", 50), loop)
        assert not again.result(10).fell_back  # a new pool on use
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    assert not remote._aclients


def test_a_selector_let_go_leaves_its_pools_to_close_on_their_loops(url: str) -> None:
    loop = asyncio.new_event_loop()
    try:
        remote = RemoteSelector(url, timeout=5)
        assert not loop.run_until_complete(remote.aselect(POOL, "port", 50)).fell_back
        client = only_pool(remote)
        del remote
        gc.collect()
        loop.run_until_complete(asyncio.sleep(0.05))
        assert client.is_closed
    finally:
        loop.close()


def test_loops_closed_without_shutting_down_leave_nothing_held(url: str) -> None:
    # before the fix: new_event_loop() / run_until_complete(aselect) / close() kept each loop
    # and its pool's socket for the selector's life (300 loops: 300 fds)
    remote = RemoteSelector(url, timeout=5)
    gc.collect()
    before = open_files()
    for i in range(40):
        loop = asyncio.new_event_loop()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # the socket closes as collected
            assert not loop.run_until_complete(remote.aselect(POOL, f"port {i}", 50)).fell_back
            loop.close()
            gc.collect()
        assert len(remote._aclients) <= 1  # only the newest closed loop's, until the next call
    assert open_files() <= before + 5  # not one a loop (other tests' sockets may still close)
