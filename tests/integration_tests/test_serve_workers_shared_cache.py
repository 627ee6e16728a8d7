"""``pacms serve --workers 2 --cache-url``: two worker processes on one port share one cache.

A pool embedded through one worker is answered by the other from Redis: its cache counts
hits, not misses, for every text, and the vectors are in Redis under the store's prefix. Needs
``PACMS_TEST_REDIS_URL`` (``.ci/run`` starts a throwaway Redis and sets it), the ``server`` and
the ``redis`` extras.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
pytest.importorskip("redis", reason='needs the "redis" extra (pip install redis)')
import httpx
from pacms_server import serving

from langchain_pacms.embeddings.redis_store import DEFAULT_PREFIX, RedisByteStore

REDIS_URL = os.environ.get("PACMS_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    REDIS_URL is None,
    reason="PACMS_TEST_REDIS_URL is not set (.ci/run starts a Redis server and sets it)",
)
JSON = {"content-type": "application/json"}


@pytest.fixture
def service() -> Iterator[str]:
    with serving("--workers", "2", "--cache-url", str(REDIS_URL)) as url:
        yield url


def one_connection_per_worker(url: str) -> dict[int, httpx.Client]:
    """A kept-alive connection to each of the two workers (new connections land on either)."""
    clients: dict[int, httpx.Client] = {}
    deadline = time.monotonic() + 20
    while len(clients) < 2:
        assert time.monotonic() < deadline, "every new connection reached the same worker"
        client = httpx.Client(base_url=url, timeout=10)
        pid = client.get("/healthz").json()["process"]
        if pid in clients:
            client.close()
        else:
            clients[pid] = client
    return clients


def cache_counts(client: httpx.Client) -> tuple[int, int]:
    stats = client.get("/healthz").json()["embedding_cache"]
    return stats["hits"], stats["misses"]


def test_a_pool_embedded_by_one_worker_is_a_cache_hit_for_the_other(service: str) -> None:
    clients = one_connection_per_worker(service)
    (first, a), (second, b) = clients.items()
    assert first != second
    tag = uuid.uuid4().hex  # texts no earlier run has cached
    texts = [f"note {i} about the {tag} deployment of service {i * 7}" for i in range(12)]
    body = {
        "candidates": [{"id": f"n{i}", "text": t} for i, t in enumerate(texts)],
        "query": f"what happened to the {tag} deployment of service 14?",
        "budget_tokens": 60,
    }
    try:
        a_hits, a_misses = cache_counts(a)
        b_hits, b_misses = cache_counts(b)
        answer_a = a.post("/select", json=body, headers=JSON)
        assert answer_a.status_code == 200, answer_a.text
        assert cache_counts(a)[1] - a_misses == len(texts) + 1  # every text and the query
        answer_b = b.post("/select", json=body, headers=JSON)
        assert answer_b.status_code == 200, answer_b.text
        assert answer_b.json()["kept_ids"] == answer_a.json()["kept_ids"] != []
        hits, misses = cache_counts(b)
        assert misses == b_misses  # nothing embedded again by the second worker
        assert hits - b_hits == len(texts) + 1
        assert cache_counts(a)[0] == a_hits  # and the first worker saw no hit of its own

        store = RedisByteStore(str(REDIS_URL), prefix=DEFAULT_PREFIX)
        digests = {hashlib.sha256(t.encode()).hexdigest() for t in texts}
        ours = [k for k in store.yield_keys() if k.rpartition("/document/")[2] in digests]
        assert len(ours) == len(texts)  # one vector of each text, in Redis
        store.mdelete(ours)
        store.close()
    finally:
        for client in clients.values():
            client.close()
