"""A bounded, thread-safe memo that forgets its least recently used entries."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar, overload

__all__ = ["LruMemo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


class LruMemo(Generic[K, V]):
    """A thread-safe map that forgets its least recently used entries past its caps.

    Caps: ``max_entries``, ``max_bytes`` (of ``weigh(key, value)``, held now: :attr:`nbytes`);
    ``None``: no cap. A copy or a pickle starts empty.
    """

    def __init__(
        self,
        max_entries: int | None = None,
        *,
        max_bytes: int | None = None,
        weigh: Callable[[K, V], int] | None = None,
    ) -> None:
        for name, cap in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
                raise ValueError(f"{name} must be an int >= 0 or None, got {cap!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.weigh = weigh
        self.nbytes = 0
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: Any = None) -> Any:
        """The value held under ``key``, now the most recently used (``default`` if none)."""
        # No lock: each OrderedDict call is atomic; an entry evicted between them is still right
        found = self._entries.get(key, _ABSENT)
        if found is _ABSENT:
            return default
        try:  # noqa: SIM105 (cheaper than contextlib.suppress on this path)
            self._entries.move_to_end(key)
        except KeyError:
            pass
        return found

    def get_many(self, keys: Iterable[K]) -> list[V | None]:
        """:meth:`get` for several keys under one lock (``None`` for each key not held)."""
        keys = list(keys)
        with self._lock:
            entries = self._entries
            found = [entries.get(key) for key in keys]
            for key, value in zip(keys, found):
                if value is not None:
                    entries.move_to_end(key)
            return found

    def items(self) -> list[tuple[K, V]]:
        """The entries held, least recently used first (a snapshot; nothing is touched)."""
        with self._lock:
            return list(self._entries.items())

    def put(self, key: K, value: V) -> None:
        """Hold ``value`` under ``key`` as the most recently used, forgetting past the caps."""
        self.put_many(((key, value),))

    def put_many(self, items: Iterable[tuple[K, V]]) -> None:
        """:meth:`put` for several entries under one lock (the caps are applied once, after)."""
        weigh = self.weigh
        with self._lock:
            entries = self._entries
            for key, value in items:
                if weigh is not None:
                    old = entries.pop(key, _ABSENT)
                    if old is not _ABSENT:
                        self.nbytes -= weigh(key, old)
                    self.nbytes += weigh(key, value)
                entries[key] = value
                entries.move_to_end(key)
            self._shrink()

    def discard(self, keys: Iterable[K], when: Callable[[V], bool]) -> None:
        """Forget the entries under ``keys`` whose ``when(value)`` holds (nothing else moves)."""
        with self._lock:
            entries = self._entries
            for key in keys:
                found = entries.get(key, _ABSENT)
                if found is not _ABSENT and when(found):
                    del entries[key]
                    if self.weigh is not None:
                        self.nbytes -= self.weigh(key, found)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self.nbytes = 0

    def _shrink(self) -> None:
        entries, weigh = self._entries, self.weigh
        count = math.inf if self.max_entries is None else self.max_entries
        size = math.inf if self.max_bytes is None else self.max_bytes
        while entries and (len(entries) > count or self.nbytes > size):
            key, value = entries.popitem(last=False)
            if weigh is not None:
                self.nbytes -= weigh(key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_empty_memo, (type(self), self.max_entries, self.max_bytes, self.weigh))


def _empty_memo(
    cls: type[LruMemo[Any, Any]],
    max_entries: int | None,
    max_bytes: int | None,
    weigh: Callable[[Any, Any], int] | None,
) -> LruMemo[Any, Any]:
    memo = cls.__new__(cls)
    LruMemo.__init__(memo, max_entries, max_bytes=max_bytes, weigh=weigh)
    return memo


_ABSENT: Any = object()
