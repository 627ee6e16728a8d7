"""One body for a method and its async twin: a generator of steps, run by a sync or async driver.

The steps yield each outside call (:class:`Call`) and get its answer back (or its error raised).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

__all__ = [
    "STEP_THREAD_ITEMS",
    "Call",
    "Steps",
    "adrive",
    "adrive_calls",
    "drive",
    "drive_calls",
    "in_step_thread",
    "method_parameters_of",
    "parameters_of",
]

Ask = TypeVar("Ask")
Answer = TypeVar("Answer")
T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
_SELF = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)


def parameters_of(template: Callable[P, Any]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Give a ``(*args, **kwargs)`` function (which passes them to ``template``) its parameters.

    Example:
        >>> def _args(text: str, *, times: int = 2) -> tuple[str, int]:
        ...     return text, times
        >>> @parameters_of(_args)
        ... def repeat(*args, **kwargs) -> str:
        ...     text, times = _args(*args, **kwargs)
        ...     return text * times
        >>> repeat("ab"), list(inspect.signature(repeat).parameters)
        ('abab', ['text', 'times'])
    """
    return _giving(template, ())


def method_parameters_of(
    template: Callable[P, Any],
) -> Callable[[Callable[..., R]], Callable[Concatenate[Any, P], R]]:
    """:func:`parameters_of` for a method: ``self`` comes first, then ``template``'s parameters.

    Example:
        >>> def _args(text: str) -> str:
        ...     return text
        >>> class Echo:
        ...     @method_parameters_of(_args)
        ...     def say(self, *args, **kwargs) -> str:
        ...         return _args(*args, **kwargs)
        >>> Echo().say("hi"), list(inspect.signature(Echo().say).parameters)
        ('hi', ['text'])
    """
    return _giving(template, (_SELF,))


def _giving(template: Callable[..., Any], first: tuple[inspect.Parameter, ...]) -> Any:
    """A decorator giving a function ``first`` and then ``template``'s parameters."""

    def decorate(function: Callable[..., R]) -> Callable[..., R]:
        own = inspect.signature(template)
        public = _named_in_errors(function, template)
        public.__signature__ = own.replace(  # type: ignore[attr-defined]
            parameters=[*first, *own.parameters.values()],
            return_annotation=inspect.signature(function).return_annotation,
        )
        return public

    return decorate


def _named_in_errors(function: Callable[..., R], template: Callable[..., Any]) -> Callable[..., R]:
    """``function`` (sync or async), its bad calls of ``template`` reported under its own name.

    Python names the function whose parameters did not match: ``select_arguments() missing 1
    required positional argument: 'budget'``; the caller wrote ``select``, so the error says
    ``ContextSelector.select() missing ...``. Other ``TypeError``s pass unchanged.
    """
    code = getattr(function, "__code__", None)

    def renamed(err: TypeError) -> TypeError:
        tb = err.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        stem, message = f"{template.__qualname__}()", str(err)
        # a call that does not bind fails in the caller's frame: here, the body's own
        if tb is None or tb.tb_frame.f_code is not code or not message.startswith(stem):
            return err
        return TypeError(f"{function.__qualname__}(){message[len(stem) :]}")

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            try:
                return await function(*args, **kwargs)
            except TypeError as err:
                if (named := renamed(err)) is err:
                    raise
                raise named from None

        return cast("Callable[..., R]", awaited)

    @functools.wraps(function)
    def called(*args: Any, **kwargs: Any) -> R:
        try:
            return function(*args, **kwargs)
        except TypeError as err:
            if (named := renamed(err)) is err:
                raise
            raise named from None

    return called


def drive(steps: Generator[Ask, Answer, T], answer: Callable[[Ask], Answer]) -> T:
    """Run ``steps`` to their result, answering each request with ``answer`` (errors raised in).

    Example:
        >>> def steps():
        ...     try:
        ...         return (yield "ping")
        ...     except KeyError:
        ...         return "no answer"
        >>> drive(steps(), str.upper), drive(steps(), {}.__getitem__)
        ('PING', 'no answer')
    """

    async def now(request: Ask) -> Answer:
        return answer(request)

    run = adrive(steps, now)  # never suspends: ``now`` awaits nothing
    try:
        run.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    finally:
        run.close()
    raise RuntimeError("a sync answer suspended")  # pragma: no cover - ``now`` cannot


async def adrive(
    steps: Generator[Ask, Answer, T],
    answer: Callable[[Ask], Awaitable[Answer]],
    *,
    offload: bool = False,
) -> T:
    """Async twin of :func:`drive`: each answer is awaited.

    ``offload``: the steps' own work between two requests runs on the package's step threads
    (one context copied for all of them), so a body that computes for milliseconds does not
    hold up the event loop's other tasks; the answers are still awaited on the loop. The step
    threads are the package's own (as many as the cores), not the loop's default executor,
    which a stalled sync model or store may have filled.

    Example:
        >>> import asyncio, threading
        >>> def steps():
        ...     reply = yield "ping"
        ...     return reply, threading.current_thread() is threading.main_thread()
        >>> async def answer(request):
        ...     return request.upper()
        >>> asyncio.run(adrive(steps(), answer)), asyncio.run(adrive(steps(), answer, offload=True))
        (('PING', True), ('PING', False))
    """
    if offload:
        loop, context = asyncio.get_running_loop(), contextvars.copy_context()

        async def advance(move: Callable[[Any], Ask], value: Any) -> tuple[bool, Any]:
            return await loop.run_in_executor(_step_executor(), context.run, _advance, move, value)

    else:

        async def advance(move: Callable[[Any], Ask], value: Any) -> tuple[bool, Any]:
            return _advance(move, value)

    done, out = await advance(steps.send, None)
    while not done:
        try:
            reply = await answer(out)
        except Exception as err:
            done, out = await advance(steps.throw, err)
        else:
            done, out = await advance(steps.send, reply)
    return cast(T, out)


def _advance(move: Callable[[Any], Ask], value: Any) -> tuple[bool, Any]:
    """``move(value)`` (a generator's ``send`` or ``throw``): ``(done, request or result)``.

    A ``StopIteration`` cannot cross a future: the result comes back as a value.
    """
    try:
        return False, move(value)
    except StopIteration as done:
        return True, done.value


_STEP_WORKERS = max(2, os.cpu_count() or 2)
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _step_executor() -> ThreadPoolExecutor:
    """The threads offloaded steps run on (made on first use, again in a forked child)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(_STEP_WORKERS, thread_name_prefix="pacms-steps")
        return _executor


def _forget_executor() -> None:
    """In a forked child: the parent's step threads do not exist there."""
    global _executor, _executor_lock
    _executor, _executor_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_executor)


STEP_THREAD_ITEMS = 16
"""Fewest items (texts, rows) a piece of work handles to be worth a step thread's round trip."""


async def in_step_thread(fn: Callable[..., T], *args: Any, items: int | None = None) -> T:
    """Await ``fn(*args)`` run on the step threads (see :func:`adrive`), in this context.

    ``items``: how many items the work handles; under :data:`STEP_THREAD_ITEMS` it is done
    here, on the loop (the round trip would cost more than it holds the loop up).

    Example:
        >>> import asyncio, threading
        >>> asyncio.run(in_step_thread(lambda: threading.current_thread().name))[:11]
        'pacms-steps'
        >>> asyncio.run(in_step_thread(lambda: threading.current_thread().name, items=1))
        'MainThread'
    """
    if items is not None and items < STEP_THREAD_ITEMS:
        return fn(*args)
    loop = asyncio.get_running_loop()
    run = functools.partial(contextvars.copy_context().run, fn, *args)
    return await loop.run_in_executor(_step_executor(), run)


@dataclass(frozen=True)
class Call:
    """One outside call: a sync function and its async twin, with the arguments."""

    sync: Callable[..., Any]
    asynchronous: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def run(self) -> Any:
        """Call the sync function."""
        return self.sync(*self.args, **self.kwargs)

    async def arun(self) -> Any:
        """Await the async function.

        One its object does not implement (``NotImplementedError``: a sync-only store's
        ``abatch``, say) gives way to the sync function, run in a thread with this context.
        """
        try:
            return await self.asynchronous(*self.args, **self.kwargs)
        except NotImplementedError:
            call = functools.partial(contextvars.copy_context().run, self.run)
            return await asyncio.get_running_loop().run_in_executor(None, call)


Steps = Generator[Call, Any, T]
"""A shared body whose requests are :class:`Call` objects."""


def drive_calls(steps: Steps[T]) -> T:
    """Run ``steps`` with the sync function of each :class:`Call`."""
    return drive(steps, Call.run)


async def adrive_calls(steps: Steps[T], *, offload: bool = False) -> T:
    """Async twin of :func:`drive_calls`: awaits the async function of each :class:`Call`.

    ``offload``: the steps' own work runs off the event loop (see :func:`adrive`).
    """
    return await adrive(steps, Call.arun, offload=offload)
