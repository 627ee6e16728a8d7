"""The selection service: ``POST /select``, ``POST /select_debug``, ``GET /strategies``, the page.

One warm :class:`~langchain_pacms.selector.ContextSelector` serves every request (its embedding
cache is shared and thread-safe, and a pool that repeats the last one reuses its problem). Each
POST is one call on a worker thread, off the event loop, with at most ``selection_threads`` at
work at once (more wait their turn in arrival order): the body is validated by pydantic
straight from its bytes, and the answer is written as JSON without a second validation pass
(``/select`` builds no per-candidate verdicts). Bad input is answered with a 4xx whose
``detail`` names the field. Every request must name an allowed ``Host`` (loopback names by
default: a guard against DNS rebinding) and, when the app has a token, carry it as
``Authorization: Bearer <token>``; a body must be sent as ``application/json``. Runs of more
than :data:`WORD_CAP` characters without whitespace are split before they are counted or
embedded, so no text costs the tokenizer more than ordinary prose of its length. A selection
whose request names a session (the :data:`~langchain_pacms.server.live.SESSION_HEADER` header)
is kept among that session's recent selections, which ``GET /sessions/{id}/events`` streams to
the page as server-sent events (:mod:`langchain_pacms.server.live`); with ``watch=``, so are the
records a hook appends to a JSONL selection log.

Example:
    >>> app = create_app(max_candidates=10)
    >>> sorted(r.path for r in app.fastapi.routes if r.path.startswith("/s"))
    ['/select', '/select_debug', '/sessions', '/sessions/{sid}/events', '/static', '/strategies']
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hmac
import inspect
import json
import math
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, MutableMapping
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError

from langchain_pacms import __version__
from langchain_pacms.core import available_strategies, check_options
from langchain_pacms.core.strategies import get_strategy
from langchain_pacms.demo import load_demo_session
from langchain_pacms.selector import (
    DEFAULT_MEMORY_CEILING,
    EMBEDDING_SHARE,
    Candidate,
    ContextSelector,
    Selection,
)
from langchain_pacms.server.live import (
    SESSION_HEADER,
    WATCH_SESSION,
    JsonlTail,
    LiveSessions,
    event_stream,
    session_id,
)
from langchain_pacms.server.schemas import SelectDebugResponse, SelectRequest, SelectResponse

__all__ = ["CONFIG_ENV", "LOOPBACK_HOSTS", "WORD_CAP", "app_from_env", "capped_words", "create_app"]

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
Route = Callable[[bytes, str | None], Response]

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
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The ``Host`` names a service accepts by default (with the host it is bound to)."""
WORD_CAP = 256
"""Longest run of non-whitespace characters counted or embedded as one word."""
_LONG_RUN = re.compile(rf"(?<!\S)\S{{{WORD_CAP + 1},}}")


def _split_run(match: re.Match[str]) -> str:
    run = match.group(0)
    return " ".join(run[i : i + WORD_CAP] for i in range(0, len(run), WORD_CAP))


def capped_words(text: str) -> str:
    """``text`` with each run of more than :data:`WORD_CAP` non-space characters split by spaces.

    A tokenizer's cost on one long word grows faster than its length (byte-pair merges over the
    whole run); split into pieces of :data:`WORD_CAP` characters it costs what prose of that
    length costs, and counts within a fraction of a percent of the whole run. The service
    counts and embeds texts so split (it never sends texts back). Linear in ``len(text)``.

    Example:
        >>> [len(w) for w in capped_words("ok " + "x" * 600).split()]
        [2, 256, 256, 88]
    """
    if len(text) <= WORD_CAP:
        return text
    return _LONG_RUN.sub(_split_run, text)


def _problem(status: int, detail: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"detail": detail, **extra}, status_code=status)


def _host_name(value: bytes) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:80`` gives ``[::1]``)."""
    host = value.decode("latin-1").strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class _Guard:
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
            return _problem(400, "Host: not an allowed host name (see --allow-host)")
        if self.expected is not None and not hmac.compare_digest(
            headers.get(b"authorization", b""), self.expected
        ):
            return JSONResponse(
                {"detail": "Authorization: a bearer token is required"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return None


def _is_json(headers: Mapping[bytes, bytes]) -> bool:
    media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    return media == b"application/json"


class _Front:
    """The ASGI front of the service: who may call, body limits, then the routes or FastAPI.

    Requests the guard refuses are answered 400 or 401, bodies not sent as
    ``application/json`` 415, bodies over ``limit`` bytes 413, bodies slower than ``timeout``
    408. A POST
    to one of ``routes`` (``/select``, ``/select_debug``) is answered here with one call on a
    worker thread, without FastAPI's middleware, routing and request objects in between (the
    same call FastAPI's routes of those paths make, which remain for the OpenAPI schema and for
    ``.fastapi`` used on its own). Everything else goes to FastAPI.
    """

    def __init__(
        self,
        app: FastAPI,
        limit: int,
        timeout: float,
        routes: Mapping[str, Route],
        run: _Worker,
        guard: _Guard,
    ) -> None:
        self.fastapi = app
        self.app: ASGIApp = app
        self.limit, self.timeout = limit, timeout
        self.routes = routes
        self.run = run
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        refusal = self.guard.refusal(headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        if not _is_json(headers):
            await _problem(415, "Content-Type: the body must be sent as application/json")(
                scope, receive, send
            )
            return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            with anyio.fail_after(self.timeout):
                more = True
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limit:
                        await self._too_large(scope, receive, send)
                        return
                    chunks.append(chunk)
                    more = message.get("more_body", False)
        except TimeoutError:
            await _problem(408, f"request body not received within {self.timeout}s")(
                scope, receive, send
            )
            return
        body = b"".join(chunks)
        route = self.routes.get(scope["path"]) if scope["method"] == "POST" else None
        if route is not None and not scope.get("root_path"):
            session = headers.get(SESSION_HEADER.lower().encode())
            work = functools.partial(route, body, None if session is None else session.decode())
            response = await self.run.unless_gone(work, receive)
            if response is not None:  # None: the client left before its turn came
                await response(scope, receive, send)
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Any, send: Any) -> None:
        response = _problem(413, f"body: request body exceeds {self.limit} bytes (max_body_bytes)")
        await response(scope, receive, send)


class _Worker:
    """Runs one request's work on a worker thread, at most ``threads`` at a time.

    Requests beyond that wait their turn in arrival order, so a burst is served one after
    another instead of every request sharing the interpreter at once (which stretches all of
    them, and adds a thread switch every few milliseconds); the event loop keeps answering
    other routes meanwhile. Given the request's ``receive``, a request whose client leaves
    while it waits for a thread is dropped unworked (``None``), so requests that clients gave
    up on do not hold up the queue; work already started runs to its end.
    """

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


def _field(loc: tuple[Any, ...]) -> str:
    parts = [p for p in loc if p != "body"]
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _strategy_info(name: str, selector: ContextSelector) -> dict[str, Any]:
    """A strategy's keyword options with the values the service runs it with.

    Each option's default, overridden by what the selector gives that strategy (its
    ``strategy_options`` for its own strategy; for ``pacms`` its embedder profile's threshold,
    gain floor and relevance feedback).
    """
    params = list(inspect.signature(get_strategy(name)).parameters.values())[1:]
    defaults = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
    runs = {**defaults, **selector.resolve_options(name, {})[1]}
    options = {}
    for key in defaults:
        value = runs[key]
        ok = value is None or isinstance(value, (bool, int, float, str))
        options[key] = value if ok and value is not inspect.Parameter.empty else None
    return {"name": name, "options": options}


class _OptionsProbe:
    """Run each strategy-and-options pair once on a two-item problem; remember the good ones.

    A bad option then always fails (a real pool whose mandatory items exceed the budget never
    runs the strategy), and a request that repeats accepted options pays a set lookup, not a
    solve. At most ``size`` accepted pairs are kept (the set starts afresh when full).
    """

    def __init__(self, selector: ContextSelector, size: int = 256) -> None:
        self.selector, self.size = selector, size
        self.accepted: set[tuple[str | None, str]] = set()

    def check(self, strategy: str | None, options: dict[str, Any]) -> None:
        key = (strategy, json.dumps(options, sort_keys=True))
        if key in self.accepted:
            return
        name, opts = self.selector.resolve_options(strategy, options)
        try:
            check_options(name, **opts)
        except ValueError as err:
            raise ValueError(f"strategy_options: {err}") from err
        if len(self.accepted) >= self.size:
            self.accepted.clear()
        self.accepted.add(key)


def _candidates(req: SelectRequest) -> list[Candidate]:
    """The request's candidates with their ids and positions resolved (default: the index).

    Their texts have long runs split (:func:`capped_words`).
    """
    return [
        Candidate(
            capped_words(c.text),
            str(i) if c.id is None else c.id,
            c.kind,
            i if c.position is None else c.position,
            c.mandatory,
            c.tokens,
        )
        for i, c in enumerate(req.candidates)
    ]


def _invalid(err: ValidationError) -> JSONResponse:
    """The 4xx for a body that is not JSON (400) or not a valid request (422)."""
    found = err.errors(include_url=False, include_context=False, include_input=False)
    errors = [{"field": _field(tuple(e["loc"])), "message": e["msg"]} for e in found]
    if any(e["type"] == "json_invalid" for e in found):
        return _problem(400, "body: malformed JSON", errors=errors)
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return _problem(422, detail, errors=errors)


def _summary(sel: Selection) -> dict[str, Any]:
    return {
        "kept_ids": list(sel.kept_ids),
        "pick_order": list(sel.pick_order),
        "strategy": sel.strategy,
        "budget": sel.budget,
        "tokens_total": sel.tokens_total,
        "tokens_kept": sel.tokens_kept,
        "tokens_dropped": sel.tokens_dropped,
        "over_budget": sel.over_budget,
        "fell_back": sel.fell_back,
        "error": sel.error,
        "timings": dict(sel.timings),
    }


def _debug(sel: Selection) -> dict[str, Any]:
    return {
        **_summary(sel),
        "candidates": [v.__dict__ for v in sel.verdicts()],
        "info": dict(sel.info),
    }


TEXT_PREVIEW = 200
"""Characters of each candidate's text kept with a session's record (for the page's detail)."""


def _live_record(req: SelectRequest, sel: Selection) -> dict[str, Any]:
    """What a session keeps of one selection: a hook log record's fields, with text previews."""
    ids = [str(i) if c.id is None else c.id for i, c in enumerate(req.candidates)]
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "source": "service",
        "query": req.query[:TEXT_PREVIEW],
        **sel.to_dict(),
        "texts": {i: c.text[:TEXT_PREVIEW] for i, c in zip(ids, req.candidates)},
    }


def _json(body: dict[str, Any]) -> Response:
    data = json.dumps(body, separators=(",", ":"), default=str).encode()
    return Response(data, media_type="application/json")


class _Service:
    """One request's work, start to end, as one call on a worker thread.

    Parsing and validating the body (pydantic straight from the bytes), the checks, the
    selection and the JSON answer all run there, so the event loop only moves bytes, and one
    large or slow request holds a worker thread, not the loop.
    """

    def __init__(self, selector: ContextSelector, max_candidates: int, live: LiveSessions) -> None:
        self.selector, self.max_candidates, self.live = selector, max_candidates, live
        self.probe = _OptionsProbe(selector)

    def select(self, raw: bytes, session: str | None = None) -> Response:
        """``POST /select``: the verdict in brief."""
        return self._answer(raw, session, debug=False)

    def select_debug(self, raw: bytes, session: str | None = None) -> Response:
        """``POST /select_debug``: the verdict with every candidate's scores."""
        return self._answer(raw, session, debug=True)

    def _answer(self, raw: bytes, session: str | None, *, debug: bool) -> Response:
        try:
            if session is not None:
                session_id(session)
        except ValueError as err:
            return _problem(400, str(err))
        try:
            req = SelectRequest.model_validate_json(raw)
        except ValidationError as err:
            return _invalid(err)
        n = len(req.candidates)
        if n > self.max_candidates:
            return _problem(
                422,
                f"candidates: {n} candidates exceed the limit of "
                f"{self.max_candidates} (max_candidates)",
            )
        if req.strategy is not None and req.strategy not in available_strategies():
            return _problem(
                422,
                f"strategy: unknown strategy {req.strategy!r}; "
                f"choose from {available_strategies()}",
            )
        cands = _candidates(req)
        ids = [str(c.id) for c in cands]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            for index, cid in enumerate(ids):
                if cid in seen:
                    return _problem(422, f"candidates[{index}].id: duplicate id {cid!r}")
                seen.add(cid)
        try:
            self.probe.check(req.strategy, req.strategy_options)
            sel = self.selector.select(
                cands,
                capped_words(req.query),
                budget_tokens=req.budget_tokens,
                budget_ratio=req.budget_ratio,
                strategy=req.strategy,
                relevant_ids=req.relevant_ids,
                **req.strategy_options,
            )
        except TypeError as err:
            return _problem(422, f"strategy_options: {err}")
        except ValueError as err:  # the messages name the field or option
            return _problem(422, str(err))
        if session is not None:
            self.live.add(session, _live_record(req, sel))
        return _json(_debug(sel) if debug else _summary(sel))


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

    The routes read their body themselves (see :class:`_Service`), so FastAPI does not see it.
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
) -> _Front:
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
            :data:`LOOPBACK_HOSTS`. ``"*"`` accepts any.
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
    service = _Service(warm, max_candidates, sessions)
    run = _Worker(threads)
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
        return {"strategies": [_strategy_info(n, warm) for n in available_strategies()]}

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
            return _problem(422, str(err).replace(SESSION_HEADER, "session"))
        if not sessions.open_stream():
            return _problem(503, f"live: {sessions.max_clients} streams are open already")
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
    guard = _Guard(allowed_hosts, token)
    return _Front(app, max_body_bytes, float(body_timeout), routes, run, guard)


def app_from_env() -> _Front:
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
