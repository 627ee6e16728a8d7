"""Live mode past one process: ``pacms serve --workers 2 --cache-url redis://...``.

Two worker processes share one Redis: selections naming a session are posted through a
kept-alive connection to each worker in turn, and one event stream (on whichever worker its
connection lands) sees every one of them, in the order they were served, then each new one; a
reconnect resumes after its ``Last-Event-ID`` on either worker; both workers list the same
sessions; a session keeps at most 64 records. Needs ``PACMS_TEST_REDIS_URL`` (``.ci/run``
starts a throwaway Redis and sets it), the ``server`` and ``redis`` extras.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
pytest.importorskip("redis", reason='needs the "redis" extra (pip install redis)')
import httpx
import redis
from pacms_server import serving
from test_serve_workers_shared_cache import one_connection_per_worker
from test_server_live import events

from langchain_pacms.server.live import MAX_RECORDS
from langchain_pacms.server.live_redis import LIVE_PREFIX

REDIS_URL = os.environ.get("PACMS_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    REDIS_URL is None,
    reason="PACMS_TEST_REDIS_URL is not set (.ci/run starts a Redis server and sets it)",
)
DB = 5  # a database of its own on the test server
JSON = {"content-type": "application/json"}


def shared_url() -> str:
    return urlunsplit(urlsplit(str(REDIS_URL))._replace(path=f"/{DB}"))


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    with serving("--workers", "2", "--cache-url", shared_url()) as url:
        yield url


@pytest.fixture
def session() -> Iterator[str]:
    """A session id of this test's own; its records are removed from Redis afterwards."""
    name = f"shared-{uuid.uuid4().hex[:12]}"
    yield name
    client = redis.Redis.from_url(shared_url())
    client.delete(f"{LIVE_PREFIX}records:{name}")
    client.zrem(f"{LIVE_PREFIX}order", name)
    client.zrem(f"{LIVE_PREFIX}touched", name)
    client.hdel(f"{LIVE_PREFIX}bytes", name)
    client.close()


def body(turn: int) -> dict[str, Any]:
    return {
        "candidates": [
            {"id": "s", "text": "You are terse.", "kind": "system", "mandatory": True},
            {"id": "a", "text": "The staging database listens on port 6543."},
            {"id": "b", "text": f"Turn {turn}: lunch was great today."},
        ],
        "query": f"turn {turn}: which port does staging use?",
        "budget_tokens": 12 + turn % 5,
    }


def post_turns(
    clients: list[httpx.Client], session: str, turns: range
) -> dict[int, tuple[int, list[str]]]:
    """Post each turn through the workers in turn; each turn's worker and kept ids."""
    served = {}
    for turn in turns:
        client = clients[turn % len(clients)]
        answer = client.post(
            "/select", json=body(turn), headers={**JSON, "X-Pacms-Session": session}
        )
        assert answer.status_code == 200, answer.text
        served[turn] = (client.get("/healthz").json()["process"], answer.json()["kept_ids"])
    return served


def turn_of(event: dict[str, Any]) -> int:
    return int(event["data"]["query"].split(":")[0].removeprefix("turn "))


def test_one_stream_sees_what_every_worker_served(service: str, session: str) -> None:
    workers = one_connection_per_worker(service)
    clients = list(workers.values())
    try:
        assert all(c.get("/healthz").json()["live_sessions"] == "RedisSessions" for c in clients)
        served = post_turns(clients, session, range(30))
        assert {pid for pid, _ in served.values()} == set(workers)  # both workers served some

        stream = events(f"{service}/sessions/{session}/events", 40)
        replayed = [next(stream) for _ in range(30)]
        assert [turn_of(e) for e in replayed] == list(range(30))  # all of them, in order
        ids = [e["id"] for e in replayed]
        assert ids == sorted(set(ids))
        for event in replayed:
            kept = [v["id"] for v in event["data"]["candidates"] if v["kept"]]
            assert kept == served[turn_of(event)][1]

        # then each new selection, whichever worker serves it
        post_turns(clients, session, range(30, 40))
        live = [next(stream) for _ in range(10)]
        assert [turn_of(e) for e in live] == list(range(30, 40))
        assert live[0]["id"] > ids[-1]
        stream.close()

        # a reconnect resumes after its last event, on whichever worker it lands
        for _ in range(4):
            resumed = events(
                f"{service}/sessions/{session}/events", 1, {"Last-Event-ID": str(live[4]["id"])}
            )
            assert [turn_of(e) for e in resumed] == [35]
        listed = [
            next(s for s in c.get("/sessions").json()["sessions"] if s["id"] == session)
            for c in clients
        ]
        assert listed == [{"id": session, "records": 40, "last": live[-1]["id"]}] * 2
    finally:
        for client in clients:
            client.close()


def test_a_shared_session_keeps_its_newest_records_only(service: str, session: str) -> None:
    clients = list(one_connection_per_worker(service).values())
    turns = MAX_RECORDS + 10
    try:
        post_turns(clients, session, range(turns))
        stream = events(f"{service}/sessions/{session}/events", MAX_RECORDS)
        kept = [turn_of(e) for e in stream]
        assert kept == list(range(10, turns))  # the oldest ten went, the rest in order
        for client in clients:
            listed = client.get("/sessions").json()["sessions"]
            assert next(s for s in listed if s["id"] == session)["records"] == MAX_RECORDS
    finally:
        for client in clients:
            client.close()
