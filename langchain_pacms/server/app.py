"""The selection service: ``POST /select``, ``POST /select_debug``, ``GET /strategies``, the page.

One warm :class:`~langchain_pacms.selector.ContextSelector` serves every request (its embedding
cache is shared and thread-safe, and a pool that repeats the last one reuses its problem). Each
POST is one call on a worker thread, off the event loop, with at most ``selection_threads`` at
work at once (more wait their turn in arrival order): the body is validated by pydantic
straight from its bytes, and the answer is written as JSON without a second validation pass
(``/select`` builds no per-candidate verdicts; see :mod:`.service`). Every request must name an
allowed ``Host`` (loopback names by default: a guard against DNS rebinding) and, when the app
has a token, carry it as ``Authorization: Bearer <token>``; a body must be sent as
``application/json`` (see :mod:`.front`). A selection whose request names a session (the
:data:`~langchain_pacms.server.live.SESSION_HEADER` header) is kept among that session's recent
selections, which ``GET /sessions/{id}/events`` streams to the page as server-sent events
(:mod:`langchain_pacms.server.live`); with ``watch=``, so are the records a hook appends to a
JSONL selection log.

Example:
    >>> app = create_app(max_candidates=10)
    >>> sorted(r.path for r in app.fastapi.routes if r.path.startswith("/s"))
    ['/select', '/select_debug', '/sessions', '/sessions/{sid}/events', '/static', '/strategies']
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import os
from collections.abc import AsyncIterator, Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles

from langchain_pacms import __version__
from langchain_pacms.core import available_strategies
from langchain_pacms.demo import load_demo_session
from langchain_pacms.selector import DEFAULT_MEMORY_CEILING, EMBEDDING_SHARE, ContextSelector
from langchain_pacms.server.front import Front, Guard, Scope, Worker, problem_response
from langchain_pacms.server.live import (
    SESSION_HEADER,
    WATCH_SESSION,
    JsonlTail,
    LiveSessions,
    event_stream,
    session_id,
)
from langchain_pacms.server.schemas import SelectDebugResponse, SelectRequest, SelectResponse
from langchain_pacms.server.service import Service, strategy_info

__all__ = ["CONFIG_ENV", "app_from_env", "create_app"]

STATIC = resources.files("langchain_pacms") / "server" / "static"
REF = "#/components/schemas/"
BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": REF + "SelectRequest"}}},
    }
}


CONFIG_ENV = "PACMS_SERVE_CONFIG"
"""The environment variable :func:`app_from_env` reads its settings from (a JSON object)."""


def _session(request: Request) -> str | None:
    return request.headers.get(SESSION_HEADER)


class _EventStream(StreamingResponse):
    """A streamed response that calls ``on_close`` when it ends, however it ends."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None], **kw: Any):
        super().__init__(content, **kw)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


def _documented(app: FastAPI) -> None:
    """Show :class:`SelectRequest` as the body of the POST routes in the OpenAPI schema.

    The routes read their body themselves (see :class:`Service`), so FastAPI does not see it.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            request = SelectRequest.model_json_schema(ref_template=REF + "{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(request.pop("$defs", {}))
            components["SelectRequest"] = request
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def _frozen_heap(app: FastAPI) -> AsyncIterator[None]:
    """While serving, keep what exists at startup out of the cyclic garbage collector's scans.

    Modules, the tokenizer's tables and the warm selector are tens of thousands of objects that
    live as long as the process; a full collection that walks them all holds the interpreter
    lock for tens of milliseconds, stalling every request in flight (measured: one such pause
    in 400 requests, 55 ms, against at most 3 ms with them frozen). Undone at shutdown.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def create_app(
    selector: ContextSelector | None = None,
    *,
    max_candidates: int = 2000,
    max_body_bytes: int = 8 * 1024 * 1024,
    body_timeout: float = 10.0,
    selection_threads: int | None = None,
    allowed_hosts: Iterable[str] | None = None,
    token: str | None = None,
    live: LiveSessions | None = None,
    watch: str | os.PathLike[str] | None = None,
) -> Front:
    """Build the ASGI app around one warm selector.

    Args:
        selector: The selector every request uses (default: offline defaults).
        max_candidates: Largest pool accepted (more: 422 naming ``candidates``).
        max_body_bytes: Largest request body accepted (more: 413).
        body_timeout: Seconds a client may take to send its body (slower: 408).
        selection_threads: Most selection requests worked on at once, each on a worker
            thread (more wait their turn in arrival order); default: the number of CPUs and
            at least 2, so one slow request always leaves a thread for the others.
        allowed_hosts: ``Host`` names accepted (the port aside); others get 400. Default:
            :data:`~langchain_pacms.server.front.LOOPBACK_HOSTS`. ``"*"`` accepts any.
        token: When set, every request must carry ``Authorization: Bearer <token>`` (401
            otherwise).
        live: Where the recent selections of each session are kept for ``GET /sessions``
            and its event streams (default: :class:`LiveSessions` with its default bounds).
        watch: A hook's JSONL selection log (its ``log_path``) to follow: each record appended
            to it is shown as the newest of session ``"watch"``.

    Returns:
        The ASGI application (FastAPI behind a small front that checks bodies and answers
        the selection routes); ``.fastapi`` is the FastAPI app.

    Raises:
        ValueError: For a non-positive limit or an empty token.

    Example:
        >>> create_app(max_candidates=0)
        Traceback (most recent call last):
        ...
        ValueError: max_candidates must be a positive int, got 0
    """
    threads = max(2, os.cpu_count() or 1) if selection_threads is None else selection_threads
    for name, value in (
        ("max_candidates", max_candidates),
        ("max_body_bytes", max_body_bytes),
        ("selection_threads", threads),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (
        isinstance(body_timeout, (int, float)) and math.isfinite(body_timeout) and body_timeout > 0
    ):
        raise ValueError(f"body_timeout must be a positive number, got {body_timeout!r}")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ValueError("token must be a non-empty string")
    warm = selector if selector is not None else ContextSelector()
    sessions = live if live is not None else LiveSessions()
    tail = None if watch is None else JsonlTail(Path(watch), sessions)
    app = FastAPI(
        title="pacms selection service",
        version=__version__,
        description="Budgeted, query-aware context selection over HTTP, with a live inspector.",
        lifespan=_frozen_heap,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN; the schema is /openapi.json
        redoc_url=None,
    )
    app.state.selector = warm
    service = Service(warm, max_candidates, sessions)
    run = Worker(threads)
    _documented(app)

    @app.post("/select", response_model=SelectResponse, openapi_extra=BODY)
    async def select(request: Request) -> Response:
        """Select under the budget; kept ids in order, token totals and flags."""
        work = functools.partial(service.select, await request.body(), _session(request))
        return await run(work)

    @app.post("/select_debug", response_model=SelectDebugResponse, openapi_extra=BODY)
    async def select_debug(request: Request) -> Response:
        """As ``/select``, plus every candidate's verdict (relevance, gain, pick rank)."""
        work = functools.partial(service.select_debug, await request.body(), _session(request))
        return await run(work)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        """Liveness and what the service runs."""
        return {
            "status": "ok",
            "version": __version__,
            "embeddings": type(warm.embeddings.embeddings).__name__,
            "embedder_profile": warm.profile.name,
            "default_strategy": warm.strategy if isinstance(warm.strategy, str) else "custom",
            "max_candidates": max_candidates,
            "max_body_bytes": max_body_bytes,
            "selection_threads": threads,
            "process": os.getpid(),
            "embedding_cache": {
                "store": None if warm.embeddings.store is None else repr(warm.embeddings.store),
                "hits": warm.embeddings.hits,
                "misses": warm.embeddings.misses,
            },
        }

    @app.get("/strategies")
    async def strategies() -> dict[str, Any]:
        """Registered strategies with the keyword options the service runs them with."""
        return {"strategies": [strategy_info(n, warm) for n in available_strategies()]}

    @app.get("/demo")
    async def demo() -> dict[str, Any]:
        """The bundled demo session: candidates, query and the facts the query needs."""
        s = load_demo_session()
        return {
            "title": s.title,
            "query": s.query,
            "candidates": [
                {
                    "id": c.id,
                    "text": c.text,
                    "kind": c.kind,
                    "mandatory": c.mandatory,
                    "position": c.position,
                }
                for c in s.candidates
            ],
            "facts": [{"name": f.name, "ids": list(s.fact_ids(f))} for f in s.facts],
        }

    @app.get("/sessions")
    async def list_sessions() -> dict[str, Any]:
        """Sessions with recent selections: id, records kept, newest record's number."""
        if tail is not None:
            await anyio.to_thread.run_sync(tail.poll)
        return {"sessions": sessions.summary(), "watching": None if tail is None else str(watch)}

    @app.get("/sessions/{sid}/events", response_model=None)
    async def session_events(sid: str, request: Request) -> Response:
        """A session's recent selections, then each new one, as server-sent events."""
        try:
            session_id(sid)
        except ValueError as err:
            return problem_response(422, str(err).replace(SESSION_HEADER, "session"))
        if not sessions.open_stream():
            return problem_response(503, f"live: {sessions.max_clients} streams are open already")
        last = request.headers.get("last-event-id", "0")
        after = int(last) if last.isdigit() and len(last) < 19 else 0
        poll = tail.poll if tail is not None and sid == WATCH_SESSION else None
        return _EventStream(
            event_stream(sessions, sid, after, poll),
            on_close=sessions.close_stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:
        return FileResponse(str(STATIC / "favicon.svg"), media_type="image/svg+xml")

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    routes = {"/select": service.select, "/select_debug": service.select_debug}
    guard = Guard(allowed_hosts, token)
    return Front(app, max_body_bytes, float(body_timeout), routes, run, guard)


def app_from_env() -> Front:
    """Build the app from the settings in the :data:`CONFIG_ENV` environment variable.

    The variable holds a JSON object of :func:`create_app`'s keyword arguments, plus
    ``cache_url``: a Redis URL whose :class:`~langchain_pacms.embeddings.redis_store.RedisByteStore`
    backs the selector's embedding cache (the ``redis`` extra), holding the vectors this process
    reads in as much memory as the selector's own cache would take. ``pacms serve`` sets it and
    hands this factory to uvicorn, which calls it in each worker process, so every worker has
    its own selector and, given a ``cache_url``, all of them share one cache.

    Example:
        >>> os.environ[CONFIG_ENV] = '{"max_candidates": 50}'
        >>> app_from_env().fastapi.title
        'pacms selection service'
        >>> del os.environ[CONFIG_ENV]
    """
    options = json.loads(os.environ.get(CONFIG_ENV) or "{}")
    cache_url = options.pop("cache_url", None)
    selector = None
    if cache_url is not None:
        from langchain_pacms.embeddings.redis_store import RedisByteStore

        # The vectors this process reads are also held here, in the share of memory the
        # selector gives its in-memory cache when it has no store.
        local = int(DEFAULT_MEMORY_CEILING * EMBEDDING_SHARE)
        selector = ContextSelector(cache_store=RedisByteStore(cache_url, local_bytes=local))
    return create_app(selector, **options)
