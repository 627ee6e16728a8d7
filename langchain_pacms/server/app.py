"""The selection service's routes and the inspector page, around one warm selector."""

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
from langchain_pacms.remote_wire import bearer_token
from langchain_pacms.selector import DEFAULT_MEMORY_CEILING, EMBEDDING_SHARE, ContextSelector
from langchain_pacms.server.front import Front, Guard, Scope, Worker, problem_response
from langchain_pacms.server.live import (
    SESSION_HEADER,
    JsonlTail,
    LiveSessions,
    SessionLog,
    WatchedLog,
    event_stream,
    session_id,
)
from langchain_pacms.server.schemas import SelectDebugResponse, SelectRequest, SelectResponse
from langchain_pacms.server.service import MAX_TEXT_CHARS, Service, strategy_info

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
    """Show :class:`SelectRequest` as the body of the POST routes in the OpenAPI schema."""
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
    """While serving, keep the startup objects out of the garbage collector's scans."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def create_app(
    selector: ContextSelector | None = None,
    *,
    max_candidates: int = 2000,
    max_text_chars: int = MAX_TEXT_CHARS,
    max_body_bytes: int = 8 * 1024 * 1024,
    body_timeout: float = 10.0,
    selection_threads: int | None = None,
    allowed_hosts: Iterable[str] | None = None,
    token: str | None = None,
    live: SessionLog | None = None,
    watch: str | os.PathLike[str] | None = None,
) -> Front:
    """Build the ASGI app around one warm selector.

    Args:
        selector: The selector every request uses (default: offline defaults).
        max_candidates: Largest pool accepted (more: 422).
        max_text_chars: Most characters of candidate texts and query in one request (more: 413).
        max_body_bytes: Largest request body accepted (more: 413).
        body_timeout: Seconds a client may take to send its body (slower: 408).
        selection_threads: Most selections worked on at once (default: the CPUs, at least 2).
        allowed_hosts: ``Host`` names accepted, ``"*"`` any (others: 400; default: loopback).
        token: If set, every request needs ``Authorization: Bearer <token>`` (else 401):
            visible ASCII characters, spaces only between them, as a header carries it.
        live: Where sessions' recent selections are kept (default: in this process).
        watch: A hook's JSONL selection log to follow, shown as session ``"watch"``.

    Returns:
        The ASGI application; ``.fastapi`` is the FastAPI app.

    Raises:
        ValueError: For a non-positive limit, or a token no header can carry.

    Example:
        >>> create_app(max_candidates=0)
        Traceback (most recent call last):
        ...
        ValueError: max_candidates must be a positive int, got 0
    """
    threads = max(2, os.cpu_count() or 1) if selection_threads is None else selection_threads
    for name, value in (
        ("max_candidates", max_candidates),
        ("max_text_chars", max_text_chars),
        ("max_body_bytes", max_body_bytes),
        ("selection_threads", threads),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (
        isinstance(body_timeout, (int, float)) and math.isfinite(body_timeout) and body_timeout > 0
    ):
        raise ValueError(f"body_timeout must be a positive number, got {body_timeout!r}")
    if token is not None:
        bearer_token(token)
    warm = selector if selector is not None else ContextSelector()
    sessions: SessionLog = live if live is not None else LiveSessions()
    kept_in = type(sessions).__name__
    if watch is not None:
        sessions = WatchedLog(JsonlTail(Path(watch), LiveSessions()), sessions)
    app = FastAPI(
        title="pacms selection service",
        version=__version__,
        description="Budgeted, query-aware context selection over HTTP, with a live inspector.",
        lifespan=_frozen_heap,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN; the schema is /openapi.json
        redoc_url=None,
    )
    app.state.selector = warm
    service = Service(warm, max_candidates, sessions, max_text_chars=max_text_chars)
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
            "max_text_chars": max_text_chars,
            "max_body_bytes": max_body_bytes,
            "selection_threads": threads,
            "live_sessions": kept_in,
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
        fields = ("id", "text", "kind", "mandatory", "position")
        return {
            "title": s.title,
            "query": s.query,
            "candidates": [{k: getattr(c, k) for k in fields} for c in s.candidates],
            "facts": [{"name": f.name, "ids": list(s.fact_ids(f))} for f in s.facts],
        }

    # a path that is not UTF-8 is shown with replacement characters (JSON carries only UTF-8)
    watching = None if watch is None else os.fsencode(watch).decode("utf-8", "replace")

    @app.get("/sessions")
    async def list_sessions() -> dict[str, Any]:
        """Sessions with recent selections: id, records kept, newest record's number."""
        listed = await anyio.to_thread.run_sync(sessions.summary)
        return {"sessions": listed, "watching": watching}

    @app.get("/sessions/{sid}/events", response_model=None)
    async def session_events(sid: str, request: Request) -> Response:
        """A session's recent selections, then each new one, as server-sent events."""
        try:
            session_id(sid)
        except ValueError as err:
            return problem_response(422, str(err).replace(SESSION_HEADER, "session"))
        last = request.headers.get("last-event-id", "0")
        # ASCII digits only: "²".isdigit() holds but int("²") raises
        after = int(last) if last.isascii() and last.isdigit() and len(last) < 19 else 0
        if not sessions.open_stream():  # nothing may fail between this and the stream's close
            return problem_response(503, f"live: {sessions.max_clients} streams are open already")
        return _EventStream(
            event_stream(sessions, sid, after),
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
    """Build the app from the JSON settings in the :data:`CONFIG_ENV` environment variable.

    They are :func:`create_app`'s keywords plus ``cache_url`` (Redis: shared embeddings, sessions)
    and ``live_prefix`` (the sessions' key prefix; default :func:`.live_redis.deployment_prefix`).
    The cache and the sessions use that Redis best effort, through one
    :class:`~.best_effort.Circuit`: after either fails, both leave it alone a while.

    Example:
        >>> os.environ[CONFIG_ENV] = '{"max_candidates": 50}'
        >>> app_from_env().fastapi.title
        'pacms selection service'
        >>> del os.environ[CONFIG_ENV]
    """
    options = json.loads(os.environ.get(CONFIG_ENV) or "{}")
    cache_url = options.pop("cache_url", None)
    live_prefix = options.pop("live_prefix", None)
    selector = None
    if cache_url is not None:
        from langchain_pacms.server.best_effort import BestEffortStore, Circuit
        from langchain_pacms.server.live_redis import RedisSessions, deployment_prefix

        circuit = Circuit()
        # the vectors this process reads are also held locally, in the selector's cache share
        local = int(DEFAULT_MEMORY_CEILING * EMBEDDING_SHARE)
        store = BestEffortStore(cache_url, local_bytes=local, circuit=circuit)
        selector = ContextSelector(cache_store=store)
        prefix = live_prefix or deployment_prefix(options.get("token"))
        options["live"] = RedisSessions(cache_url, prefix=prefix, circuit=circuit)
    return create_app(selector, **options)
