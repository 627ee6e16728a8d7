"""Run a blocking call on a fresh daemon thread, with a time limit or awaited.

Abandoned calls still running are counted; past :data:`MAX_STALLED` new calls fail at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = [
    "MAX_STALLED",
    "call_in_thread",
    "call_with_timeout",
    "check_embed_timeout",
    "timeout_error",
]

T = TypeVar("T")

MAX_STALLED = 16
"""Most abandoned calls still running in the background before new calls fail fast."""

_lock = threading.Lock()
_stalled = 0


def check_embed_timeout(timeout: object) -> float | None:
    """``timeout`` as an ``embed_timeout`` (seconds ``> 0`` or ``None``), else ``ValueError``."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"embed_timeout must be seconds > 0 or None, got {timeout!r}")
    return timeout


def timeout_error(what: str, timeout: float) -> TimeoutError:
    """The error a timed-out call raises, naming the option and its value."""
    return TimeoutError(f"{what} took longer than embed_timeout={timeout}s")


def _settle(future: concurrent.futures.Future[T], fn: Callable[[], T]) -> None:
    if not future.set_running_or_notify_cancel():  # its caller gave up before it started
        return
    try:
        future.set_result(fn())
    except BaseException as err:  # handed to the caller, who re-raises it
        future.set_exception(err)


def _unstall(_: concurrent.futures.Future[T]) -> None:
    global _stalled
    with _lock:
        _stalled -= 1


def _start(fn: Callable[[], T], what: str) -> concurrent.futures.Future[T]:
    """``fn()`` started on a new daemon thread, as a future (unless too many calls stalled)."""
    with _lock:
        if _stalled >= MAX_STALLED:
            raise TimeoutError(
                f"{what} not started: {_stalled} earlier calls are still running after their "
                "callers gave up on them; the backend looks stalled"
            )
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    threading.Thread(target=_settle, args=(future, fn), name="pacms-embed", daemon=True).start()
    return future


def _abandon(future: concurrent.futures.Future[T]) -> None:
    """Count ``future``'s thread as stalled until it finishes (at once if it has)."""
    global _stalled
    with _lock:
        _stalled += 1
    future.add_done_callback(_unstall)  # runs at once if it finished meanwhile


def call_with_timeout(fn: Callable[[], T], timeout: float, *, what: str) -> T:
    """``fn()``, or :class:`TimeoutError` naming ``what`` past ``timeout`` seconds or when stalled.

    An overrun is left to finish in the background.
    """
    future = _start(fn, what)
    done, _ = concurrent.futures.wait([future], timeout=timeout)
    if not done:  # (a TimeoutError that ``fn`` raised itself is not an overrun)
        _abandon(future)
        raise timeout_error(what, timeout)
    return future.result()


async def call_in_thread(fn: Callable[[], T], *, what: str) -> T:
    """Await ``fn()`` on a new daemon thread (not the loop's executor); stalled: ``TimeoutError``.

    A cancelled await leaves ``fn`` to finish in the background, counted as stalled.
    """
    future = _start(fn, what)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        _abandon(future)
        raise
