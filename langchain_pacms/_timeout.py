"""Run a blocking call on a daemon thread of its own: with a time limit, or awaited.

Each call gets a fresh daemon thread, so calls never queue behind one another or the loop's
default executor. Abandoned calls still running are counted; past :data:`MAX_STALLED` of them
new calls fail at once.

Example:
    >>> call_with_timeout(lambda: 6 * 7, 1.0, what="answer")
    42
    >>> import time
    >>> call_with_timeout(lambda: time.sleep(0.5), 0.01, what="nap")
    Traceback (most recent call last):
    ...
    TimeoutError: nap took longer than embed_timeout=0.01s
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
    """``timeout`` as an ``embed_timeout``: seconds ``> 0``, or ``None`` for no limit.

    Raises:
        ValueError: For anything else (``0``, a negative number, a bool, a string).

    Example:
        >>> check_embed_timeout(2.5), check_embed_timeout(None)
        (2.5, None)
        >>> check_embed_timeout(0)
        Traceback (most recent call last):
        ...
        ValueError: embed_timeout must be seconds > 0 or None, got 0
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"embed_timeout must be seconds > 0 or None, got {timeout!r}")
    return timeout


def timeout_error(what: str, timeout: float) -> TimeoutError:
    """The error a timed-out call raises, naming the option and its value.

    Example:
        >>> str(timeout_error("embedding", 2))
        'embedding took longer than embed_timeout=2s'
    """
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
    thread = threading.Thread(target=_settle, args=(future, fn), name="pacms-embed", daemon=True)
    thread.start()
    return future


def _abandon(future: concurrent.futures.Future[T]) -> None:
    """Count ``future``'s thread as stalled until it finishes (at once if it has)."""
    global _stalled
    with _lock:
        _stalled += 1
    future.add_done_callback(_unstall)  # runs at once if it finished meanwhile


def call_with_timeout(fn: Callable[[], T], timeout: float, *, what: str) -> T:
    """``fn()``, or :class:`TimeoutError` once ``timeout`` seconds have passed.

    ``fn`` runs on a new daemon thread; an overrun is left to finish in the background and
    ``what`` names the call in the error. Also raises :class:`TimeoutError` at once when
    :data:`MAX_STALLED` earlier calls are still stalled.
    """
    future = _start(fn, what)
    done, _ = concurrent.futures.wait([future], timeout=timeout)
    if not done:  # (a TimeoutError that ``fn`` raised itself is not an overrun)
        _abandon(future)
        raise timeout_error(what, timeout)
    return future.result()


async def call_in_thread(fn: Callable[[], T], *, what: str) -> T:
    """Await ``fn()`` run on a new daemon thread, never on the event loop's default executor.

    Cancelling the awaiting task leaves ``fn`` to finish in the background, counted as stalled.
    Raises :class:`TimeoutError` (naming ``what``) when :data:`MAX_STALLED` calls are stalled.

    Example:
        >>> import asyncio
        >>> asyncio.run(call_in_thread(lambda: 6 * 7, what="answer"))
        42
    """
    future = _start(fn, what)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        _abandon(future)
        raise
