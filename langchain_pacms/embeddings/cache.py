"""A content-hash embedding cache around any LangChain ``Embeddings``: :class:`CachedEmbeddings`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import math
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.stores import ByteStore
from numpy.typing import NDArray

from langchain_pacms._lru import LruMemo
from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls, in_step_thread
from langchain_pacms._timeout import call_in_thread
from langchain_pacms.embeddings.identity import key_prefix, model_identity, probe_digest
from langchain_pacms.embeddings.profile import WRAPPED_MODEL_ATTRIBUTES

__all__ = ["ENTRY_OVERHEAD_BYTES", "PROBE_TEXT", "CachedEmbeddings", "model_identity"]

ENTRY_OVERHEAD_BYTES = 400  # bytes one in-memory cache entry costs beyond its vector's data

PROBE_TEXT = "langchain-pacms: which model embeds this text?"
"""What a cache with a ``store`` embeds once to tell models apart that its identity cannot."""


logger = logging.getLogger(__name__)


def _entry_bytes(_key: str, vector: NDArray[np.float32]) -> int:
    return vector.nbytes + ENTRY_OVERHEAD_BYTES


class _Flight:
    """A text being embedded by one call (a coroutine or not), waited for until ``expires``."""

    __slots__ = ("asynchronous", "expires", "future", "thread")

    def __init__(self, thread: int, expires: float, *, asynchronous: bool) -> None:
        self.thread, self.asynchronous, self.expires = thread, asynchronous, expires
        self.future: concurrent.futures.Future[NDArray[np.float32]] = concurrent.futures.Future()


_ASYNC_METHODS = {"document": "aembed_documents", "query": "aembed_query"}


def _blocks(model: Embeddings, kind: str) -> bool:
    """Whether ``model`` (under wrappers but a cache) uses LangChain's default async method."""
    method = _ASYNC_METHODS[kind]
    seen: set[int] = set()
    inner: Any = model
    while isinstance(inner, Embeddings) and not isinstance(inner, CachedEmbeddings):
        if getattr(type(inner), method) is getattr(Embeddings, method):
            return True
        if id(inner) in seen:
            return False
        seen.add(id(inner))
        wrapped = (getattr(inner, name, None) for name in WRAPPED_MODEL_ATTRIBUTES)
        inner = next((m for m in wrapped if isinstance(m, Embeddings)), None)
    return False


def _deadline(timeout: float | None) -> float:
    """The ``time.monotonic()`` deadline of a call with ``timeout`` seconds (``inf``: none)."""
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
    return time.monotonic() + timeout


class CachedEmbeddings(Embeddings):
    """Embeddings wrapper that embeds each distinct text once.

    Thread- and task-safe: concurrent calls that miss a text send it to the model once; a
    waiting call embeds it itself if the other fails or outlives its ``timeout``.

    With a ``store`` (shared or kept across runs) and no ``namespace``, the namespace is
    :func:`model_identity` plus a digest of the model's vector for :data:`PROBE_TEXT` (its size
    and the places and signs of its largest components, which noise in the last digits leaves
    alone), embedded once, at the first call: two models the identity cannot tell apart (say,
    wrappers holding their model as an object) never read each other's vectors. Until that
    probe succeeds, calls embed without the store.

    Args:
        embeddings: The model to wrap.
        store: Optional ``ByteStore`` for the vectors; default is an in-memory LRU map.
        namespace: Cache namespace; defaults to :func:`model_identity` of the model (with a
            ``store``, and a model without a ``cache_identity`` of its own, plus the probe's
            digest).
        batch_size: Most texts sent to the model in one call.
        max_entries: Most vectors in the in-memory map (ignored when ``store`` is given).
        max_bytes: Most bytes in the in-memory map, an entry counting its vector's ``nbytes``
            plus :data:`ENTRY_OVERHEAD_BYTES` (``None``: no byte cap); LRU beyond either cap.

    A copy (``copy.deepcopy``, a pickle) has locks of its own and starts with no vectors in
    memory (a ``store`` is copied with it).

    Attributes:
        hits: Texts answered from the cache so far.
        misses: Texts sent to the model so far.

    Example:
        >>> from langchain_pacms.embeddings import HashedTfidfEmbeddings
        >>> cached = CachedEmbeddings(HashedTfidfEmbeddings(dim=64))
        >>> _ = cached.embed_matrix(["a", "b"]); _ = cached.embed_matrix(["a", "c"])
        >>> cached.hits, cached.misses
        (1, 3)
    """

    def __init__(
        self,
        embeddings: Embeddings,
        *,
        store: ByteStore | None = None,
        namespace: str | None = None,
        batch_size: int = 256,
        max_entries: int = 500_000,
        max_bytes: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise ValueError(f"max_bytes must be a positive int or None, got {max_bytes!r}")
        self.embeddings = embeddings
        self.store = store
        self.namespace = namespace or model_identity(embeddings)
        self._prefix = key_prefix(self.namespace)
        own = getattr(embeddings, "cache_identity", None)
        self._probe = store is not None and not namespace and not (isinstance(own, str) and own)
        self._probe_lock = threading.Lock()
        self.batch_size = batch_size
        self.hits = self.misses = 0
        self._memory: LruMemo[str, NDArray[np.float32]] = LruMemo(
            max_entries, max_bytes=max_bytes, weigh=_entry_bytes
        )
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}  # cache key -> the call embedding it now
        self._dim = 0  # the size of the model's vectors, once it returned a good batch
        self._sizes: dict[int, int] = {}  # vector sizes read from the store, and how often
        self._store_errors = 0

    def __getstate__(self) -> dict[str, Any]:
        """What a copy or a pickle takes: everything but the locks and the calls in flight."""
        state = dict(self.__dict__)
        for name in ("_probe_lock", "_lock", "_flights"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy's own locks, and no calls in flight."""
        self.__dict__.update(state)
        self._probe_lock = threading.Lock()
        self._lock = threading.Lock()
        self._flights = {}

    def _probed(self, vectors: list[Any]) -> None:
        """Name the namespace after the model's vector for :data:`PROBE_TEXT`; learn its size."""
        (vector,) = vectors
        size, digest = probe_digest(vector)
        with self._lock:
            if self._probe:
                self.namespace = f"{self.namespace}:probe={digest}"
                self._prefix = key_prefix(self.namespace)
                self._dim = self._dim or size
                self._probe = False

    def _probe_failed(self, err: Exception) -> bool:
        logger.warning(
            "embedding cache: the probe that tells models apart failed (%s: %s); this call "
            "embeds without the store, the next one probes again",
            type(err).__name__,
            err,
        )
        return False

    def _probe_now(self) -> bool:
        """Probe once (concurrent callers wait for it): whether the store may be used now."""
        with self._probe_lock:
            if self._probe:
                try:
                    self._probed(self._embed_sync([PROBE_TEXT], "document"))
                except Exception as err:
                    return self._probe_failed(err)
        return True

    async def _aprobe_now(self) -> bool:
        """Async :meth:`_probe_now` (a model embedding on threads probes on one)."""
        if not self._probe:
            return True
        if callable(getattr(self.embeddings, "embed_matrix", None)) or _blocks(
            self.embeddings, "document"
        ):
            return await call_in_thread(self._probe_now, what="embedding")
        try:
            self._probed(await self._embed_async([PROBE_TEXT], "document"))
        except Exception as err:
            return self._probe_failed(err)
        return True

    def _key(self, text: str, kind: str) -> str:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{self._prefix}/{kind}/{digest}"

    def _store_failed(self, what: str, err: Exception) -> None:
        """Log a failed store operation (a warning the first time): the cache is skipped."""
        log = logger.debug if self._store_errors else logger.warning
        self._store_errors += 1
        log(
            "embedding cache store %s %s failed (%s: %s); embedding without it",
            type(self.store).__name__,
            what,
            type(err).__name__,
            err,
        )

    def _read(self, raw: Sequence[bytes | None]) -> list[NDArray[np.float32] | None]:
        """The stored vectors; an entry cut short, not finite or of another size is a miss."""
        found: list[NDArray[np.float32] | None] = []
        for b in raw:
            vector = None
            if isinstance(b, bytes) and b and not len(b) % 4:
                vector = np.frombuffer(b, dtype=np.float32)
                if not np.isfinite(vector).all():
                    vector = None
            found.append(vector)
        with self._lock:
            for v in found:
                if v is not None:
                    self._sizes[v.size] = self._sizes.get(v.size, 0) + 1
            # the model's size, else the one read most so far (a tie: the larger, as a damaged
            # entry is a shorter one)
            size = self._dim or max(self._sizes, key=lambda k: (self._sizes[k], k), default=0)
        return [v if v is not None and v.size == size else None for v in found]

    def _reading(self, keys: list[str]) -> Steps[list[NDArray[np.float32] | None]]:
        """The body of :meth:`_lookup` and :meth:`_alookup`: yields the store's read."""
        if self.store is None:
            return self._memory.get_many(keys)
        try:
            raw = yield Call(self.store.mget, self.store.amget, (keys,))
        except Exception as err:
            self._store_failed("read", err)
            return [None] * len(keys)
        return self._read(raw)

    def _lookup(self, keys: list[str]) -> list[NDArray[np.float32] | None]:
        return drive_calls(self._reading(keys))

    async def _alookup(self, keys: list[str]) -> list[NDArray[np.float32] | None]:
        return await adrive_calls(self._reading(keys))

    def _writing(self, pairs: list[tuple[str, NDArray[np.float32]]]) -> Steps[None]:
        """The body of :meth:`_save` and :meth:`_asave`: yields the store's write."""
        if not pairs:
            return
        if self.store is None:
            self._memory.put_many(pairs)
            return
        try:
            raw = [(k, v.astype(np.float32).tobytes()) for k, v in pairs]
            yield Call(self.store.mset, self.store.amset, (raw,))
        except Exception as err:
            self._store_failed("write", err)

    def _save(self, pairs: list[tuple[str, NDArray[np.float32]]]) -> None:
        drive_calls(self._writing(pairs))

    async def _asave(self, pairs: list[tuple[str, NDArray[np.float32]]]) -> None:
        await adrive_calls(self._writing(pairs))

    @property
    def max_entries(self) -> int:
        """Most vectors the in-memory map holds."""
        return cast(int, self._memory.max_entries)  # the constructor always sets one

    @property
    def max_bytes(self) -> int | None:
        """Most bytes the in-memory map holds (``None``: only ``max_entries`` bounds it)."""
        return self._memory.max_bytes

    @property
    def nbytes(self) -> int:
        """Bytes the in-memory map holds now, counted as ``max_bytes`` counts them."""
        return self._memory.nbytes

    def capacity(self, dim: int) -> int:
        """Most ``dim``-dimensional float32 vectors the in-memory map holds under its caps.

        Example:
            >>> from langchain_pacms.embeddings import HashedTfidfEmbeddings
            >>> CachedEmbeddings(HashedTfidfEmbeddings(dim=8), max_bytes=10_000).capacity(256)
            7
        """
        per_entry = 4 * dim + ENTRY_OVERHEAD_BYTES
        by_bytes = self.max_entries if self.max_bytes is None else self.max_bytes // per_entry
        return min(self.max_entries, by_bytes)

    @property
    def cache_identity(self) -> str:
        """The wrapped model's identity, so a cache wrapped again keys like the model itself."""
        return self.namespace

    def clear(self) -> None:
        """Forget the in-memory vectors and reset the counters (a ``store`` is left as is)."""
        self._memory.clear()
        with self._lock:
            self.hits = self.misses = 0

    def _keys(self, texts: Sequence[str], kind: str) -> list[str]:
        """The cache keys of ``texts``."""
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"texts must be str, got {type(t).__name__}")
        return [self._key(t, kind) for t in texts]

    def _misses(self, texts: Sequence[str], keys: list[str], found: list[Any]) -> dict[str, str]:
        """The distinct misses (text -> key) among ``found``; the others count as hits."""
        with self._lock:
            self.hits += sum(f is not None for f in found)
        return {t: k for t, k, f in zip(texts, keys, found) if f is None}

    def _arrived(
        self, todo: dict[str, str], found: Sequence[Any], fresh: dict[str, NDArray[np.float32]]
    ) -> dict[str, str]:
        """Put the ``found`` vectors of ``todo`` in ``fresh`` (as hits); return the rest."""
        rest: dict[str, str] = {}
        for (text, key), vector in zip(todo.items(), found):
            if vector is None:
                rest[text] = key
            else:
                fresh[key] = vector
        with self._lock:
            self.hits += len(todo) - len(rest)
        return rest

    @contextlib.contextmanager
    def _claimed(
        self, todo: dict[str, str], deadline: float, *, asynchronous: bool
    ) -> Iterator[
        tuple[
            dict[str, str],
            dict[str, str],
            dict[str, NDArray[np.float32]],
            dict[str, tuple[str, _Flight]],
        ]
    ]:
        """Claim the misses ``todo``: yield what this call claimed, embeds anyway, has, awaits.

        Claimed texts are looked up again, then embedded. A text another call embeds is waited
        for, unless this call is sync and that one is async or on this thread: then it is
        embedded here too (waiting could deadlock).
        """
        mine: dict[str, str] = {}
        flights: dict[str, _Flight] = {}
        unclaimed: dict[str, str] = {}
        waits: dict[str, tuple[str, _Flight]] = {}
        me, now = threading.get_ident(), time.monotonic()
        with self._lock:
            for text, key in todo.items():
                flight = self._flights.get(key)
                if flight is None or flight.expires <= now:
                    self._flights[key] = flights[key] = _Flight(
                        me, deadline, asynchronous=asynchronous
                    )
                    mine[text] = key
                elif asynchronous or not (flight.asynchronous or flight.thread == me):
                    waits[text] = (key, flight)
                else:
                    unclaimed[text] = key
        fresh: dict[str, NDArray[np.float32]] = {}
        try:
            yield mine, unclaimed, fresh, waits
        finally:  # hand this call's vectors to its waiters; cancel the rest
            with self._lock:
                for key, flight in flights.items():
                    if self._flights.get(key) is flight:  # not taken over by a later call
                        del self._flights[key]
            for key, flight in flights.items():
                if key in fresh:
                    flight.future.set_result(fresh[key])
                else:
                    flight.future.cancel()
                    flight.future.set_running_or_notify_cancel()  # wakes concurrent.futures.wait()

    @staticmethod
    def _horizon(waits: dict[str, tuple[str, _Flight]], deadline: float) -> float | None:
        """Seconds to wait for ``waits``: until this call's deadline or the owners' last one."""
        until = min(deadline, max(flight.expires for _, flight in waits.values()))
        return None if until == math.inf else max(0.0, until - time.monotonic())

    def _landed(
        self,
        waits: dict[str, tuple[str, _Flight]],
        fresh: dict[str, NDArray[np.float32]],
        deadline: float,
        timeout: float | None,
    ) -> dict[str, str]:
        """Copy finished flights' vectors into ``fresh``; return the texts to embed here."""
        pending = sum(not flight.future.done() for _, flight in waits.values())
        if pending and time.monotonic() >= deadline:
            raise TimeoutError(
                f"gave up after timeout={timeout}s waiting for {pending} text(s) that another "
                "call is embedding"
            )
        futures = [flight.future for _, flight in waits.values()]
        landed = [f.result() if f.done() and not f.cancelled() else None for f in futures]
        return self._arrived({text: key for text, (key, _) in waits.items()}, landed, fresh)

    def _kept(
        self, todo: dict[str, str], vectors: list[Any]
    ) -> tuple[dict[str, NDArray[np.float32]], list[tuple[str, NDArray[np.float32]]]]:
        """The model's vectors of the misses ``todo`` by key, and those the cache may keep.

        A batch is kept only when every vector is finite and of one size (the model's so far):
        a bad one is asked for again next time, not served from the cache.
        """
        if len(vectors) != len(todo):
            raise ValueError(
                f"embedding model returned {len(vectors)} vectors for {len(todo)} texts"
            )
        # Own copies: a row view would keep the model's whole batch array alive in the cache.
        fresh = {k: np.array(v, dtype=np.float32) for k, v in zip(todo.values(), vectors)}
        shapes = {v.shape for v in fresh.values()}
        (shape,) = shapes if len(shapes) == 1 else ((),)
        good = len(shape) == 1 and shape[0] > 0 and self._dim in (0, shape[0])
        if not good or not all(np.isfinite(v).all() for v in fresh.values()):
            return fresh, []
        self._dim = shape[0]
        return fresh, list(fresh.items())

    def _finish(
        self, keys: list[str], found: list[Any], fresh: dict[str, NDArray[np.float32]]
    ) -> NDArray[np.float32]:
        rows = [f if f is not None else fresh[k] for k, f in zip(keys, found)]
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        dims = {r.shape for r in rows}
        if len(dims) != 1 or len(next(iter(dims))) != 1:
            raise ValueError(f"embedding model returned vectors of differing shapes: {dims}")
        return np.stack(rows).astype(np.float32, copy=False)

    def _embed_sync(self, batch: list[str], kind: str) -> list[Any]:
        if kind == "query":
            return [self.embeddings.embed_query(t) for t in batch]
        fast = getattr(self.embeddings, "embed_matrix", None)
        return list(fast(batch)) if callable(fast) else self.embeddings.embed_documents(batch)

    async def _embed_async(self, batch: list[str], kind: str) -> list[Any]:
        fast = kind == "document" and callable(getattr(self.embeddings, "embed_matrix", None))
        if not (fast or _blocks(self.embeddings, kind)):
            try:
                if kind == "query":
                    return [await self.embeddings.aembed_query(t) for t in batch]
                return await self.embeddings.aembed_documents(batch)
            except NotImplementedError:  # a model with sync methods only: as below
                pass
        return await call_in_thread(lambda: self._embed_sync(batch, kind), what="embedding")

    def _batches(self, todo: dict[str, str]) -> list[list[str]]:
        """Count the texts of ``todo`` as sent to the model; return them in batches."""
        texts = list(todo)
        with self._lock:
            self.misses += len(texts)
        return [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]

    def _embed_now(
        self, todo: dict[str, str], kind: str, *, save: bool = True
    ) -> dict[str, NDArray[np.float32]]:
        vectors = [v for batch in self._batches(todo) for v in self._embed_sync(batch, kind)]
        fresh, keep = self._kept(todo, vectors)
        self._save(keep if save else [])
        return fresh

    async def _aembed_now(
        self, todo: dict[str, str], kind: str, *, save: bool = True
    ) -> dict[str, NDArray[np.float32]]:
        vectors: list[Any] = []
        for batch in self._batches(todo):
            vectors.extend(await self._embed_async(batch, kind))
        fresh, keep = await in_step_thread(self._kept, todo, vectors, items=len(todo))
        await self._asave(keep if save else [])
        return fresh

    def embed_matrix(
        self, texts: Sequence[str], *, kind: str = "document", timeout: float | None = None
    ) -> NDArray[np.float32]:
        """Embed texts as a ``(n, d)`` float32 array, embedding only cache misses.

        Args:
            texts: The texts.
            kind: ``"document"`` or ``"query"``.
            timeout: Most seconds (``None``: no limit) to wait for vectors another call is
                embedding, and others for this call's; it never interrupts a model request.

        Raises:
            TimeoutError: If ``timeout`` passed while waiting for another call's vectors.

        Example:
            >>> from langchain_pacms.embeddings import HashedTfidfEmbeddings
            >>> CachedEmbeddings(HashedTfidfEmbeddings(dim=8)).embed_matrix(["a"], timeout=1).shape
            (1, 8)
        """
        deadline = _deadline(timeout)
        if self._probe and not self._probe_now():  # no namespace yet: the store waits
            alone = {t: t for t in texts}
            return self._finish(
                list(texts), [None] * len(texts), self._embed_now(alone, kind, save=False)
            )
        keys = self._keys(texts, kind)
        found = self._lookup(keys)
        todo = self._misses(texts, keys, found)
        with self._claimed(todo, deadline, asynchronous=False) as (mine, rest, fresh, waits):
            stored = self._lookup(list(mine.values())) if mine else []  # stored meanwhile?
            fresh.update(self._embed_now({**self._arrived(mine, stored, fresh), **rest}, kind))
        if waits:
            concurrent.futures.wait(
                [flight.future for _, flight in waits.values()],
                timeout=self._horizon(waits, deadline),
            )
            fresh.update(self._embed_now(self._landed(waits, fresh, deadline, timeout), kind))
        return self._finish(keys, found, fresh)

    async def aembed_matrix(
        self, texts: Sequence[str], *, kind: str = "document", timeout: float | None = None
    ) -> NDArray[np.float32]:
        """Async :meth:`embed_matrix`, waiting for any call; blocking models run on own threads.

        The ``store`` is read and written through its async methods (``amget``, ``amset``).
        """
        deadline = _deadline(timeout)
        if self._probe and not await self._aprobe_now():
            alone = {t: t for t in texts}
            fresh = await self._aembed_now(alone, kind, save=False)
            return await in_step_thread(
                self._finish, list(texts), [None] * len(texts), fresh, items=len(texts)
            )
        keys = await in_step_thread(self._keys, texts, kind, items=len(texts))
        found = await self._alookup(keys)
        todo = self._misses(texts, keys, found)
        with self._claimed(todo, deadline, asynchronous=True) as (mine, rest, fresh, waits):
            stored = await self._alookup(list(mine.values())) if mine else []
            batch = {**self._arrived(mine, stored, fresh), **rest}
            fresh.update(await self._aembed_now(batch, kind))
        if waits:
            await asyncio.wait(
                [asyncio.wrap_future(flight.future) for _, flight in waits.values()],
                timeout=self._horizon(waits, deadline),
            )
            fresh.update(
                await self._aembed_now(self._landed(waits, fresh, deadline, timeout), kind)
            )
        return await in_step_thread(self._finish, keys, found, fresh, items=len(keys))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents through the cache (LangChain ``Embeddings`` interface)."""
        return self.embed_matrix(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        """Embed a query through the cache."""
        return self.embed_matrix([text], kind="query")[0].tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed_documents`."""
        return (await self.aembed_matrix(texts)).tolist()

    async def aembed_query(self, text: str) -> list[float]:
        """Async twin of :meth:`embed_query`."""
        return (await self.aembed_matrix([text], kind="query"))[0].tolist()
