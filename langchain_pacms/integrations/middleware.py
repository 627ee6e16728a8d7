"""``PACMSMiddleware``: budgeted context selection for ``langchain.agents.create_agent``.

Needs LangChain v1 (the ``middleware`` extra): ``pip install "langchain-pacms[middleware]"``.

The middleware selects in ``wrap_model_call`` / ``awrap_model_call``: the outgoing request gets
the selected messages through ``request.override(messages=...)``; the agent state (the full
transcript) is not changed. The request's system message is counted as mandatory context and
stays where it is; kept memories and documents travel as one context message at the start of
``request.messages``, so the system prompt itself stays byte-stable for prompt caching.

Example:
    >>> from langchain.agents import create_agent  # doctest: +SKIP
    >>> agent = create_agent(model, tools, middleware=[PACMSMiddleware(budget_tokens=4000)])
    ... # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
except ImportError as err:  # pragma: no cover - exercised by a test that hides langchain
    raise ImportError(
        "PACMSMiddleware needs LangChain v1 (langchain.agents.middleware). Install it with: "
        'pip install "langchain-pacms[middleware]"'
    ) from err

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.retrievers import BaseRetriever
from langgraph.store.base import BaseStore

from langchain_pacms.integrations._runner import (
    DEFAULT_ANSWER_RESERVE,
    Namespace,
    SelectionRunner,
)
from langchain_pacms.selector import ContextSelector, Selection

__all__ = ["PACMSMiddleware"]


def _run_config() -> Any:
    try:
        from langgraph.config import get_config

        return get_config()
    except Exception:
        return None


class PACMSMiddleware(AgentMiddleware):
    """Select each model call's context under a token budget (request only, state untouched).

    Takes the same options as :func:`~langchain_pacms.integrations.create_pacms_hook`; the store
    defaults to the agent's store (``create_agent(..., store=...)``).

    Args:
        selector: A :class:`ContextSelector` to reuse (default: a new one with ``embeddings``).
        embeddings: Embeddings for a new selector (default: the offline lexical embedder).
        strategy: Strategy name (default: the selector's, ``pacms``).
        budget_tokens: Absolute token budget.
        budget_ratio: Fraction of ``context_window - answer_reserve`` (or, without a window, of
            the conversation's own tokens).
        context_window: The model's input window.
        answer_reserve: Tokens left for the answer when the budget comes from ``context_window``.
        query: ``state -> str`` giving the text to select for (default: latest human message).
        store: A LangGraph ``BaseStore`` with memories (default: the agent's store).
        memory_namespaces: Namespaces to search, ``{placeholders}`` filled from the configurable
            and the runtime context.
        memory_limit: Most items fetched per namespace.
        retriever: Optional retriever whose documents join the pool.
        log_path: Append one JSONL record per model call.
        strict: Raise on selection failure instead of falling back to recency.
        keep_latest_turn: Everything after the latest human message is mandatory.
        tool_placeholders: Offer call-only variants of tool spans with placeholder results.
        context_role: ``"system"`` or ``"human"``: role of the memory/document message.
        **strategy_options: Strategy options, e.g. ``relevance_weight="auto"``.

    Example:
        >>> mw = PACMSMiddleware(budget_tokens=4000, memory_namespaces=[("memories", "{user_id}")])
        >>> mw.name
        'PACMSMiddleware'
    """

    def __init__(
        self,
        selector: ContextSelector | None = None,
        *,
        embeddings: Embeddings | None = None,
        strategy: str | None = None,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
        context_window: int | None = None,
        answer_reserve: int = DEFAULT_ANSWER_RESERVE,
        query: Callable[[Any], str] | None = None,
        store: BaseStore | None = None,
        memory_namespaces: Sequence[Namespace] = (),
        memory_limit: int = 10,
        retriever: BaseRetriever | None = None,
        log_path: str | Path | None = None,
        strict: bool = False,
        keep_latest_turn: bool = True,
        tool_placeholders: bool = False,
        context_role: str = "system",
        **strategy_options: Any,
    ) -> None:
        super().__init__()
        self.tools = []
        self.runner = SelectionRunner(
            selector,
            embeddings=embeddings,
            strategy=strategy,
            budget_tokens=budget_tokens,
            budget_ratio=budget_ratio,
            context_window=context_window,
            answer_reserve=answer_reserve,
            query=query,
            store=store,
            memory_namespaces=memory_namespaces,
            memory_limit=memory_limit,
            retriever=retriever,
            log_path=log_path,
            strict=strict,
            keep_latest_turn=keep_latest_turn,
            tool_placeholders=tool_placeholders,
            context_role=context_role,
            source="middleware",
            strategy_options=strategy_options,
        )

    @property
    def selector(self) -> ContextSelector:
        """The selector (one warm embedding cache for the middleware's whole life)."""
        return self.runner.selector

    @property
    def last_selection(self) -> Selection | None:
        """The most recent selection (for debugging; shared by concurrent runs)."""
        return self.runner.last_selection

    @staticmethod
    def _split(request: ModelRequest) -> tuple[list[BaseMessage], bool]:
        if request.system_message is not None:
            return [request.system_message, *request.messages], True
        return list(request.messages), False

    @staticmethod
    def _rejoin(
        request: ModelRequest, selected: list[BaseMessage], has_system: bool
    ) -> ModelRequest:
        if has_system and selected and selected[0] is request.system_message:
            selected = selected[1:]
        return request.override(messages=cast("list[AnyMessage]", selected))

    @staticmethod
    def _store(request: ModelRequest) -> BaseStore | None:
        return getattr(request.runtime, "store", None) if request.runtime is not None else None

    @staticmethod
    def _context(request: ModelRequest) -> Any:
        return getattr(request.runtime, "context", None) if request.runtime is not None else None

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> Any:
        """Replace the request's messages by the selected ones, then call the model."""
        messages, has_system = self._split(request)
        selected = self.runner.run(
            messages, state=request.state, config=_run_config(), store=self._store(request),
            context=self._context(request),
        )
        return handler(self._rejoin(request, selected, has_system))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        messages, has_system = self._split(request)
        selected = await self.runner.arun(
            messages, state=request.state, config=_run_config(), store=self._store(request),
            context=self._context(request),
        )
        return await handler(self._rejoin(request, selected, has_system))
