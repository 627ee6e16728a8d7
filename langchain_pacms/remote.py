"""``RemoteSelector``: a :class:`~langchain_pacms.selector.Selector` that asks ``pacms serve``."""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Collection, Generator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import httpx
import numpy as np

from langchain_pacms._steps import adrive, drive, method_parameters_of
from langchain_pacms.core import Strategy, available_strategies, rejection
from langchain_pacms.embeddings import HashedTfidfEmbeddings
from langchain_pacms.embeddings.profile import EmbedderProfile
from langchain_pacms.remote_wire import (
    DROPPED_CONNECTION,
    KEEPALIVE_EXPIRY,
    MAX_INT,
    SESSION_HEADER,
    AnswerReader,
    RemoteAnswerError,
    RemoteRequestError,
    answer_limit,
    bearer_token,
    check_answer,
    json_body,
    named_here,
    session_id,
    wire_ids,
)
from langchain_pacms.selector.caches import token_memo_bytes
from langchain_pacms.selector.fallback import FailureStreak, unscored_selection
from langchain_pacms.selector.inputs import normalise, relevant_mask, resolve_inputs, token_costs
from langchain_pacms.selector.options import check_strategy, resolve_options
from langchain_pacms.selector.protocol import SelectArguments, select_arguments
from langchain_pacms.selector.selection import Candidate, CandidateInput, Selection
from langchain_pacms.tokens import TokenCounter, resolve_token_counter

__all__ = [
    "MAX_INT",
    "SESSION_HEADER",
    "RemoteAnswerError",
    "RemoteRequestError",
    "RemoteSelector",
    "answer_limit",
    "check_answer",
    "session_id",
]


class RemoteSelector:
    """Select through a running ``pacms serve``; fail soft to recency.

    Token counts and the budget are resolved locally and sent. When the service fails, is late
    or gives a bad answer, the selection falls back to recency (``fell_back``, ``error``). A
    caller's mistake raises instead, as in a local selector: a strategy this process knows is
    checked with its options before anything is sent, and one the service refuses, or options
    it refuses, raise :class:`RemoteRequestError`.

    Args:
        url: The service's base URL.
        timeout: Seconds to wait for a whole answer before falling back.
        token_counter: Counter for the token counts (default: ``o200k_base``, as the service's).
        strategy: Strategy name sent with each request (``None``: the service's default).
        strategy_options: Options sent with that strategy.
        strict: Raise instead of falling back.
        token: Bearer token sent as ``Authorization`` (for ``pacms serve --token``): visible
            ASCII characters, spaces only between them.
        session: Session id sent as ``X-Pacms-Session`` (1-64 letters, digits or ``._:-``),
            under which the service keeps this client's recent selections for the inspector.

    Raises:
        ValueError: For a bad ``url``, ``timeout``, ``token`` or ``session``, or a strategy this
            process knows that rejects ``strategy_options``.
        TypeError: For a strategy that is not a name.

    Example:
        >>> RemoteSelector("http://127.0.0.1:8077/").url
        'http://127.0.0.1:8077'
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8077",
        *,
        timeout: float = 2.0,
        token_counter: TokenCounter | Any = None,
        strategy: str | None = None,
        strategy_options: Mapping[str, Any] | None = None,
        strict: bool = False,
        token: str | None = None,
        session: str | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL, got {url!r}")
        number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
        if not number or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if strategy is not None and not isinstance(strategy, str):
            raise TypeError("strategy must be a strategy name: a callable cannot be sent")
        if token is not None:
            bearer_token(token)
        if session is not None:
            session_id(session)
        self.token_counter = resolve_token_counter(token_counter, max_bytes=token_memo_bytes())
        self.strategy: str = strategy or "pacms"
        self.strategy_options = dict(strategy_options or {})
        self.strict = strict
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self._remote_strategy = strategy
        self._check_strategy(strategy, self.strategy_options)
        self._headers = {"Accept-Encoding": "identity", "Content-Type": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        if session is not None:
            self._headers[SESSION_HEADER] = session
        # idle connections are let go of before the service closes them (KEEPALIVE_EXPIRY)
        self._client_options: dict[str, Any] = {
            "timeout": self.timeout,
            "headers": self._headers,
            "limits": httpx.Limits(
                max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY
            ),
        }
        self._streak = FailureStreak("remote selection")
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        # each event loop's client, and what closes it when the loop shuts down
        self._aclients: dict[
            asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, AsyncGenerator[None, None]]
        ] = {}

    def __repr__(self) -> str:
        return (
            f"RemoteSelector(url={self.url!r}, timeout={self.timeout!r}, "
            f"strategy={self._remote_strategy!r}, strict={self.strict!r})"
        )

    @property
    def profile(self) -> EmbedderProfile:
        """The profile of the service's default embedder (the built-in lexical one).

        Example:
            >>> RemoteSelector().profile.name
            'hashed-tfidf'
        """
        return HashedTfidfEmbeddings.pacms_profile

    def count_tokens(self, candidates: Sequence[CandidateInput]) -> list[int]:
        """Each candidate's token cost, as it is sent (as a local selector counts it).

        Example:
            >>> RemoteSelector().count_tokens(["hello world", Candidate("x", tokens=7)])
            [2, 7]
        """
        return token_costs(normalise(candidates), self.token_counter)

    def resolve_options(
        self, strategy: str | Strategy | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[str | Strategy, dict[str, Any]]:
        """The strategy and options a local selector with :attr:`profile` would run.

        Example:
            >>> RemoteSelector(strategy="topk").resolve_options(None, {"k": 2})
            ('topk', {'k': 2})
        """
        return resolve_options(
            self.strategy, self.strategy_options, self.profile, strategy, options
        )

    def _check_strategy(self, name: str | None, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` if strategy ``name``, known here, rejects ``options``.

        A strategy this process does not know is the service's to judge.
        """
        if name is not None and name in available_strategies():
            check_strategy(name, options, self.profile)

    def _request(
        self,
        cands: Sequence[Candidate],
        tokens: np.ndarray,
        query: str,
        budget: int,
        strategy: Any,
        options: Mapping[str, Any],
        relevant_ids: Collection[str],
        wire: Mapping[str, str],
    ) -> dict[str, Any]:
        """The request's body; ``wire``: the ids sent otherwise (:func:`wire_ids`)."""
        relevant_mask(cands, relevant_ids)  # bad ids fail here, as they do in the local selector
        if strategy is not None and not isinstance(strategy, str):
            raise TypeError("RemoteSelector sends strategies by name; got a callable")
        if strategy is None or strategy == self._remote_strategy:
            name, opts = self._remote_strategy, {**self.strategy_options, **options}
        else:
            name, opts = strategy, dict(options)
        values = opts.pop("values", None)
        if values is not None:  # sent with their candidates, to pacms by name
            name = name or "pacms"
            # a strategy known here that takes no values refuses them, as a local selector does
            reason = None
            if name in available_strategies():
                reason = rejection(name, {"values": values}, probe=False)
            if reason is not None:
                raise TypeError(f"strategy {name!r}: {reason}")
            if len(values) != len(cands):
                raise ValueError(
                    f"values must give one collection per candidate ({len(cands)}), "
                    f"got {len(values)}"
                )
        self._check_strategy(name, opts)
        sent = tokens.tolist()
        if sum(sent) > MAX_INT:
            raise ValueError(
                f"the candidates' tokens add up to {sum(sent)}; the service takes at most 2**53"
            )
        far = next((c for c in cands if abs(int(c.position or 0)) > MAX_INT), None)
        if far is not None:
            raise ValueError(
                f"candidate {far.id!r} has position {far.position}; the service takes positions "
                "in [-2**53, 2**53]"
            )
        held = [None] * len(cands) if values is None else [sorted(map(str, v)) for v in values]
        return {
            "candidates": [
                {
                    "id": wire.get(str(c.id), c.id),
                    "text": c.text,
                    "kind": c.kind,
                    "mandatory": c.mandatory,
                    "tokens": int(t),
                    "position": int(c.position or 0),
                    **({} if v is None else {"values": v}),
                }
                for c, t, v in zip(cands, sent, held)
            ],
            "query": query,
            # the pool's tokens are at most 2**53: a larger budget keeps what 2**53 keeps
            "budget_tokens": min(budget, MAX_INT),
            "strategy": name,
            "strategy_options": opts,
            "relevant_ids": [wire.get(str(i), str(i)) for i in relevant_ids],
        }

    def _selecting_remotely(self, call: SelectArguments) -> Generator[Post, Any, Selection]:
        """The steps of :meth:`select` and :meth:`aselect`: they yield the payload to post."""
        candidates, query, budget, strategy, relevant_ids, options = call
        started = time.perf_counter()
        cands, tokens, allowed = resolve_inputs(candidates, query, budget, self.token_counter)
        timings = {"tokens": time.perf_counter() - started}
        error = None
        if cands:  # else nothing to send: an empty selection
            wire = wire_ids([str(c.id) for c in cands])
            payload = self._request(
                cands, tokens, query, allowed, strategy, options, relevant_ids, wire
            )
            try:
                body = named_here((yield from _posted(payload, self.timeout)), wire)
                timings["remote"] = time.perf_counter() - started
                selection = check_answer(cands, tokens.tolist(), allowed, body, timings)
            except RemoteRequestError:  # the caller's mistake, as a local selector raises it
                raise
            except Exception as err:  # recency within the budget, as a local selector falls back
                if self.strict:
                    raise
                timings["remote"] = time.perf_counter() - started
                error = self._streak.note(err)
            else:
                self._streak.end()
                return selection
        return unscored_selection(
            cands, tokens, allowed, "lastk", error=error, timings=timings, started=started
        )

    def _read(self, payload: dict[str, Any], deadline: float) -> Any:
        """POST ``payload`` with the shared sync client and read the answer in slices."""
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(**self._client_options)
            client = self._client
        body = json_body(payload)
        with client.stream("POST", f"{self.url}/select_debug", content=body) as response:
            reader = AnswerReader(response, answer_limit(payload), deadline, self.timeout)
            for chunk in response.iter_raw():
                reader.feed(chunk)
        return reader.answer()

    def _post(self, post: Post) -> Any:
        """:meth:`_read` on a daemon thread, given up on at the deadline: the decoded answer."""
        payload, deadline = post
        answer: Future[Any] = Future()

        def work() -> None:
            try:
                answer.set_result(self._read(payload, deadline))
            except BaseException as err:  # handed to the caller
                answer.set_exception(err)

        threading.Thread(target=work, name="pacms-remote-select", daemon=True).start()
        try:
            return answer.result(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise TimeoutError(f"no complete answer within {self.timeout}s") from None

    async def _aclient(self) -> httpx.AsyncClient:
        """This event loop's async client, closed when the loop shuts down.

        The loop closes it as it shuts down its async generators, as ``asyncio.run`` does at
        its end: the client is held by one, started on the loop (see :func:`_keep`).
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            # a loop closed without shutting down its async generators left its pool here: let
            # go of it (its sockets close as it is collected)
            for closed in [each for each in self._aclients if each.is_closed()]:
                del self._aclients[closed]
            held = self._aclients.get(loop)
        if held is not None:
            return held[0]
        client = httpx.AsyncClient(**self._client_options)
        keeper = _keep(client, weakref.ref(self), loop)
        await keeper.asend(None)  # runs to its yield at once: no other task comes between
        with self._lock:
            self._aclients[loop] = (client, keeper)
        return client

    def _forget(self, loop: asyncio.AbstractEventLoop, client: httpx.AsyncClient) -> None:
        """Let go of ``loop``'s entry if it holds ``client`` (and so ``loop``, through it)."""
        with self._lock:
            held = self._aclients.get(loop)
            if held is not None and held[0] is client:
                del self._aclients[loop]

    async def _apost(self, post: Post) -> Any:
        """POST the payload with this event loop's async client by the deadline; the answer."""
        payload, deadline = post
        client = await self._aclient()

        async def read() -> Any:
            body = json_body(payload)
            async with client.stream("POST", f"{self.url}/select_debug", content=body) as response:
                reader = AnswerReader(response, answer_limit(payload), deadline, self.timeout)
                async for chunk in response.aiter_raw():
                    reader.feed(chunk)
            return reader.answer()

        try:
            return await asyncio.wait_for(read(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise TimeoutError(f"no complete answer within {self.timeout}s") from None

    @method_parameters_of(select_arguments)
    def select(self, *args: Any, **kwargs: Any) -> Selection:
        """Select through the service (as ``ContextSelector.select``; bad input raises first).

        Example:
            >>> remote = RemoteSelector("http://127.0.0.1:9", timeout=0.2)  # nothing listens
            >>> sel = remote.select(["old", "new"], "new", budget=1)
            >>> sel.fell_back, sel.kept_ids
            (True, ('1',))
        """
        return drive(self._selecting_remotely(select_arguments(*args, **kwargs)), self._post)

    @method_parameters_of(select_arguments)
    async def aselect(self, *args: Any, **kwargs: Any) -> Selection:
        """Async twin of :meth:`select` (one connection pool per event loop)."""
        steps = self._selecting_remotely(select_arguments(*args, **kwargs))
        return await adrive(steps, self._apost)

    def close(self) -> None:
        """Close the sync connection pool and let go of the async ones (new ones open on use).

        An event loop's async pool closes on that loop: at once if it runs, else when it next
        runs (a loop closed already took its pool's connections with it). Await
        :meth:`aclose` to close the running loop's pool before going on.
        """
        with self._lock:
            client, self._client = self._client, None
            held = list(self._aclients.values())
            self._aclients.clear()
        if client is not None:
            client.close()
        # Dropped, each keeper is finalised: its loop, if open, schedules its closing there.
        del held

    async def aclose(self) -> None:
        """Close this event loop's async connection pool, then the others as :meth:`close`."""
        with self._lock:
            held = self._aclients.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held[1].aclose()
        self.close()


Post = tuple[dict[str, Any], float]
"""A request's payload and its deadline (``time.monotonic()``), as the steps yield them."""


def _posted(payload: dict[str, Any], timeout: float) -> Generator[Post, Any, Any]:
    """The answer to ``payload``, due within ``timeout`` (asked of the driver by a yield).

    A kept-alive connection that the service closes as the request goes out on it drops the
    request (:data:`~langchain_pacms.remote_wire.DROPPED_CONNECTION`): a selection is
    idempotent, so it is sent once more, on a new connection, within the same deadline.
    """
    post = (payload, time.monotonic() + timeout)
    try:
        return (yield post)
    except DROPPED_CONNECTION:
        return (yield post)


async def _keep(
    client: httpx.AsyncClient,
    owner: weakref.ref[RemoteSelector],
    loop: asyncio.AbstractEventLoop,
) -> AsyncGenerator[None, None]:
    """Hold ``client`` of ``owner`` until closed; ``loop``, where it starts, closes it at its end.

    An event loop closes the async generators started on it as it shuts down (``asyncio.run``
    does, at its end); one dropped unfinished is closed on its loop if that loop is open.
    """
    try:
        yield
    finally:
        selector = owner()
        if selector is not None:
            selector._forget(loop, client)
        await client.aclose()
