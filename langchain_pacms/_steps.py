"""One body for a method and its async twin: a generator of steps, run by a sync or async driver.

The generator yields each outside call it needs and takes back the answer; :func:`drive`
answers with blocking calls, :func:`adrive` awaits async ones, and a call's error is raised at
its ``yield``. :class:`Call` pairs a sync function with its async twin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

__all__ = ["Call", "Steps", "adrive", "adrive_calls", "drive", "drive_calls"]

Ask = TypeVar("Ask")
Answer = TypeVar("Answer")
T = TypeVar("T")


def drive(steps: Generator[Ask, Answer, T], answer: Callable[[Ask], Answer]) -> T:
    """Run ``steps`` to their result, answering each request they yield with ``answer``.

    An exception from ``answer`` is raised inside the steps at the request.

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


async def adrive(steps: Generator[Ask, Answer, T], answer: Callable[[Ask], Awaitable[Answer]]) -> T:
    """Async twin of :func:`drive`: each answer is awaited (:func:`drive` runs this loop too)."""
    try:
        request = next(steps)
        while True:
            try:
                reply = await answer(request)
            except Exception as err:
                request = steps.throw(err)
            else:
                request = steps.send(reply)
    except StopIteration as done:
        return done.value


@dataclass(frozen=True)
class Call:
    """One outside call of a shared body: a sync function and its async twin, with arguments."""

    sync: Callable[..., Any]
    asynchronous: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def run(self) -> Any:
        """Call the sync function."""
        return self.sync(*self.args, **self.kwargs)

    def arun(self) -> Awaitable[Any]:
        """Call the async function (the awaitable it returns)."""
        return self.asynchronous(*self.args, **self.kwargs)


Steps = Generator[Call, Any, T]
"""A shared body whose requests are :class:`Call` objects."""


def drive_calls(steps: Steps[T]) -> T:
    """Run ``steps`` with the sync function of each :class:`Call`.

    Example:
        >>> async def never():
        ...     raise AssertionError
        >>> def steps():
        ...     return (yield Call(len, never, ("abc",)))
        >>> drive_calls(steps())
        3
    """
    return drive(steps, Call.run)


async def adrive_calls(steps: Steps[T]) -> T:
    """Async twin of :func:`drive_calls`: awaits the async function of each :class:`Call`."""
    return await adrive(steps, Call.arun)
