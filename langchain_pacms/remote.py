"""``RemoteSelector``: a :class:`~langchain_pacms.selector.Selector` that asks ``pacms serve``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
import weakref
from collections.abc import Collection, Generator, Mapping, Sequence
from concurrent.futures import Future
from types import MappingProxyType
from typing import Any

import httpx
import numpy as np

from langchain_pacms._steps import adrive, drive, method_parameters_of
from langchain_pacms.core import Strategy
from langchain_pacms.embeddings import HashedTfidfEmbeddings
from langchain_pacms.embeddings.profile import EmbedderProfile
from langchain_pacms.errors import PACMSError
from langchain_pacms.selector.caches import token_memo_bytes
from langchain_pacms.selector.fallback import FailureStreak, unscored_selection
from langchain_pacms.selector.inputs import normalise, relevant_mask, resolve_inputs, token_costs
from langchain_pacms.selector.options import resolve_options
from langchain_pacms.selector.protocol import SelectArguments, select_arguments
from langchain_pacms.selector.selection import Candidate, CandidateInput, Selection
from langchain_pacms.tokens import TokenCounter, resolve_token_counter

__all__ = ["RemoteAnswerError", "RemoteSelector", "answer_limit", "check_answer"]

ANSWER_BASE_BYTES = 64 * 1024
"""Bytes an answer may take whatever its pool (totals, timings, the strategy's ``info``)."""
ANSWER_BYTES_PER_CANDIDATE = 1024
"""Bytes an answer may take per candidate sent, besides its id."""


class RemoteAnswerError(PACMSError, ValueError):
    """The service's answer does not fit the request it answers (see :func:`check_answer`)."""


def answer_limit(payload: Mapping[str, Any]) -> int:
    """The most bytes an answer to ``payload`` may take (20 more per character of each id).

    Example:
        >>> answer_limit({"candidates": [{"id": "a"}, {"id": "bb"}]})
        67644
    """
    return ANSWER_BASE_BYTES + sum(
        ANSWER_BYTES_PER_CANDIDATE + 20 * len(c["id"]) for c in payload["candidates"]
    )


def _ids(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RemoteAnswerError(f"{name} is not a list of ids")
    if len(set(value)) != len(value):
        raise RemoteAnswerError(f"{name} repeats an id")
    return value


def _number(value: Any, name: str) -> float:
    with contextlib.suppress(OverflowError):  # an int too large for a float
        if not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    raise RemoteAnswerError(f"{name} is not a finite number")


def _scores(
    body: Mapping[str, Any], ids: Sequence[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Relevance and gains from the answer's verdicts, which must cover exactly ``ids``."""
    verdicts = body.get("candidates")
    if not isinstance(verdicts, list) or not all(isinstance(v, dict) for v in verdicts):
        raise RemoteAnswerError("candidates is not a list of verdicts")
    if sorted(str(v.get("id")) for v in verdicts) != sorted(ids) or len(verdicts) != len(ids):
        raise RemoteAnswerError("the service answered for other candidates than were sent")
    relevance = {v["id"]: _number(v.get("relevance"), "a relevance") for v in verdicts}
    gains = {v["id"]: _number(v["gain"], "a gain") for v in verdicts if v.get("gain") is not None}
    return relevance, gains


def check_answer(
    cands: Sequence[Candidate],
    tokens: Sequence[int],
    budget: int,
    body: Any,
    timings: Mapping[str, float] | None = None,
) -> Selection:
    """The :class:`Selection` a service's answer gives, or :class:`RemoteAnswerError`.

    Token totals, budget and ``over_budget`` are the sender's; the service's timings join as
    ``server_*``.
    """
    if not isinstance(body, dict):
        raise RemoteAnswerError("the answer is not a JSON object")
    ids = [str(c.id) for c in cands]
    cost = dict(zip(ids, (int(t) for t in tokens)))
    kept = set(_ids(body.get("kept_ids"), "kept_ids"))
    unknown = sorted(kept - set(ids))
    if unknown:
        raise RemoteAnswerError(
            f"kept_ids names {len(unknown)} id(s) not sent, e.g. {unknown[0]!r}"
        )
    order = _ids(body.get("pick_order"), "pick_order")
    if set(order) != kept:
        raise RemoteAnswerError("pick_order does not list the kept ids")
    mandatory = [cid for cid, c in zip(ids, cands) if c.mandatory]
    dropped = [cid for cid in mandatory if cid not in kept]
    if dropped:
        raise RemoteAnswerError(f"the answer drops mandatory id {dropped[0]!r}")
    kept_tokens = sum(cost[cid] for cid in kept)
    over = sum(cost[cid] for cid in mandatory) > budget
    if kept_tokens > budget and not (over and kept == set(mandatory)):
        raise RemoteAnswerError(f"the answer keeps {kept_tokens} tokens over a budget of {budget}")
    if not kept and min(cost.values(), default=budget + 1) <= budget:
        raise RemoteAnswerError("the answer keeps nothing although candidates fit the budget")
    relevance, gains = _scores(body, ids)
    server = body.get("timings")
    info, error = body.get("info") or {}, body.get("error")
    if not isinstance(server, dict) or not isinstance(info, dict):
        raise RemoteAnswerError("timings or info is not an object")
    if not isinstance(body.get("strategy"), str) or not isinstance(body.get("fell_back"), bool):
        raise RemoteAnswerError("strategy or fell_back is missing")
    if error is not None and not isinstance(error, str):
        raise RemoteAnswerError("error is not a string")
    seconds = {f"server_{k}": _number(v, "a timing") for k, v in server.items()}
    total = sum(cost.values())
    return Selection(
        candidates=tuple(cands),
        kept_ids=tuple(cid for cid in ids if cid in kept),
        pick_order=tuple(order),
        relevance=MappingProxyType(relevance),
        gains=MappingProxyType({k: g for k, g in gains.items() if k in kept}),
        tokens=MappingProxyType(cost),
        tokens_total=total,
        tokens_kept=kept_tokens,
        tokens_dropped=total - kept_tokens,
        budget=budget,
        strategy=body["strategy"],
        over_budget=over,
        fell_back=body["fell_back"],
        error=error,
        timings=MappingProxyType({**(timings or {}), **seconds}),
        info=MappingProxyType(info),
    )


class _Reader:
    """Reads one answer's raw bytes; refuses one over ``limit``, late, or content-encoded."""

    def __init__(self, response: httpx.Response, limit: int, deadline: float, timeout: float):
        self.response, self.limit, self.deadline, self.timeout = response, limit, deadline, timeout
        self.chunks: list[bytes] = []
        self.size = 0
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise RemoteAnswerError(f"the answer declares {declared} bytes, over {limit}")
        if response.headers.get("content-encoding", "identity") != "identity":
            raise RemoteAnswerError("the answer is content-encoded; identity was asked for")

    def feed(self, chunk: bytes) -> None:
        """Take one chunk, or raise once the answer is too large or too late."""
        self.size += len(chunk)
        if self.size > self.limit:
            raise RemoteAnswerError(f"the answer exceeds {self.limit} bytes")
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"no complete answer within {self.timeout}s")
        self.chunks.append(chunk)

    def answer(self) -> Any:
        """The decoded answer, or the service's error as ``RuntimeError``."""
        data = b"".join(self.chunks)
        status = self.response.status_code
        if status != 200:
            try:
                detail = json.loads(data)["detail"]
            except (ValueError, TypeError, KeyError):
                detail = data[:200].decode(errors="replace")
            raise RuntimeError(f"service answered {status}: {detail}")
        return json.loads(data)


class RemoteSelector:
    """Select through a running ``pacms serve``; fail soft to recency.

    Token counts and the budget are resolved locally and sent. When the service fails, is late
    or gives a bad answer, the selection falls back to recency (``fell_back``, ``error``).

    Args:
        url: The service's base URL.
        timeout: Seconds to wait for a whole answer before falling back.
        token_counter: Counter for the token counts (default: ``o200k_base``, as the service's).
        strategy: Strategy name sent with each request (``None``: the service's default).
        strategy_options: Options sent with that strategy.
        strict: Raise instead of falling back.
        token: Bearer token sent as ``Authorization`` (for ``pacms serve --token``).
        session: Session id sent as ``X-Pacms-Session`` (1-64 letters, digits or ``._:-``),
            under which the service keeps this client's recent selections for the inspector.

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
        self.token_counter = resolve_token_counter(token_counter, max_bytes=token_memo_bytes())
        self.strategy: str = strategy or "pacms"
        self.strategy_options = dict(strategy_options or {})
        self.strict = strict
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self._remote_strategy = strategy
        self._headers = {"Accept-Encoding": "identity"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        if session is not None:
            self._headers["X-Pacms-Session"] = session
        self._streak = FailureStreak()
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._aclients: weakref.WeakKeyDictionary[Any, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

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

    def _request(
        self,
        cands: Sequence[Candidate],
        tokens: np.ndarray,
        query: str,
        budget: int,
        strategy: Any,
        options: Mapping[str, Any],
        relevant_ids: Collection[str],
    ) -> dict[str, Any]:
        relevant_mask(cands, relevant_ids)  # bad ids fail here, as they do in the local selector
        if strategy is not None and not isinstance(strategy, str):
            raise TypeError("RemoteSelector sends strategies by name; got a callable")
        if strategy is None or strategy == self._remote_strategy:
            name, opts = self._remote_strategy, {**self.strategy_options, **options}
        else:
            name, opts = strategy, dict(options)
        values = opts.pop("values", None)
        if values is not None:  # sent with their candidates, to pacms by name
            if len(values) != len(cands):
                raise ValueError(
                    f"values must give one collection per candidate ({len(cands)}), "
                    f"got {len(values)}"
                )
            name = name or "pacms"
        held = [None] * len(cands) if values is None else [sorted(map(str, v)) for v in values]
        return {
            "candidates": [
                {
                    "id": c.id,
                    "text": c.text,
                    "kind": c.kind,
                    "mandatory": c.mandatory,
                    "tokens": int(t),
                    "position": int(c.position or 0),
                    **({} if v is None else {"values": v}),
                }
                for c, t, v in zip(cands, tokens.tolist(), held)
            ],
            "query": query,
            "budget_tokens": budget,
            "strategy": name,
            "strategy_options": opts,
            "relevant_ids": [str(i) for i in relevant_ids],
        }

    def _selecting_remotely(
        self, call: SelectArguments
    ) -> Generator[dict[str, Any], dict[str, Any], Selection]:
        """The steps of :meth:`select` and :meth:`aselect`: they yield the payload to post."""
        candidates, query, budget, strategy, relevant_ids, options = call
        started = time.perf_counter()
        cands, tokens, allowed = resolve_inputs(candidates, query, budget, self.token_counter)
        timings = {"tokens": time.perf_counter() - started}
        error = None
        if cands:  # else nothing to send: an empty selection
            payload = self._request(cands, tokens, query, allowed, strategy, options, relevant_ids)
            try:
                body = yield payload
                timings["remote"] = time.perf_counter() - started
                selection = check_answer(cands, tokens.tolist(), allowed, body, timings)
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
                self._client = httpx.Client(timeout=self.timeout, headers=self._headers)
            client = self._client
        with client.stream("POST", f"{self.url}/select_debug", json=payload) as response:
            reader = _Reader(response, answer_limit(payload), deadline, self.timeout)
            for chunk in response.iter_raw():
                reader.feed(chunk)
        return reader.answer()

    def _post(self, payload: dict[str, Any]) -> Any:
        """:meth:`_read` on a daemon thread, given up on at the deadline: the decoded answer."""
        deadline = time.monotonic() + self.timeout
        answer: Future[Any] = Future()

        def work() -> None:
            try:
                answer.set_result(self._read(payload, deadline))
            except BaseException as err:  # handed to the caller
                answer.set_exception(err)

        threading.Thread(target=work, name="pacms-remote-select", daemon=True).start()
        try:
            return answer.result(timeout=self.timeout)
        except TimeoutError:
            raise TimeoutError(f"no complete answer within {self.timeout}s") from None

    async def _apost(self, payload: dict[str, Any]) -> Any:
        """POST ``payload`` with this event loop's async client; the decoded answer."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            client = httpx.AsyncClient(timeout=self.timeout, headers=self._headers)
            self._aclients[loop] = client
        deadline = time.monotonic() + self.timeout

        async def read() -> Any:
            async with client.stream("POST", f"{self.url}/select_debug", json=payload) as response:
                reader = _Reader(response, answer_limit(payload), deadline, self.timeout)
                async for chunk in response.aiter_raw():
                    reader.feed(chunk)
            return reader.answer()

        try:
            return await asyncio.wait_for(read(), self.timeout)
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
        """Close the sync connection pool (a new one opens on the next call)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
