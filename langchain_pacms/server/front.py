"""The ASGI front of the service: who may call, body limits, and a worker thread per request."""

from __future__ import annotations

import functools
import hmac
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from langchain_pacms.server.live import SESSION_HEADER

__all__ = ["HARDENING", "LOOPBACK_HOSTS", "Front", "Guard", "Route", "Worker", "problem_response"]

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
Route = Callable[[bytes, str | None], Response]
"""A selection route's work: the body's bytes and the session header in, the response out."""

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The ``Host`` names a service accepts by default (with the host it is bound to)."""


def problem_response(status: int, detail: str, **extra: Any) -> JSONResponse:
    """A JSON error answer: ``{"detail": ..., **extra}`` with ``status``."""
    return JSONResponse({"detail": detail, **extra}, status_code=status)


def _host_name(value: bytes) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:80`` gives ``[::1]``)."""
    host = value.decode("latin-1").strip().lower()
    if host.startswith("["):  # "[::1]" or "[::1]:80"; anything else after "]" is no host
        name, _, rest = host.partition("]")
        return name + "]" if rest == "" or (rest[:1] == ":" and rest[1:].isdigit()) else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class Guard:
    """Who may call: an allowed ``Host`` (400 otherwise) and the bearer token if set (401)."""

    def __init__(self, hosts: Iterable[str] | None, token: str | None) -> None:
        names = LOOPBACK_HOSTS if hosts is None else tuple(hosts)
        self.any_host = "*" in names
        self.hosts = frozenset(
            f"[{n}]" if n.count(":") > 1 and not n.startswith("[") else n.lower() for n in names
        )
        self.expected = None if token is None else f"Bearer {token}".encode()

    def refusal(self, headers: Mapping[bytes, bytes]) -> Response | None:
        """The answer that refuses a request with these headers, or ``None`` to let it in."""
        host = headers.get(b"host")
        if not self.any_host and (host is None or _host_name(host) not in self.hosts):
            return problem_response(400, "Host: not an allowed host name (see --allow-host)")
        if self.expected is not None and not hmac.compare_digest(
            headers.get(b"authorization", b""), self.expected
        ):
            response = problem_response(401, "Authorization: a bearer token is required")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        return None


HARDENING = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
)
"""Headers on every answer: no sniffing, no framing, the page's own files only."""


async def _hardened(send: Any, message: dict[str, Any]) -> None:
    """``send(message)``, the :data:`HARDENING` headers added to a response's start."""
    if message.get("type") == "http.response.start":
        message = {**message, "headers": [*message.get("headers", ()), *HARDENING]}
    await send(message)


class Front:
    """Guards each request (400, 401), reads its body (415, 413, 408), then routes it."""

    def __init__(
        self,
        app: FastAPI,
        limit: int,
        timeout: float,
        routes: Mapping[str, Route],
        run: Worker,
        guard: Guard,
    ) -> None:
        self.fastapi = app
        self.app: ASGIApp = app
        self.limit, self.timeout = limit, timeout
        self.routes, self.run, self.guard = routes, run, guard

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        """Answer one ASGI event: refuse it, work a selection route, or pass it to FastAPI."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        send = functools.partial(_hardened, send)
        headers = dict(scope.get("headers") or [])
        refusal = self.guard.refusal(headers)
        if refusal is not None:
            return await refusal(scope, receive, send)
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        body = await self._body(headers, receive)
        if body is None:  # the client left while sending it
            return None
        if isinstance(body, Response):
            return await body(scope, receive, send)
        route = self.routes.get(scope["path"]) if scope["method"] == "POST" else None
        if route is not None and not scope.get("root_path"):
            session = headers.get(SESSION_HEADER.lower().encode())
            # latin-1, as Starlette reads headers: any byte decodes, and a bad id is then a 400
            named = None if session is None else session.decode("latin-1")
            work = functools.partial(route, body, named)
            response = await self.run.unless_gone(work, receive)
            if response is not None:  # None: the client left before its turn came
                await response(scope, receive, send)
            return None
        pending = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> dict[str, Any]:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    async def _body(self, headers: Mapping[bytes, bytes], receive: Any) -> bytes | Response | None:
        """The request's body, or the 415, 413 or 408 refusing it (``None``: the client left)."""
        media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if media != b"application/json":
            return problem_response(415, "Content-Type: the body must be sent as application/json")
        too_large = f"body: request body exceeds {self.limit} bytes (max_body_bytes)"
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return problem_response(413, too_large)
        chunks: list[bytes] = []
        size = 0
        more = True
        try:
            with anyio.fail_after(self.timeout):
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunks.append(message.get("body", b""))
                    size += len(chunks[-1])
                    if size > self.limit:
                        return problem_response(413, too_large)
                    more = message.get("more_body", False)
        except TimeoutError:
            return problem_response(408, f"request body not received within {self.timeout}s")
        return b"".join(chunks)


class Worker:
    """Runs each request's work on a worker thread, at most ``threads`` at a time, in turn."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._limiter: anyio.CapacityLimiter | None = None

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """The thread limit (created inside the event loop that uses it)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.threads)
        return self._limiter

    async def __call__(self, fn: Callable[[], Response]) -> Response:
        """``fn()`` on a worker thread, in turn."""
        return await anyio.to_thread.run_sync(fn, limiter=self.limiter)

    async def unless_gone(self, fn: Callable[[], Response], receive: Any) -> Response | None:
        """As a call, but ``None`` without working if the client leaves while it waits."""
        result: Response | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
            async with self.limiter:  # leaves the queue here if the client goes
                with anyio.CancelScope(shield=True):
                    # The limit's token is held: any idle thread of anyio's pool will do.
                    result = await anyio.to_thread.run_sync(fn)
            group.cancel_scope.cancel()  # the watcher's job is done
        return result


async def _cancel_on_disconnect(receive: Any, scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` once the client disconnects (the body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
