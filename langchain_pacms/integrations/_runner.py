"""The per-call plumbing shared by the LangGraph hook and the LangChain middleware.

``messages -> (memories, documents) -> candidates -> ContextSelector -> messages -> report``.
There is no selection logic here: budgets are resolved, candidates come from
:mod:`.messages`, the verdict from :class:`~langchain_pacms.selector.ContextSelector`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from langchain_pacms.integrations.config import SelectionConfig
from langchain_pacms.integrations.messages import (
    CONTEXT_MESSAGE_ID,
    apply_selection,
    content_text,
    messages_to_candidates,
    query_from_messages,
)
from langchain_pacms.integrations.report import SelectionLog, areport_selection, report_selection
from langchain_pacms.selector import Candidate, ContextSelector, Selection

__all__ = ["SelectionRunner"]

logger = logging.getLogger(__name__)

_NO_QUERY = "the most recent conversation"

def _tokens_of(counter: Callable[[str], int], texts: Sequence[str]) -> int:
    return sum(counter(t) for t in texts)


def _template_values(config: RunnableConfig | None, context: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict((config or {}).get("configurable") or {})
    if isinstance(context, Mapping):
        values.update(context)
    elif dataclasses.is_dataclass(context) and not isinstance(context, type):
        values.update(dataclasses.asdict(context))
    elif context is not None and hasattr(context, "model_dump"):
        values.update(context.model_dump())
    return values


def _without_old_context(messages: Sequence[Any]) -> list[BaseMessage]:
    """``messages`` as message objects, without a context message an earlier selection wrote.

    Tuples such as ``("user", "hi")``, dicts with ``role`` and ``content`` and strings are
    converted with LangChain's ``convert_to_messages``; message objects pass through as they
    are. This call builds its own context message from the memories and documents it keeps.
    """
    return [m for m in convert_to_messages(messages) if m.id != CONTEXT_MESSAGE_ID]


class SelectionRunner:
    """Select for each model call (sync or async) with one :class:`SelectionConfig`.

    Args:
        config: The validated options.
        selector: A :class:`ContextSelector` to reuse (default: a new one with ``embeddings``).
        embeddings: Embeddings for a new selector (default: the offline lexical embedder).
        source: Which integration runs it (``"hook"``, ``"middleware"``), for the reports.
    """

    def __init__(
        self,
        config: SelectionConfig,
        selector: ContextSelector | None = None,
        *,
        embeddings: Embeddings | None = None,
        source: str = "hook",
    ) -> None:
        if selector is not None and embeddings is not None:
            raise ValueError("pass either a selector or embeddings, not both")
        if selector is None:
            selector = ContextSelector(embeddings, strict=config.strict)
        self.config = config
        self.selector = selector
        self.strategy = config.strategy
        self.strategy_options = dict(config.strategy_options)
        self.query = config.query
        self.store = config.store
        self.memory_namespaces = tuple(config.memory_namespaces)
        self.memory_limit = config.memory_limit
        self.retriever = config.retriever
        self.log = SelectionLog(config.log_path) if config.log_path is not None else None
        self.strict = config.strict
        self.keep_latest_turn = config.keep_latest_turn
        self.tool_placeholders = config.tool_placeholders
        self.context_role = config.context_role
        self.source = source
        self.last_selection: Selection | None = None

    # -- small pieces ------------------------------------------------------------------------
    def budget(self, candidates: Sequence[Candidate] = ()) -> dict[str, Any]:
        """Keyword arguments for the selector's budget.

        A ``budget_ratio`` on its own is a fraction of the conversation's tokens: looked-up
        memories and documents among ``candidates`` compete for that budget but do not raise
        it.
        """
        budget = self.config.budget
        if budget.tokens is not None:
            return {"budget_tokens": budget.tokens}
        if budget.context_window is not None:
            return {"budget_tokens": budget.window_tokens()}
        assert budget.ratio is not None  # a Budget has exactly one kind
        conversation = [c for c in candidates if c.kind not in ("memory", "document")]
        if len(conversation) == len(candidates):  # nothing looked up: the selector's own rule
            return {"budget_ratio": budget.ratio}
        total = sum(self.selector.count_tokens(conversation))
        return {"budget_tokens": max(1, math.floor(total * budget.ratio))}

    def query_for(self, state: Any, messages: Sequence[BaseMessage]) -> str:
        """The query: ``query(state)`` if configured, else the latest human message."""
        query = self.query(state) if self.query is not None else query_from_messages(messages)
        if not isinstance(query, str):
            raise TypeError(f"query callable must return a str, got {type(query).__name__}")
        if query.strip():
            return query
        for message in reversed(messages):  # no human text: use the newest text there is
            text = content_text(message.content)
            if text.strip():
                return text
        return ""

    def namespaces(self, state: Any, config: RunnableConfig | None, context: Any) -> list[tuple]:
        """Memory namespaces with ``{placeholders}`` filled from the configurable and context."""
        values = _template_values(config, context)
        out = []
        for ns in self.memory_namespaces:
            try:
                if callable(ns):
                    out.append(tuple(ns(state, values)))
                else:
                    out.append(tuple(p.format(**values) if "{" in p else p for p in ns))
            except (KeyError, IndexError) as err:
                logger.warning("memory namespace %r needs %s; skipped", ns, err)
        return out

    def _select_kwargs(self, query: str, candidates: Sequence[Candidate]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {**self.budget(candidates), **self.strategy_options}
        if query.strip():
            kwargs["strategy"] = self.strategy
        else:  # nothing to be relevant to: recency
            kwargs["strategy"] = "lastk"
            for key in self.strategy_options:
                kwargs.pop(key, None)
        return kwargs

    def _finish(
        self, messages: Sequence[BaseMessage], selection: Selection, spans: Any
    ) -> list[BaseMessage]:
        if self.strict and selection.fell_back:
            raise RuntimeError(f"context selection fell back to recency: {selection.error}")
        self.last_selection = selection
        return apply_selection(messages, selection, spans, context_role=self.context_role)

    def _recover(self, messages: Sequence[BaseMessage], err: Exception) -> list[BaseMessage]:
        self._warn_failed(err)
        try:
            cands, spans = messages_to_candidates(messages, keep_latest_turn=self.keep_latest_turn)
            selection = self.selector.select(
                cands, _NO_QUERY, strategy="lastk", **self.budget()
            )
            return apply_selection(messages, selection, spans, context_role=self.context_role)
        except Exception as again:  # last resort: never stall the agent
            return self._pass_through(messages, again)

    async def _arecover(
        self, messages: Sequence[BaseMessage], err: Exception
    ) -> list[BaseMessage]:
        """Async twin of :meth:`_recover` (the recency selection embeds off the event loop)."""
        self._warn_failed(err)
        try:
            cands, spans = messages_to_candidates(messages, keep_latest_turn=self.keep_latest_turn)
            selection = await self.selector.aselect(
                cands, _NO_QUERY, strategy="lastk", **self.budget()
            )
            return apply_selection(messages, selection, spans, context_role=self.context_role)
        except Exception as again:  # last resort: never stall the agent
            return self._pass_through(messages, again)

    def _warn_failed(self, err: Exception) -> None:
        logger.warning("pacms %s: selection failed (%s: %s); keeping the most recent context",
                       self.source, type(err).__name__, err)

    def _pass_through(self, messages: Sequence[BaseMessage], err: Exception) -> list[BaseMessage]:
        logger.warning("pacms %s: recency fallback failed too (%s); passing messages through",
                       self.source, err)
        return list(messages)

    # -- sync --------------------------------------------------------------------------------
    def _memories(
        self, store: BaseStore | None, query: str, state: Any, config: Any, context: Any
    ) -> tuple[list[Any], list[Any], str | None]:
        memories: list[Any] = []
        documents: list[Any] = []
        errors = []
        store = self.store if self.store is not None else store
        if store is not None and self.memory_namespaces:
            for ns in self.namespaces(state, config, context):
                try:
                    memories += store.search(ns, query=query or None, limit=self.memory_limit)
                except Exception as err:
                    if self.strict:
                        raise
                    errors.append(f"{type(err).__name__}: {err}")
        if self.retriever is not None and query.strip():
            try:
                documents = list(self.retriever.invoke(query, config))
            except Exception as err:
                if self.strict:
                    raise
                errors.append(f"{type(err).__name__}: {err}")
        if errors:
            logger.warning("pacms %s: memory/document lookup failed: %s", self.source, errors)
        return memories, documents, "; ".join(errors) or None

    def run(
        self,
        messages: Sequence[BaseMessage],
        *,
        state: Any = None,
        config: RunnableConfig | None = None,
        store: BaseStore | None = None,
        context: Any = None,
    ) -> list[BaseMessage]:
        """Select the messages for one model call.

        Args:
            messages: The conversation (not modified).
            state: The graph state (for a ``query`` callable and namespace callables).
            config: The run config (callbacks for the custom event, namespace placeholders).
            store: The graph's store, used when none was configured.
            context: The runtime context (namespace placeholders).

        Returns:
            The messages to send.
        """
        messages = _without_old_context(messages)
        if not messages:
            return []
        try:
            query = self.query_for(state, messages)
            memories, documents, lookup_error = self._memories(
                store, query, state, config, context
            )
            cands, spans = messages_to_candidates(
                messages, memories=memories, documents=documents,
                keep_latest_turn=self.keep_latest_turn, tool_placeholders=self.tool_placeholders,
            )
            selection = self.selector.select(
                cands, query if query.strip() else _NO_QUERY, **self._select_kwargs(query, cands)
            )
            out = self._finish(messages, selection, spans)
        except Exception as err:
            if self.strict:
                raise
            return self._recover(messages, err)
        extra = {"memory_error": lookup_error} if lookup_error else {}
        report_selection(selection, query=query, source=self.source, config=config,
                         log=self.log, **extra)
        return out

    # -- async -------------------------------------------------------------------------------
    async def _amemories(
        self, store: BaseStore | None, query: str, state: Any, config: Any, context: Any
    ) -> tuple[list[Any], list[Any], str | None]:
        memories: list[Any] = []
        documents: list[Any] = []
        errors = []
        store = self.store if self.store is not None else store
        if store is not None and self.memory_namespaces:
            for ns in self.namespaces(state, config, context):
                try:
                    memories += await store.asearch(
                        ns, query=query or None, limit=self.memory_limit
                    )
                except Exception as err:
                    if self.strict:
                        raise
                    errors.append(f"{type(err).__name__}: {err}")
        if self.retriever is not None and query.strip():
            try:
                documents = list(await self.retriever.ainvoke(query, config))
            except Exception as err:
                if self.strict:
                    raise
                errors.append(f"{type(err).__name__}: {err}")
        if errors:
            logger.warning("pacms %s: memory/document lookup failed: %s", self.source, errors)
        return memories, documents, "; ".join(errors) or None

    async def arun(
        self,
        messages: Sequence[BaseMessage],
        *,
        state: Any = None,
        config: RunnableConfig | None = None,
        store: BaseStore | None = None,
        context: Any = None,
    ) -> list[BaseMessage]:
        """Async twin of :meth:`run`."""
        messages = _without_old_context(messages)
        if not messages:
            return []
        try:
            query = self.query_for(state, messages)
            memories, documents, lookup_error = await self._amemories(
                store, query, state, config, context
            )
            cands, spans = messages_to_candidates(
                messages, memories=memories, documents=documents,
                keep_latest_turn=self.keep_latest_turn, tool_placeholders=self.tool_placeholders,
            )
            selection = await self.selector.aselect(
                cands, query if query.strip() else _NO_QUERY, **self._select_kwargs(query, cands)
            )
            out = self._finish(messages, selection, spans)
        except Exception as err:
            if self.strict:
                raise
            return await self._arecover(messages, err)
        extra = {"memory_error": lookup_error} if lookup_error else {}
        await areport_selection(selection, query=query, source=self.source, config=config,
                                log=self.log, **extra)
        return out
