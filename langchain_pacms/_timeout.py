"""Run a blocking call with a time limit, on a daemon thread of its own.

Each timed call gets a fresh daemon thread, so calls never queue behind one another, a call that
overruns costs only its own caller, and a thread still blocked in a stalled backend does not keep
the interpreter from exiting. Threads that overran and are still running are counted; past
:data:`MAX_STALLED` of them a new call fails at once instead of starting yet another thread, so a
backend that hangs on every call cannot pile threads up without bound.

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

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["MAX_STALLED", "call_with_timeout", "timeout_error"]

T = TypeVar("T")

MAX_STALLED = 16
"""Most timed-out calls still running in the background before new calls fail fast."""

_lock = threading.Lock()
_stalled = 0


def timeout_error(what: str, timeout: float) -> TimeoutError:
    """The error a timed-out call raises, naming the option and its value.

    Example:
        >>> str(timeout_error("embedding", 2))
        'embedding took longer than embed_timeout=2s'
    """
    return TimeoutError(f"{what} took longer than embed_timeout={timeout}s")


def _settle(future: concurrent.futures.Future[T], fn: Callable[[], T]) -> None:
    try:
        future.set_result(fn())
    except BaseException as err:  # handed to the caller, who re-raises it
        future.set_exception(err)


def _unstall(_: concurrent.futures.Future[T]) -> None:
    global _stalled
    with _lock:
        _stalled -= 1


def call_with_timeout(fn: Callable[[], T], timeout: float, *, what: str) -> T:
    """``fn()``, or :class:`TimeoutError` once ``timeout`` seconds have passed.

    ``fn`` runs on a new daemon thread; when it overruns, it is left to finish in the background
    and its result is dropped.

    Args:
        fn: The call, without arguments.
        timeout: Seconds to wait for it (``> 0``).
        what: What the call does, for the error message.

    Returns:
        What ``fn`` returned (its exception is raised here).

    Raises:
        TimeoutError: If ``fn`` overran, or :data:`MAX_STALLED` earlier calls are still stalled.
    """
    global _stalled
    with _lock:
        if _stalled >= MAX_STALLED:
            raise TimeoutError(
                f"{what} not started: {_stalled} earlier calls are still running past "
                f"embed_timeout; the backend looks stalled"
            )
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    thread = threading.Thread(target=_settle, args=(future, fn), name="pacms-embed", daemon=True)
    thread.start()
    done, _ = concurrent.futures.wait([future], timeout=timeout)
    if not done:  # (a TimeoutError that ``fn`` raised itself is not an overrun)
        with _lock:
            _stalled += 1
        future.add_done_callback(_unstall)  # runs at once if it finished meanwhile
        raise timeout_error(what, timeout)
    return future.result()
