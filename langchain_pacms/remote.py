"""``RemoteSelector``: a :class:`~langchain_pacms.selector.ContextSelector` that asks the service.

It is a ``ContextSelector`` (so the compressor, the hook and the middleware take it as their
``selector=``) whose selections are made by ``pacms serve`` over HTTP (``POST /select_debug``).
Token counts and the budget are resolved locally (:meth:`ContextSelector.resolve`, with the same
counter the integrations use) and sent with the candidates, so client and service agree on every
number. When the service is unreachable, slower than ``timeout`` or answers an error, the
selection falls back to recency within the budget (:meth:`ContextSelector.recency`, one warning
per outage) and says ``fell_back=True`` (or raises under ``strict=True``). It uses only the
selector's public API, and the drivers that run one body of steps sync or async
(:mod:`langchain_pacms._steps`).

Example:
    >>> remote = RemoteSelector("http://127.0.0.1:9", timeout=0.2)  # nothing listens there
    >>> sel = remote.select(["old", "new"], "new", budget_tokens=1)
    >>> sel.fell_back, sel.kept_ids
    (True, ('1',))
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Collection, Generator, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import httpx
import numpy as np

from langchain_pacms._steps import adrive, drive
from langchain_pacms.selector import (
    Candidate,
    CandidateInput,
    ContextSelector,
    Selection,
    relevant_mask,
)
from langchain_pacms.tokens import TokenCounter

__all__ = ["RemoteSelector"]


class RemoteSelector(ContextSelector):
    """Select through a running ``pacms serve``; fail soft to recency.

    Args:
        url: The service's base URL.
        timeout: Seconds to wait for an answer before falling back (connect and read).
        token_counter: Counter for the local token counts (default: tiktoken ``o200k_base``,
            as the service counts).
        strategy: Strategy sent with each request (``None``: the service's default).
        strategy_options: Options sent with that strategy.
        strict: Raise instead of falling back.

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
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL, got {url!r}")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not (0 < timeout < float("inf"))
        ):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if strategy is not None and not isinstance(strategy, str):
            raise TypeError("strategy must be a strategy name: a callable cannot be sent")
        super().__init__(
            token_counter=token_counter,
            strategy=strategy or "pacms",
            strategy_options=strategy_options,
            strict=strict,
        )
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self._remote_strategy = strategy
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._aclients: weakref.WeakKeyDictionary[Any, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    # -- the steps shared by select and aselect -----------------------------------------------
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
        return {
            "candidates": [
                {
                    "id": c.id,
                    "text": c.text,
                    "kind": c.kind,
                    "mandatory": c.mandatory,
                    "tokens": int(t),
                    "position": int(c.position or 0),
                }
                for c, t in zip(cands, tokens.tolist())
            ],
            "query": query,
            "budget_tokens": budget,
            "strategy": name,
            "strategy_options": opts,
            "relevant_ids": [str(i) for i in relevant_ids],
        }

    @staticmethod
    def _selection(
        cands: tuple[Candidate, ...], body: Mapping[str, Any], timings: dict[str, float]
    ) -> Selection:
        verdicts = {v["id"]: v for v in body["candidates"]}
        if set(verdicts) != {str(c.id) for c in cands}:
            raise ValueError("the service answered for other candidates than were sent")
        timings.update({f"server_{k}": float(v) for k, v in body["timings"].items()})
        return Selection(
            candidates=cands,
            kept_ids=tuple(body["kept_ids"]),
            pick_order=tuple(body["pick_order"]),
            relevance=MappingProxyType({k: float(v["relevance"]) for k, v in verdicts.items()}),
            gains=MappingProxyType(
                {k: float(v["gain"]) for k, v in verdicts.items() if v["gain"] is not None}
            ),
            tokens=MappingProxyType({k: int(v["tokens"]) for k, v in verdicts.items()}),
            tokens_total=int(body["tokens_total"]),
            tokens_kept=int(body["tokens_kept"]),
            tokens_dropped=int(body["tokens_dropped"]),
            budget=int(body["budget"]),
            strategy=str(body["strategy"]),
            over_budget=bool(body["over_budget"]),
            fell_back=bool(body["fell_back"]),
            error=body.get("error"),
            timings=MappingProxyType(timings),
            info=MappingProxyType(dict(body.get("info") or {})),
        )

    @staticmethod
    def _checked(response: httpx.Response) -> dict[str, Any]:
        if response.status_code != 200:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text[:200]
            raise RuntimeError(f"service answered {response.status_code}: {detail}")
        body: dict[str, Any] = response.json()
        return body

    def _fallback(
        self,
        err: Exception,
        cands: tuple[Candidate, ...],
        query: str,
        budget: int,
        timings: dict[str, float],
        started: float,
    ) -> Selection:
        """Recency within the budget (the base selector's fallback), or ``err`` when strict."""
        if self.strict:
            raise err
        timings["remote"] = time.perf_counter() - started
        selection = self.recency(cands, query, budget_tokens=budget, error=err)
        timings = {**selection.timings, **timings, "total": time.perf_counter() - started}
        return replace(selection, timings=MappingProxyType(timings))

    def _selecting_remotely(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        budget_tokens: int | None,
        budget_ratio: float | None,
        strategy: Any,
        relevant_ids: Collection[str],
        options: Mapping[str, Any],
    ) -> Generator[dict[str, Any], dict[str, Any], Selection]:
        """The steps of :meth:`select` and :meth:`aselect`: all but the request itself.

        They yield the payload to post and take back the service's checked answer
        (:meth:`_post` or :meth:`_apost` gives it); a failed request or an answer that does not
        fit falls back to recency, or is raised under ``strict``.
        """
        started = time.perf_counter()
        cands, tokens, budget = self.resolve(
            candidates, query, budget_tokens=budget_tokens, budget_ratio=budget_ratio
        )
        timings = {"tokens": time.perf_counter() - started}
        if not cands:
            return self.recency(cands, query, budget_tokens=budget)
        payload = self._request(cands, tokens, query, budget, strategy, options, relevant_ids)
        try:
            body = yield payload
            timings["remote"] = time.perf_counter() - started
            selection = self._selection(cands, body, timings)
        except Exception as err:
            return self._fallback(err, cands, query, budget, timings, started)
        self.note_recovery()
        return selection

    # -- sync and async ----------------------------------------------------------------------
    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload`` with the shared sync client; the checked answer."""
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout)
            client = self._client
        return self._checked(client.post(f"{self.url}/select_debug", json=payload))

    async def _apost(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload`` with this event loop's async client; the checked answer."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            client = self._aclients[loop] = httpx.AsyncClient(timeout=self.timeout)
        response = await asyncio.wait_for(
            client.post(f"{self.url}/select_debug", json=payload), self.timeout
        )
        return self._checked(response)

    def select(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        *,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
        strategy: Any = None,
        relevant_ids: Collection[str] = (),
        **options: Any,
    ) -> Selection:
        """Select through the service (same arguments as :meth:`ContextSelector.select`).

        Bad input raises here, before any request, exactly as the local selector does.
        """
        steps = self._selecting_remotely(
            candidates, query, budget_tokens, budget_ratio, strategy, relevant_ids, options
        )
        return drive(steps, self._post)

    async def aselect(
        self,
        candidates: Sequence[CandidateInput],
        query: str,
        *,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
        strategy: Any = None,
        relevant_ids: Collection[str] = (),
        **options: Any,
    ) -> Selection:
        """Async twin of :meth:`select` (one connection pool per event loop)."""
        steps = self._selecting_remotely(
            candidates, query, budget_tokens, budget_ratio, strategy, relevant_ids, options
        )
        return await adrive(steps, self._apost)

    def close(self) -> None:
        """Close the sync connection pool (a new one opens on the next call)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
