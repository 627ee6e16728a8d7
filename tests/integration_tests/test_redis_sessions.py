"""Live sessions in Redis (``RedisSessions``) against a real redis-server.

They keep exactly what the in-process ``LiveSessions`` keeps for any sequence of adds (a
hypothesis property), number records in the order they are kept when several processes add at
once, expire after their TTL without leaving stale counts, and survive a Redis that is down.
Needs ``PACMS_TEST_REDIS_URL`` (``.ci/run`` starts a throwaway Redis and sets it), the
``server`` and ``redis`` extras. Each test works under a key prefix of its own, removed after.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="needs the 'server' extra")
pytest.importorskip("redis", reason='needs the "redis" extra (pip install redis)')
from pacms_server import free_port

from langchain_pacms.server.app import CONFIG_ENV, app_from_env
from langchain_pacms.server.live import (
    WATCH_SESSION,
    JsonlTail,
    LiveSessions,
    WatchedLog,
    record_json,
)
from langchain_pacms.server.live_redis import RedisSessions, deployment_prefix

REDIS_URL = os.environ.get("PACMS_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    REDIS_URL is None,
    reason="PACMS_TEST_REDIS_URL is not set (.ci/run starts a Redis server and sets it)",
)


def fresh(prefix: str | None = None, **bounds: int) -> RedisSessions:
    """A log under ``prefix`` (default: one of its own)."""
    assert REDIS_URL is not None
    return RedisSessions(
        REDIS_URL, prefix=prefix or f"pacms-test-live:{uuid.uuid4().hex}:", **bounds
    )


def keys_of(log: RedisSessions) -> list[bytes]:
    return list(log.client.scan_iter(match=log.prefix + "*"))


def wipe(log: RedisSessions) -> None:
    found = keys_of(log)
    if found:
        log.client.delete(*found)
    log.close()


@pytest.fixture
def make() -> Iterator[Callable[..., RedisSessions]]:
    """Builds logs (as :func:`fresh`), wiped after the test."""
    made: list[RedisSessions] = []

    def build(prefix: str | None = None, **bounds: int) -> RedisSessions:
        made.append(fresh(prefix, **bounds))
        return made[-1]

    yield build
    for log in made:
        wipe(log)


ADDS = st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(0, 400)), min_size=1, max_size=60)


@settings(max_examples=120, deadline=None)
@given(adds=ADDS, sessions=st.integers(1, 4), records=st.integers(1, 5), size=st.integers(1, 2000))
def test_it_keeps_what_the_in_process_log_keeps(
    adds: list[tuple[str, int]], sessions: int, records: int, size: int
) -> None:
    bounds = {"max_sessions": sessions, "max_records": records, "max_bytes": size}
    shared, local = fresh(**bounds), LiveSessions(**bounds, start=0)
    try:
        for n, (name, length) in enumerate(adds):
            record = {"n": n, "pad": "x" * length}
            assert shared.add(name, record) == local.add(name, record) == n + 1
            assert shared.summary() == local.summary()
            for listed in local.summary():
                assert shared.since(listed["id"], 0) == local.since(listed["id"], 0)
        newest = local.summary()[0]
        middle = newest["last"] - 1
        assert shared.since(newest["id"], middle) == local.since(newest["id"], middle)
    finally:
        wipe(shared)


def test_records_round_trip_and_resume_after_a_number(make) -> None:
    log = make()
    record = {"query": "où est la base ?", "candidates": [{"id": "a", "kept": True}]}
    first = log.add("s-1", record)
    second = log.add("s-1", {"n": 2})
    assert log.since("s-1", 0) == [(first, record_json(record)), (second, '{"n":2}')]
    assert log.since("s-1", first) == [(second, '{"n":2}')]
    assert log.since("s-1", second) == [] and log.since("nobody", 0) == []
    assert log.summary() == [{"id": "s-1", "records": 2, "last": second}]


def test_a_number_beyond_the_newest_replays_the_session_as_in_process(make) -> None:
    log, local = make(), LiveSessions(start=0)
    log.add("s", {"n": 1})
    seen = log.add("s", {"n": 2})  # a page's stream saw this one
    log.client.delete(*keys_of(log))  # Redis lost its data: the numbers start again
    assert log.since("s", seen) == []
    assert log.add("s", {"n": 3}) == local.add("s", {"n": 3}) == 1
    assert log.since("s", seen) == local.since("s", seen) == [(1, '{"n":3}')]
    assert log.add("s", {"n": 4}) == local.add("s", {"n": 4}) == 2  # the number the page saw
    assert log.since("s", seen) == local.since("s", seen) == []
    assert log.since("s", 1) == local.since("s", 1) == [(2, '{"n":4}')]


def test_writers_in_several_processes_are_numbered_in_the_order_kept(make) -> None:
    reader = make(max_records=1000)
    writers = [make(reader.prefix, max_records=1000) for _ in range(4)]  # as four workers
    per_writer = 60

    def write(w: int) -> None:
        for n in range(per_writer):
            writers[w].add("shared", {"w": w, "n": n})

    threads = [threading.Thread(target=write, args=(w,)) for w in range(len(writers))]
    for thread in threads:
        thread.start()
    seen: list[tuple[int, str]] = []
    deadline = time.monotonic() + 30
    while len(seen) < per_writer * len(writers):  # follow as a stream does, from the last number
        assert time.monotonic() < deadline
        seen += reader.since("shared", seen[-1][0] if seen else 0)
    for thread in threads:
        thread.join()
    numbers = [seq for seq, _ in seen]
    assert numbers == list(range(1, per_writer * len(writers) + 1))  # none missed, none twice
    assert reader.since("shared", 0) == seen


def test_it_expires_and_forgets_what_expired(make) -> None:
    log = make(ttl_seconds=2, max_bytes=100)
    log.add("old", {"pad": "x" * 70})
    assert all(log.client.ttl(k) > 0 for k in keys_of(log) if not k.endswith(b":seq"))
    assert log.client.ttl(log.prefix + "seq") == -1  # numbers never repeat
    time.sleep(1.2)
    keep = log.add("keep", {})  # keeps the log's own keys alive past the old session
    time.sleep(1.2)
    assert [s["id"] for s in log.summary()] == ["keep"] and log.since("old", 0) == []
    # the next add forgets the expired session: nothing of it is left to count or list
    first = log.add("new", {})
    assert sorted(log.client.hkeys(log.prefix + "bytes")) == [b"keep", b"new"]
    for index in ("touched", "order"):
        assert sorted(log.client.zrange(log.prefix + index, 0, -1)) == [b"keep", b"new"]
    # and its bytes no longer count: records of 2 + 40 + 40 bytes all stay under 100
    later = [log.add("new", {"pad": c * 30}) for c in "yz"]
    assert [seq for seq, _ in log.since("new", 0)] == [first, *later]
    assert log.since("keep", 0) == [(keep, "{}")]


def test_a_followed_log_stays_in_its_process(make, tmp_path: Path) -> None:
    shared = make()
    path = tmp_path / "sel.jsonl"
    path.write_text('{"candidates": [], "query": "q"}\n')
    # two processes follow the same file over one shared log: each line is shown once by each
    logs = [WatchedLog(JsonlTail(path, LiveSessions()), shared) for _ in range(2)]
    shared.add("agent", {"n": 1})
    for log in logs:
        assert [(s["id"], s["records"]) for s in log.summary()] == [
            (WATCH_SESSION, 1),
            ("agent", 1),
        ]
        assert len(log.since(WATCH_SESSION, 0)) == 1
    assert shared.summary() == [{"id": "agent", "records": 1, "last": 1}]
    assert logs[0].max_clients == shared.max_clients


def test_the_stream_cap_is_per_process(make) -> None:
    one, other = make(max_clients=1), make(max_clients=1)
    assert one.open_stream() and not one.open_stream()
    assert other.open_stream()
    one.close_stream()
    assert one.open_stream()


def test_a_redis_that_is_down_costs_the_records_not_the_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = RedisSessions(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="langchain_pacms.server.live_redis"):
        assert log.add("s", {"n": 1}) == 0
        assert log.since("s", 0) == [] and log.summary() == []
        assert log.add("s", {"n": 2}) == 0
    warned = [r for r in caplog.records if "Redis failed" in r.getMessage()]
    assert len(warned) == 1  # one warning per streak of failures


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("http://127.0.0.1/0", {}, "expected redis://"),
        ("redis://127.0.0.1/0", {"max_bytes": 0}, "max_bytes must be a positive int"),
        ("redis://127.0.0.1/0", {"ttl_seconds": True}, "ttl_seconds must be a positive int"),
    ],
)
def test_bad_settings_are_refused(url: str, options: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RedisSessions(url, **options)


def test_a_deployment_prefix_is_slow_to_test_token_guesses_against() -> None:
    import hashlib

    token = "correct horse"
    digits = deployment_prefix(token).removeprefix("pacms-live:").removesuffix(":")
    assert len(digits) == 16 and int(digits, 16) >= 0
    assert digits != hashlib.sha256(token.encode()).hexdigest()[:16]  # not a plain fast hash
    salt = b"langchain-pacms live-session prefix"
    scrypt = hashlib.scrypt(token.encode(), salt=salt, n=2**14, r=8, p=1, dklen=8)
    assert digits == scrypt.hex()


def test_deployments_sharing_a_database_but_not_a_token_keep_their_sessions_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fastapi.testclient import TestClient

    tokens, named = [uuid.uuid4().hex for _ in range(2)], f"pacms-test-live:{uuid.uuid4().hex}:"
    prefixes = [deployment_prefix(tokens[0]), deployment_prefix(tokens[1]), named]
    assert len(set(prefixes)) == 3 and deployment_prefix(tokens[0]) == prefixes[0]

    def service(token: str, **more: str) -> TestClient:
        settings = {"cache_url": REDIS_URL, "token": token, **more}
        monkeypatch.setenv(CONFIG_ENV, json.dumps(settings))
        return TestClient(
            app_from_env(),
            base_url="http://127.0.0.1",
            headers={"Authorization": f"Bearer {token}"},
        )

    first, second = service(tokens[0]), service(tokens[1])
    third = service(tokens[1], live_prefix=named)  # an explicit prefix wins over the token's
    request: dict = {
        "candidates": [{"id": "a", "text": "port 6543"}],
        "query": "port",
        "budget_tokens": 9,
    }
    try:
        for client, session in ((first, "agent-1"), (third, "agent-2")):
            answer = client.post("/select", json=request, headers={"X-Pacms-Session": session})
            assert answer.status_code == 200, answer.text
        listed = [
            [s["id"] for s in c.get("/sessions").json()["sessions"]] for c in (first, second, third)
        ]
        assert listed == [["agent-1"], [], ["agent-2"]]
        client = RedisSessions(str(REDIS_URL), prefix=named).client
        assert any(client.scan_iter(match=f"{named}records:*"))
    finally:
        for prefix in prefixes:
            wipe(RedisSessions(str(REDIS_URL), prefix=prefix))
