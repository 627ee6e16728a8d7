"""Live sessions in Redis, shared by every worker and host that names it (``redis`` extra)."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from langchain_pacms.errors import missing_extra

try:
    import redis
except ImportError as err:  # pragma: no cover - exercised by a test that hides redis
    raise missing_extra("RedisSessions", 'the "redis" extra (the redis client)', "redis") from err

from langchain_pacms.embeddings.redis_store import REDIS_SCHEMES
from langchain_pacms.server.best_effort import Circuit, best_effort
from langchain_pacms.server.live import (
    MAX_BYTES,
    MAX_CLIENTS,
    MAX_RECORDS,
    MAX_SESSIONS,
    StreamCount,
    record_json,
)

__all__ = ["DEFAULT_TTL_SECONDS", "LIVE_PREFIX", "RedisSessions", "deployment_prefix"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

LIVE_PREFIX = "pacms-live:"
"""What every key of a :class:`RedisSessions` starts with (apart from the embedding cache's)."""
_PREFIX_SALT = b"langchain-pacms live-session prefix"


def deployment_prefix(token: str | None) -> str:
    """The key prefix of a deployment's live sessions: its own for each bearer token.

    Deployments sharing a Redis database but not a token never see each other's sessions. The
    prefix holds 16 hex digits of a salted scrypt of the token (about 50 ms, once per worker), so
    whoever can list the keys cannot test guesses of the token at the speed of a plain hash.

    Example:
        >>> deployment_prefix(None)
        'pacms-live:'
        >>> deployment_prefix("s3cret") == deployment_prefix("s3cret") != deployment_prefix("x")
        True
    """
    if token is None:
        return LIVE_PREFIX
    key = hashlib.scrypt(token.encode(), salt=_PREFIX_SALT, n=2**14, r=8, p=1, dklen=8)
    return f"{LIVE_PREFIX}{key.hex()}:"


DEFAULT_TTL_SECONDS = 24 * 3600
"""Default life of a session's records after its last add."""

# One atomic add: number the record from the shared counter, append it, apply every bound.
# KEYS: seq (never expires), order (sessions by newest number), touched (by last add, ms), bytes
# (each session's). ARGV: records-key prefix, session, data, max_records, max_sessions, max_bytes,
# ttl_seconds. Each list holds "<number> <json>" entries. Returns the record's number.
_ADD = """
local seq = redis.call('INCR', KEYS[1])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[7])
local function drop(name)
  redis.call('DEL', ARGV[1] .. name)
  redis.call('ZREM', KEYS[2], name)
  redis.call('ZREM', KEYS[3], name)
  redis.call('HDEL', KEYS[4], name)
end
local function size(entry) return #entry - string.find(entry, ' ', 1, true) end
for _, name in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - ttl * 1000)) do
  drop(name)
end
local session, data = ARGV[2], ARGV[3]
local key = ARGV[1] .. session
redis.call('RPUSH', key, seq .. ' ' .. data)
redis.call('HINCRBY', KEYS[4], session, #data)
redis.call('ZADD', KEYS[2], seq, session)
redis.call('ZADD', KEYS[3], now, session)
if redis.call('LLEN', key) > tonumber(ARGV[4]) then
  redis.call('HINCRBY', KEYS[4], session, -size(redis.call('LPOP', key)))
end
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[5]) do
  drop(redis.call('ZRANGE', KEYS[2], 0, 0)[1])
end
local total = 0
for _, held in ipairs(redis.call('HVALS', KEYS[4])) do total = total + tonumber(held) end
while total > tonumber(ARGV[6]) and total > #data do
  local name = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not name then break end
  local oldest = redis.call('LPOP', ARGV[1] .. name)
  if oldest then
    total = total - size(oldest)
    redis.call('HINCRBY', KEYS[4], name, -size(oldest))
  end
  if not oldest or redis.call('LLEN', ARGV[1] .. name) == 0 then
    total = total - tonumber(redis.call('HGET', KEYS[4], name) or '0')
    drop(name)
  end
end
for _, each in ipairs({key, KEYS[2], KEYS[3], KEYS[4]}) do redis.call('EXPIRE', each, ttl) end
return seq
"""

# KEYS: a session's records. ARGV: after. Returns its entries numbered above ``after``, or all
# of them if the newest is numbered below it (numbers went back: Redis lost its counter).
_SINCE = """
local function number(entry)
  return tonumber(string.sub(entry, 1, string.find(entry, ' ', 1, true) - 1))
end
local after = tonumber(ARGV[1])
local newest = redis.call('LINDEX', KEYS[1], -1)
if newest and number(newest) < after then
  return redis.call('LRANGE', KEYS[1], 0, -1)
end
local out = {}
for i = redis.call('LLEN', KEYS[1]) - 1, 0, -1 do
  local entry = redis.call('LINDEX', KEYS[1], i)
  if number(entry) <= after then
    break
  end
  table.insert(out, 1, entry)
end
return out
"""


class RedisSessions(StreamCount):
    """Sessions' recent records in Redis, bounded, with a TTL (a failing Redis costs only those).

    Redis is used best effort (:mod:`~langchain_pacms.server.best_effort`): short timeouts
    unless ``client_options`` give others, and while ``circuit`` is open (after a failure), no
    record is kept or read.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = LIVE_PREFIX,
        max_sessions: int = MAX_SESSIONS,
        max_records: int = MAX_RECORDS,
        max_bytes: int = MAX_BYTES,
        max_clients: int = MAX_CLIENTS,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        circuit: Circuit | None = None,
        **client_options: Any,
    ) -> None:
        if urlsplit(url).scheme not in REDIS_SCHEMES:
            raise ValueError("live sessions URL: expected redis://, rediss:// or unix://")
        bounds = {
            "max_sessions": max_sessions,
            "max_records": max_records,
            "max_bytes": max_bytes,
            "ttl_seconds": ttl_seconds,
        }
        for name, value in bounds.items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        super().__init__(max_clients)
        self.prefix, self.ttl_seconds = prefix, ttl_seconds
        self.max_sessions, self.max_records, self.max_bytes = max_sessions, max_records, max_bytes
        self.circuit = circuit if circuit is not None else Circuit()
        self.client: redis.Redis = redis.Redis.from_url(url, **best_effort(client_options))
        self._add = self.client.register_script(_ADD)
        self._since = self.client.register_script(_SINCE)
        self._keys = [prefix + name for name in ("seq", "order", "touched", "bytes")]
        self._failing = False
        self._failing_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisSessions(prefix={self.prefix!r}, max_records={self.max_records})"

    def _records(self, session: str) -> str:
        return f"{self.prefix}records:{session}"

    def _redis(self, work: Callable[[], T]) -> T | None:
        """``work()``, or ``None`` while the circuit is open or if Redis fails.

        A failure is logged once until Redis answers again.
        """
        if self.circuit.open:
            return None
        try:
            with self.circuit.watch():
                result = work()
        except redis.RedisError as err:
            with self._failing_lock:
                first, self._failing = not self._failing, True
            if first:
                logger.warning("live sessions: Redis failed (%s: %s)", type(err).__name__, err)
            return None
        self._failing = False
        return result

    def add(self, session: str, record: dict[str, Any]) -> int:
        """Keep ``record`` as the newest of ``session``; its sequence number (``0``: not kept)."""
        bounds = (self.max_records, self.max_sessions, self.max_bytes, self.ttl_seconds)
        args: list[str | int] = [self._records(""), session, record_json(record), *bounds]
        return self._redis(lambda: int(cast(int, self._add(keys=self._keys, args=args)))) or 0

    def since(self, session: str, after: int) -> list[tuple[int, str]]:
        """The kept records of ``session`` numbered above ``after``, oldest first.

        All of them if the newest is numbered below ``after`` (Redis lost its data since).
        """
        key = self._records(session)
        entries = self._redis(lambda: cast(list[bytes], self._since(keys=[key], args=[after])))
        parts = (entry.partition(b" ") for entry in entries or ())
        return [(int(seq), data.decode("utf-8")) for seq, _, data in parts]

    def summary(self) -> list[dict[str, Any]]:
        """Each session's id, number of records kept and newest sequence number, newest first."""

        def read() -> tuple[list[tuple[bytes, float]], list[int]]:
            newest = cast(
                list[tuple[bytes, float]], self.client.zrevrange(self._keys[1], 0, -1, True)
            )
            pipe = self.client.pipeline(transaction=False)
            for name, _ in newest:
                pipe.llen(self._records(name.decode("utf-8")))
            return newest, pipe.execute()

        newest, counts = self._redis(read) or ([], [])
        return [
            {"id": name.decode("utf-8"), "records": count, "last": int(last)}
            for (name, last), count in zip(newest, counts)
            if count
        ]

    def close(self) -> None:
        """Close the client's connections (it reconnects if used again)."""
        self.client.close()
