"""A LangChain ``ByteStore`` on Redis (the ``redis`` extra), so processes share one cache."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from langchain_pacms.errors import missing_extra

try:
    import redis
    import redis.asyncio as aredis
except ImportError as err:  # pragma: no cover - exercised by a test that hides redis
    raise missing_extra("RedisByteStore", 'the "redis" extra (the redis client)', "redis") from err

from langchain_core.stores import ByteStore

from langchain_pacms._lru import LruMemo

__all__ = ["DEFAULT_PREFIX", "REDIS_SCHEMES", "RedisByteStore"]

DEFAULT_PREFIX = "pacms:"  # what every key of a RedisByteStore starts with, unless told otherwise
REDIS_SCHEMES = ("redis", "rediss", "unix")  # TCP, TLS, a Unix socket
_GLOB = re.compile(r"([*?\[\]\\])")
_SCAN_COUNT = 1000  # keys Redis looks at per SCAN round trip
LOCAL_ENTRY_OVERHEAD = 120  # bytes one value held in this process costs beyond its length


def _weigh(key: str, value: bytes) -> int:
    return len(key) + len(value) + LOCAL_ENTRY_OVERHEAD


def _shown(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for messages and repr)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


class RedisByteStore(ByteStore):
    """Bytes values in Redis under a key ``prefix``, each expiring after ``ttl_seconds`` if set.

    ``local_bytes`` also keeps that many bytes of values in the process (LRU) and answers from
    them: only for values that never change. ``client_options`` go to ``Redis.from_url``.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl_seconds: int | None = None,
        local_bytes: int = 0,
        **client_options: Any,
    ) -> None:
        if urlsplit(url).scheme not in REDIS_SCHEMES:
            raise ValueError(
                f"cache URL: expected redis://, rediss:// or unix://, got {_shown(url)!r}"
            )
        if ttl_seconds is not None and (
            isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or ttl_seconds <= 0
        ):
            raise ValueError(f"ttl_seconds must be a positive int or None, got {ttl_seconds!r}")
        if isinstance(local_bytes, bool) or not isinstance(local_bytes, int) or local_bytes < 0:
            raise ValueError(f"local_bytes must be an int >= 0, got {local_bytes!r}")
        self.url, self.prefix, self.ttl_seconds = url, prefix, ttl_seconds
        self.local: LruMemo[str, bytes] | None = (
            LruMemo(max_bytes=local_bytes, weigh=_weigh) if local_bytes else None
        )
        self._options = {**client_options, "decode_responses": False}
        self.client: redis.Redis = redis.Redis.from_url(url, **self._options)
        self._async: tuple[asyncio.AbstractEventLoop, aredis.Redis] | None = None

    def __repr__(self) -> str:
        return f"RedisByteStore({_shown(self.url)!r}, prefix={self.prefix!r})"

    def _full(self, keys: Sequence[str]) -> list[str]:
        return [self.prefix + key for key in keys]

    def _held(self, keys: Sequence[str]) -> tuple[list[bytes | None], list[str]]:
        """The values of ``keys`` held in this process, and the keys to ask Redis for."""
        if self.local is None:
            return [None] * len(keys), list(keys)
        found = self.local.get_many(keys)
        return found, [k for k, v in zip(keys, found) if v is None]

    def _merged(
        self, found: list[bytes | None], asked: list[str], answers: Sequence[bytes | None]
    ) -> list[bytes | None]:
        """``found`` with its gaps filled, in order, by Redis's ``answers`` for ``asked``."""
        if self.local is not None:
            self.local.put_many((k, v) for k, v in zip(asked, answers) if v is not None)
        fill = iter(answers)
        return [next(fill) if v is None else v for v in found]

    def _pattern(self, prefix: str | None) -> str:
        """A SCAN ``MATCH`` pattern for this store's keys starting with ``prefix``."""
        return _GLOB.sub(r"\\\1", self.prefix + (prefix or "")) + "*"

    def _key(self, raw: bytes) -> str:
        return raw.decode("utf-8")[len(self.prefix) :]

    def _writes(self, pipe: Any, pairs: Sequence[tuple[str, bytes]]) -> Any:
        """Queue ``pairs`` on a pipeline (sync or async) and the local values; return it."""
        if self.local is not None:
            self.local.put_many(pairs)
        for key, value in pairs:
            pipe.set(self.prefix + key, value, ex=self.ttl_seconds)
        return pipe

    def _forget(self) -> None:
        """Before a delete: forget the values held in this process (deletes are rare)."""
        if self.local is not None:
            self.local.clear()

    def _aclient(self) -> aredis.Redis:
        """The async client of the running event loop (one per loop: its connections are)."""
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, aredis.Redis.from_url(self.url, **self._options))
        return self._async[1]

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` (``None`` for a missing key), in one round trip at most."""
        found, asked = self._held(keys)
        answers = self.client.mget(self._full(asked)) if asked else []
        return self._merged(found, asked, cast(list[bytes | None], answers))

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """Set each key to its value, in one round trip."""
        if key_value_pairs:
            self._writes(self.client.pipeline(transaction=False), key_value_pairs).execute()

    def mdelete(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (missing ones are ignored)."""
        if keys:
            self._forget()
            self.client.delete(*self._full(keys))

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        """This store's keys (without its prefix), those starting with ``prefix`` if given."""
        for raw in self.client.scan_iter(match=self._pattern(prefix), count=_SCAN_COUNT):
            yield self._key(raw)

    async def amget(self, keys: Sequence[str]) -> list[bytes | None]:
        """Async twin of :meth:`mget`."""
        found, asked = self._held(keys)
        answers = await self._aclient().mget(self._full(asked)) if asked else []
        return self._merged(found, asked, cast(list[bytes | None], answers))

    async def amset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """Async twin of :meth:`mset`."""
        if key_value_pairs:
            pipe = self._aclient().pipeline(transaction=False)
            await self._writes(pipe, key_value_pairs).execute()

    async def amdelete(self, keys: Sequence[str]) -> None:
        """Async twin of :meth:`mdelete`."""
        if keys:
            self._forget()
            await self._aclient().delete(*self._full(keys))

    async def ayield_keys(self, *, prefix: str | None = None) -> AsyncIterator[str]:
        """Async twin of :meth:`yield_keys`."""
        async for raw in self._aclient().scan_iter(match=self._pattern(prefix), count=_SCAN_COUNT):
            yield self._key(raw)

    def close(self) -> None:
        """Close the sync client's connections (the store reconnects if used again)."""
        self.client.close()
