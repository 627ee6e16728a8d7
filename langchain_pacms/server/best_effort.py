"""Redis as the service uses it, best effort: short timeouts, and a pause after a failure.

The shared embedding cache and the live sessions may be lost, so a Redis that fails or hangs
must not hold a selection: each operation gives up after :data:`SOCKET_SECONDS`, and after one
fails or times out, Redis is left alone for :data:`COOL_DOWN_SECONDS` (the cache and the
sessions together, when they share a :class:`Circuit`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_pacms.errors import missing_extra

try:
    import redis
except ImportError as err:  # pragma: no cover - depends on the environment
    raise missing_extra("BestEffortStore", 'the "redis" extra (the redis client)', "redis") from err

from langchain_pacms.embeddings.redis_store import RedisByteStore

__all__ = ["COOL_DOWN_SECONDS", "SOCKET_SECONDS", "BestEffortStore", "Circuit", "best_effort"]

SOCKET_SECONDS = 0.5
"""Default connect and read timeout of a best-effort Redis client."""
COOL_DOWN_SECONDS = 5.0
"""Default seconds Redis is left alone after an operation on it fails or times out."""


def best_effort(client_options: dict[str, Any]) -> dict[str, Any]:
    """``client_options`` with the short timeouts of :data:`SOCKET_SECONDS` unless given.

    Example:
        >>> best_effort({"socket_timeout": 2})
        {'socket_timeout': 2, 'socket_connect_timeout': 0.5}
    """
    return {
        "socket_timeout": SOCKET_SECONDS,
        "socket_connect_timeout": SOCKET_SECONDS,
        **client_options,
    }


class Circuit:
    """Leaves Redis alone for ``cool_down`` seconds after an operation on it fails (any thread).

    Example:
        >>> circuit = Circuit(cool_down=60)
        >>> with contextlib.suppress(redis.TimeoutError), circuit.watch():
        ...     raise redis.TimeoutError("no answer")
        >>> circuit.open
        True
    """

    def __init__(self, cool_down: float = COOL_DOWN_SECONDS) -> None:
        self.cool_down = cool_down
        self._until = 0.0  # time.monotonic() when Redis is tried again

    @property
    def open(self) -> bool:
        """Whether Redis is being left alone now."""
        return time.monotonic() < self._until

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Run the block's Redis operation; if it fails, open the circuit (and re-raise)."""
        try:
            yield
        except redis.RedisError:
            self._until = time.monotonic() + self.cool_down
            raise


class BestEffortStore(RedisByteStore):
    """A :class:`RedisByteStore` that gives up soon and leaves a failing Redis alone a while.

    Reads and writes go to Redis unless ``circuit`` is open; then they use only the values held
    in this process (``local_bytes``), and a read misses what only Redis holds. A failure is
    raised (and opens the circuit): the embedding cache logs it and embeds without the store.
    ``client_options`` default to :func:`best_effort`'s short timeouts.
    """

    def __init__(self, url: str, *, circuit: Circuit | None = None, **options: Any) -> None:
        super().__init__(url, **best_effort(options))
        self.circuit = circuit if circuit is not None else Circuit()

    def _keep_here(self, pairs: Sequence[tuple[str, bytes]]) -> None:
        if self.local is not None:
            self.local.put_many(pairs)

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys``: from Redis unless the circuit is open, else held here only."""
        if self.circuit.open:
            return self._held(keys)[0]
        with self.circuit.watch():
            return super().mget(keys)

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """Set each key to its value: in Redis unless the circuit is open, else here only."""
        if self.circuit.open:
            self._keep_here(key_value_pairs)
            return
        with self.circuit.watch():
            super().mset(key_value_pairs)

    async def amget(self, keys: Sequence[str]) -> list[bytes | None]:
        """Async twin of :meth:`mget`."""
        if self.circuit.open:
            return self._held(keys)[0]
        with self.circuit.watch():
            return await super().amget(keys)

    async def amset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """Async twin of :meth:`mset`."""
        if self.circuit.open:
            self._keep_here(key_value_pairs)
            return
        with self.circuit.watch():
            await super().amset(key_value_pairs)
