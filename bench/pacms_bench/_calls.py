"""Model calls of the evaluation harnesses: one kept event loop per thread, retries, sync twins.

:func:`with_retries` runs one model call under a semaphore, retrying with exponential backoff
(and a server's ``Retry-After``) unless the error is a client error that a retry would repeat;
:func:`run_sync` runs a coroutine on the calling thread's own event loop, which stays open so
async model clients keep their connections from run to run; :func:`sync_twin` makes the
blocking twin of an async entry point from it.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

__all__ = ["Exhausted", "run_sync", "sync_twin", "with_retries"]

T = TypeVar("T")
P = ParamSpec("P")

_LOOPS = threading.local()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on this thread's event loop, made on first use and kept.

    Async model clients (``ChatOllama``'s, for one) pool connections that belong to the loop
    that opened them. With a new loop per call, as ``asyncio.run`` makes, a second run with
    the same model finds those connections dead ("Event loop is closed") and its first calls
    fail. Whatever ends the run (an error, Ctrl-C), the tasks it leaves are cancelled before
    this returns, as ``asyncio.run`` does. The loop is closed when its thread is gone (the main
    thread's when the interpreter exits).

    Raises:
        RuntimeError: When this thread is already running an event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError("called from a running event loop: await the async function instead")
    loop = getattr(_LOOPS, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOOPS.loop = asyncio.new_event_loop()
        weakref.finalize(threading.current_thread(), loop.close)
    try:
        return loop.run_until_complete(coro)
    finally:
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def sync_twin(afn: Callable[P, Coroutine[Any, Any, T]], name: str, doc: str) -> Callable[P, T]:
    """A function ``name`` (documented by ``doc``) that runs ``afn`` with :func:`run_sync`.

    It takes exactly ``afn``'s arguments; ``inspect.signature`` shows ``afn``'s parameters (it
    follows ``__wrapped__``), so the sync and async entry points cannot drift apart.
    """

    @functools.wraps(afn)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(afn(*args, **kwargs))

    blocking.__name__ = blocking.__qualname__ = name
    blocking.__doc__ = doc
    return blocking


class Exhausted(Exception):
    """A call kept failing; carries the last error and the number of retries made."""

    def __init__(self, error: BaseException, retries: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.retries = retries


# Client errors that may pass: timeout, conflict, too early, rate limit.
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})


def _status_code(err: BaseException) -> int | None:
    """The HTTP status an SDK error carries (its ``status_code`` or its response's), if any."""
    for holder in (err, getattr(err, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int):
            return status
    return None


def _permanent(err: BaseException) -> bool:
    """True for an HTTP client error that a retry would only repeat (e.g. 404 model not found).

    Example:
        >>> class NotFound(Exception):
        ...     status_code = 404
        >>> class RateLimited(Exception):
        ...     status_code = 429
        >>> _permanent(NotFound()), _permanent(RateLimited()), _permanent(TimeoutError())
        (True, False, False)
    """
    status = _status_code(err)
    return status is not None and 400 <= status < 500 and status not in _TRANSIENT_STATUS


_MAX_RETRY_AFTER = 120.0  # seconds: the longest server-requested wait that is honoured


def _retry_delay(err: BaseException, attempt: int, backoff: float) -> float:
    """Seconds to wait before retry ``attempt + 1``.

    That is ``backoff * 2**attempt``, or longer when the error's HTTP response asks for it
    (``Retry-After``, in seconds, honoured up to two minutes).

    Example:
        >>> class RateLimited(Exception):
        ...     class response:
        ...         headers = {"retry-after": "20"}
        >>> _retry_delay(RateLimited(), 0, 1.0), _retry_delay(ValueError(), 2, 1.0)
        (20.0, 4.0)
    """
    delay = backoff * 2**attempt
    headers: Any = getattr(getattr(err, "response", None), "headers", None)
    try:
        asked = float(headers.get("retry-after"))  # SDK responses' headers ignore case
    except (AttributeError, TypeError, ValueError):
        return delay
    return max(delay, min(asked, _MAX_RETRY_AFTER))


async def with_retries(
    make: Callable[[], Awaitable[T]],
    *,
    sem: asyncio.Semaphore,
    retries: int,
    backoff: float,
    timeout: float | None,
) -> tuple[T, int]:
    """Run ``make()`` under ``sem``; retry on exceptions with exponential backoff.

    An HTTP client error (a 4xx status other than 408, 409, 425 and 429, such as a model that
    does not exist) is not retried: it would fail the same way. A server that says how long
    to wait (``Retry-After``, as rate limits do) is waited for, up to two minutes.

    Returns:
        The result and the number of retries it took.

    Raises:
        Exhausted: After ``retries`` retries all failed, or at once for a client error.
    """
    attempt = 0
    while True:
        try:
            async with sem:
                coro = make()
                result = await (asyncio.wait_for(coro, timeout) if timeout else coro)
            return result, attempt
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if attempt >= retries or _permanent(err):
                raise Exhausted(err, attempt) from err
            if backoff > 0:
                await asyncio.sleep(_retry_delay(err, attempt, backoff))
            attempt += 1
