"""LangChain's ByteStore suites (sync and async) on RedisByteStore, against a real Redis.

Needs ``PACMS_TEST_REDIS_URL`` (``.ci/run`` starts a throwaway server and sets it) and the
``redis`` extra. Each test gets a store under a prefix of its own, removed afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from langchain_tests.integration_tests import BaseStoreAsyncTests, BaseStoreSyncTests
from standard_subjects import THREE_VALUES

pytest.importorskip("redis", reason='needs the "redis" extra (pip install redis)')
REDIS_URL = os.environ.get("PACMS_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    REDIS_URL is None,
    reason="PACMS_TEST_REDIS_URL is not set (.ci/run starts a Redis server and sets it)",
)

from langchain_pacms.embeddings.redis_store import RedisByteStore  # noqa: E402


def fresh_store(**options: object) -> RedisByteStore:
    assert REDIS_URL is not None
    return RedisByteStore(REDIS_URL, prefix=f"pacms-test:{uuid.uuid4().hex}:", **options)


def wipe(store: RedisByteStore) -> None:
    store.mdelete(list(store.yield_keys()))
    store.close()


@pytest.fixture
def redis_store() -> Iterator[RedisByteStore]:
    store = fresh_store()
    yield store
    wipe(store)


class TestRedisByteStore(BaseStoreSyncTests[bytes]):
    @pytest.fixture
    def kv_store(self, redis_store: RedisByteStore) -> RedisByteStore:
        return redis_store

    @pytest.fixture
    def three_values(self) -> tuple[bytes, bytes, bytes]:
        return THREE_VALUES


class TestRedisByteStoreAsync(BaseStoreAsyncTests[bytes]):
    @pytest.fixture
    async def kv_store(self) -> AsyncIterator[RedisByteStore]:
        store = fresh_store()
        yield store
        wipe(store)

    @pytest.fixture
    def three_values(self) -> tuple[bytes, bytes, bytes]:
        return THREE_VALUES


def test_a_second_store_on_the_same_prefix_sees_the_values(redis_store: RedisByteStore) -> None:
    redis_store.mset([("foo", THREE_VALUES[0]), ("a/b", THREE_VALUES[2])])
    other = RedisByteStore(redis_store.url, prefix=redis_store.prefix)
    assert other.mget(["foo", "a/b", "zz"]) == [THREE_VALUES[0], THREE_VALUES[2], None]
    assert sorted(other.yield_keys()) == ["a/b", "foo"]
    other.close()


def test_keys_are_listed_literally_and_only_under_the_prefix(redis_store: RedisByteStore) -> None:
    neighbour = RedisByteStore(redis_store.url, prefix=redis_store.prefix[:-1] + "x:")
    neighbour.mset([("k*", b"0")])
    redis_store.mset([("k*", b"1"), ("k?", b"2"), ("k[1]", b"3"), ("kz", b"4"), ("é/k", b"5")])
    try:
        assert sorted(redis_store.yield_keys(prefix="k*")) == ["k*"]
        assert sorted(redis_store.yield_keys(prefix="k[")) == ["k[1]"]
        assert sorted(redis_store.yield_keys()) == ["k*", "k?", "k[1]", "kz", "é/k"]
        assert redis_store.mget(["é/k"]) == [b"5"]
    finally:
        wipe(neighbour)


def test_values_expire_after_the_ttl() -> None:
    store = fresh_store(ttl_seconds=100)
    try:
        store.mset([("a", b"1")])
        ttl = store.client.ttl(store.prefix + "a")
        assert 0 < ttl <= 100
    finally:
        wipe(store)


def test_the_url_password_is_not_shown() -> None:
    store = RedisByteStore("redis://user:s3cret@127.0.0.1:1/0")
    assert "s3cret" not in repr(store) and "user:***@127.0.0.1:1" in repr(store)
    with pytest.raises(ValueError, match=r"redis://, rediss:// or unix://.*\*\*\*"):
        RedisByteStore("http://user:s3cret@example.org")


def test_local_values_answer_without_redis_until_deleted() -> None:
    store = fresh_store(local_bytes=10_000)
    other = RedisByteStore(store.url, prefix=store.prefix)  # another process, in effect
    try:
        other.mset([("seen", b"v1")])
        assert store.mget(["seen", "never"]) == [b"v1", None]
        other.mdelete(["seen"])  # not seen by the value held locally: keys must not change
        assert store.mget(["seen"]) == [b"v1"]
        store.mset([("mine", b"v2")])
        assert store.mget(["mine"]) == [b"v2"] == other.mget(["mine"])
        store.mdelete(["mine"])  # this store's own delete forgets what it holds
        assert store.mget(["seen", "mine"]) == [None, None]
    finally:
        other.close()
        wipe(store)


def test_local_values_stay_within_their_bytes() -> None:
    store = fresh_store(local_bytes=3_000)
    try:
        store.mset([(f"k{i}", bytes(1000)) for i in range(10)])
        assert store.local is not None and 0 < store.local.nbytes <= 3_000
        assert store.mget([f"k{i}" for i in range(10)]) == [bytes(1000)] * 10  # Redis has all
    finally:
        wipe(store)
