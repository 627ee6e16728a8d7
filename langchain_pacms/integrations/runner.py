"""The per-call selection shared by the LangGraph hook and the LangChain middleware."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from langchain_pacms._lru import LruMemo
from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls, method_parameters_of
from langchain_pacms.integrations.config import SelectionConfig
from langchain_pacms.integrations.fit import Pool, fit
from langchain_pacms.integrations.folds import FoldStubs
from langchain_pacms.integrations.lookups import lookups
from langchain_pacms.integrations.pins import pin_spans
from langchain_pacms.integrations.request import (
    RequestCost,
    tool_name,
    tool_schema_text,
    tool_state,
)
from langchain_pacms.lifecycle import RECOVER_TOOL_NAME, with_unsent_noted
from langchain_pacms.messages import (
    CONTEXT_DOCUMENTS_HEADER,
    CONTEXT_MEMORIES_HEADER,
    CONTEXT_MESSAGE_ID,
    MessageMemo,
    SelectionLog,
    Span,
    agent_query,
    apply_removals,
    apply_selection,
    areport_selection,
    content_text,
    messages_to_candidates,
    query_from_messages,
    report_selection,
    reshow_left_out,
    reusable_values,
    sent_tokens,
    span_messages,
    thread_id_of,
    traced_selection,
)
from langchain_pacms.selector import (
    DEFAULT_MEMORY_CEILING,
    Candidate,
    ContextSelector,
    Selection,
    Selector,
    recency_selection,
)
from langchain_pacms.tokens import TokenCounter

__all__ = ["RunnerViews", "SelectionRunner", "run_arguments"]

logger = logging.getLogger(__name__)

_VALUES_MEMO_CHARS = 8_000_000  # characters of candidate texts whose values are remembered
_LATEST_TURN = "system prompt and the latest turn"
_NEWEST_STEP = "system prompt, the latest human message and the newest step"
_OVER = " (the latest turn alone exceeds the budget)"
_FLOOR = (
    "; the fold stubs of earlier tool spans that fit, those whose values later calls used"
    " first, then oldest first (the stub floor)"
)


class _Recency:
    """Selects the newest candidates that fit, in this process (no embedder, no service)."""

    def __init__(self, token_counter: TokenCounter) -> None:
        self.token_counter = token_counter

    def select(self, candidates: Sequence[Any], query: str, *, budget: int, **_: Any) -> Selection:
        """:func:`~langchain_pacms.selector.recency_selection` (``query`` and options unread)."""
        return recency_selection(candidates, budget, self.token_counter)

    async def aselect(
        self, candidates: Sequence[Any], query: str, *, budget: int, **_: Any
    ) -> Selection:
        """Async twin of :meth:`select`."""
        return self.select(candidates, query, budget=budget)


def _text_length(text: str, _values: Any) -> int:
    """A memoised text's weight: its length (a named function, so a runner can be pickled)."""
    return len(text)


def _tool_rounds(pool: Pool) -> bool:
    """Whether ``pool`` selects among tool rounds: in a tool loop, or earlier rounds with calls."""
    return pool.in_turn or any(span.kind == "tool" and not span.mandatory for span in pool.spans)


def _without_old_context(messages: Sequence[Any]) -> list[BaseMessage]:
    """``messages`` converted (else ``TypeError``), removals applied, old context dropped."""
    if isinstance(messages, (str, bytes, BaseMessage)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of messages, got {type(messages).__name__}")
    try:
        converted = convert_to_messages(messages)
    except (NotImplementedError, ValueError) as err:
        raise TypeError(f"messages: {str(err).splitlines()[0]}") from err
    return [m for m in apply_removals(converted) if m.id != CONTEXT_MESSAGE_ID]


_Config = RunnableConfig | None
_RunArguments = tuple[Sequence[Any], Any, _Config, BaseStore | None, Any, Any, Sequence[Any] | None]


def run_arguments(
    messages: Sequence[Any],
    *,
    state: Any = None,
    config: RunnableConfig | None = None,
    store: BaseStore | None = None,
    context: Any = None,
    model: Any = None,
    tools: Sequence[Any] | None = None,
) -> _RunArguments:
    """The parameters of :meth:`SelectionRunner.run` and ``arun``, as a tuple in order.

    Example:
        >>> run_arguments(["hi"], model="m")
        (['hi'], None, None, None, None, 'm', None)
    """
    return messages, state, config, store, context, model, tools


class SelectionRunner:
    """Select for each model call (sync or async) with one :class:`SelectionConfig`.

    A failure falls back to recency, or raises under ``strict``.

    Args:
        config: The options.
        source: Which integration runs it (``"hook"``, ``"middleware"``), for the reports.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> runner = SelectionRunner(SelectionConfig(budget=20))
        >>> [m.content for m in runner.run([HumanMessage("hi")])]
        ['hi']
    """

    def __init__(self, config: SelectionConfig, *, source: str = "hook") -> None:
        selector = config.selector
        if not isinstance(selector, Selector):  # embeddings, or none: the offline embedder
            ceiling = config.memory_ceiling_bytes
            selector = ContextSelector(
                selector,
                strict=config.strict,
                embed_timeout=config.embed_timeout,
                memory_ceiling_bytes=DEFAULT_MEMORY_CEILING if ceiling is None else ceiling,
            )
        self.config = config
        self.selector: Selector = selector
        self.log = SelectionLog(config.log) if config.log is not None else None
        self.source = source
        self.last_selection: Selection | None = None
        self._memo = MessageMemo()  # texts and counts of the messages seen, between calls
        # id -> tool, counter, its state (``tool_state``), tokens
        self._tool_memo: LruMemo[int, tuple[Any, Any, Any, int]] = LruMemo(256)
        # candidate text -> its values; bounded by the texts' size, as it holds them
        self._values: LruMemo[str, frozenset[str]] = LruMemo(
            4096, max_bytes=_VALUES_MEMO_CHARS, weigh=_text_length
        )
        self._folds = FoldStubs(config.tool_loop)

    def resolve_budget(self, candidates: Sequence[Candidate], model: Any = None) -> int:
        """The token budget of one call, including what the selection does not see.

        A ``ratio`` is a share of the conversation; a ``fraction`` of ``model``'s (default: the
        configured one's) ``profile["max_input_tokens"]``, else ``ValueError``.

        Example:
            >>> SelectionRunner(SelectionConfig(budget=99)).resolve_budget([])
            99
        """
        budget = self.config.budget
        if budget.fraction is not None:
            model = self.config.model if model is None else model
            if model is None:
                raise ValueError(
                    f'budget=("fraction", {budget.fraction}) takes the share of a chat model\'s '
                    'profile["max_input_tokens"]: the pre-model hook does not see the model, so '
                    "pass SelectionConfig(model=<the agent's chat model>) (PACMSMiddleware reads "
                    "request.model)"
                )
            return budget.resolve(model=model)
        total = 0
        if budget.ratio is not None:
            conversation = [
                c
                for c in candidates
                if c.kind not in ("memory", "document") and not getattr(c.source, "stub", False)
            ]
            total = sum(self.selector.count_tokens(conversation))
        return budget.resolve(total=total)

    def unseen_tokens(self) -> int:
        """Tokens the model gets besides the selection: ``prompt`` and ``reserve_tokens``.

        Example:
            >>> SelectionRunner(SelectionConfig(budget=99, reserve_tokens=7)).unseen_tokens()
            7
        """
        prompt = self.config.prompt
        if prompt is None:
            return self.config.reserve_tokens
        message = SystemMessage(prompt) if isinstance(prompt, str) else prompt
        tokens = sent_tokens([message], self.selector.token_counter)
        return tokens + self.config.message_framing + self.config.reserve_tokens

    def tool_tokens(self, tools: Sequence[Any]) -> int:
        """The tokens of the bound tools' schemas (:func:`tool_schema_text`), each counted once.

        Example:
            >>> runner = SelectionRunner(SelectionConfig(budget=99))
            >>> runner.tool_tokens([{"name": "ls", "description": "List.", "parameters": {}}]) > 0
            True
        """
        counter = self.selector.token_counter
        total = 0
        for tool in tools:
            state = tool_state(tool)  # a tool edited in place is counted again
            known = self._tool_memo.get(id(tool))
            if (
                known is None
                or known[0] is not tool
                or known[1] is not counter
                or known[2] != state
            ):
                known = (tool, counter, state, counter(tool_schema_text(tool)))
                self._tool_memo.put(id(tool), known)
            total += known[3]
        return total

    def request(self, model: Any = None, tools: Sequence[Any] | None = None) -> RequestCost:
        """What a call's model and tools (default: the configured ones) add to the budget.

        Raises ``ValueError`` for a fraction budget without a model or profile, even if not strict.
        """
        tokens = self.tool_tokens(self.config.tools if tools is None else tools)
        # the request's own tools (the middleware's): a stub is worth sending only if the model
        # can call recover_context; a hook that is given none cannot tell
        recovers = tools is None or any(tool_name(t) == RECOVER_TOOL_NAME for t in tools)
        if self.config.budget.fraction is None:
            return RequestCost(None, tokens, recovers)
        return RequestCost(self.resolve_budget([], model), tokens, recovers)

    def query_for(self, state: Any, messages: Sequence[BaseMessage]) -> str:
        """The query: ``query(state)``, else by ``query_mode``; the newest text if that is blank."""
        query_fn = self.config.query
        if query_fn is not None:
            query = query_fn(state)
        elif self.config.query_mode == "agent":
            query = agent_query(messages)
        else:
            query = query_from_messages(messages)
        if not isinstance(query, str):
            raise TypeError(f"query callable must return a str, got {type(query).__name__}")
        if query.strip():
            return query
        texts = (content_text(m) for m in reversed(messages))  # no human text: the newest there is
        return next((text for text in texts if text.strip()), "")

    def candidates(
        self,
        messages: Sequence[BaseMessage],
        memories: Sequence[Any],
        documents: Sequence[Any],
        *,
        placeholders: bool = True,
        folds: Mapping[int, Sequence[BaseMessage]] | None = None,
        request: RequestCost | None = None,
        keep_first: bool = False,
    ) -> Pool:
        """The call's pool: candidates priced by what they send, the budget, the unseen tokens.

        With ``keep_latest_turn="auto"`` the latest turn is mandatory while it fits the budget;
        with ``keep_first`` so is the first message's span, while it fits with the rest.
        """
        keep = self.config.tool_loop.keep_latest_turn
        request = self.request() if request is None else request

        def cut(latest: bool) -> tuple[list[Candidate], list[Span]]:
            cands, spans = messages_to_candidates(
                messages,
                memories=memories,
                documents=documents,
                keep_latest_turn=latest,
                tool_placeholders=placeholders and self.config.tool_loop.placeholders,
                fold_stubs=folds,
                token_counter=self.selector.token_counter,
                memo=self._memo,
            )
            return self._framed(messages, cands), spans

        latest = keep is not False
        cands, spans = cut(latest)
        budget = self.resolve_budget(cands) if request.budget is None else request.budget
        unseen = self.unseen_tokens() + request.tools
        mandatory = _LATEST_TURN if latest else _NEWEST_STEP
        if keep == "auto" and self._mandatory_tokens(messages, cands) + unseen > budget:
            latest = False
            cands, spans = cut(latest)
            mandatory = _NEWEST_STEP + _OVER
        charged = self.context_tokens(cands)
        cands, pinned = pin_spans(messages, cands, budget - unseen - charged, keep_first)
        return Pool(
            cands,
            spans,
            mandatory,
            budget,
            unseen,
            charged=charged,
            in_turn=not latest,
            pinned=pinned,
        )

    def _mandatory_tokens(self, messages: Sequence[BaseMessage], cands: list[Candidate]) -> int:
        """What the mandatory candidates send alone: their tokens, and what their stubs list again.

        Sent alone, a fold stub shows again the locators it left out (see ``reshow_left_out``).
        """
        mandatory = [c for c in cands if c.mandatory]
        tokens = sum(int(c.tokens or 0) for c in mandatory)
        held = sorted(i for c in mandatory if isinstance(c.source, Span) for i in c.source.indices)
        alone = [messages[i] for i in held]
        again = [(a, b) for a, b in zip(alone, reshow_left_out(alone)) if a is not b]
        if not again:  # no stub lists anything again
            return tokens
        counter = self.selector.token_counter  # only the stubs that grew are counted again
        return (
            tokens
            + sent_tokens([b for _, b in again], counter)
            - sent_tokens([a for a, _ in again], counter)
        )

    def _keeps_first(self, config: RunnableConfig | None) -> bool:
        """Whether the first message must stay (``output_key="messages"``, no ``thread_id``).

        The hook then rewrites the history of a run whose sidecars are named after its first
        message (:func:`~langchain_pacms.messages.run_thread`): that message must not change.
        """
        return self.config.output_key == "messages" and thread_id_of(config) is None

    def _framed(self, messages: Sequence[BaseMessage], cands: list[Candidate]) -> list[Candidate]:
        """``cands``, each costing also the framing of the messages it sends, if any."""
        per = self.config.message_framing
        if not per:
            return cands
        return [
            dataclasses.replace(
                c, tokens=int(c.tokens or 0) + per * len(span_messages(messages, c.source))
            )
            for c in cands
        ]

    def context_tokens(self, candidates: Sequence[Candidate]) -> int:
        """The context message's cost besides its bullets, when the pool may fill it.

        Example:
            >>> from langchain_pacms.selector import Candidate
            >>> SelectionRunner(SelectionConfig(budget=99)).context_tokens([Candidate("hello")])
            0
        """
        kinds = {c.kind for c in candidates}
        pairs = (("memory", CONTEXT_MEMORIES_HEADER), ("document", CONTEXT_DOCUMENTS_HEADER))
        headers = [header for kind, header in pairs if kind in kinds]
        if not headers:
            return 0
        text = "\n\n".join(f"{header}\n" for header in headers)
        return self.selector.token_counter(text) + self.config.message_framing

    def _select_kwargs(self, query: str, tool_rounds: bool) -> tuple[dict[str, Any], bool]:
        """The selection's strategy options, and whether ``pacms`` covers the candidates' values.

        Values are covered (``ToolLoopOptions.cover_values``) only by ``pacms`` as it comes:
        options the user gave it are for its embedding coverage.
        """
        if not query.strip():  # nothing to be relevant to: recency
            return {"strategy": "lastk", "contiguous": False}, False
        chosen = self.config.strategy
        options = {} if chosen is None else dict(chosen.options)
        name = self.selector.strategy if chosen is None else chosen.strategy
        own = self.selector.strategy_options if name == self.selector.strategy else {}
        covers = tool_rounds and name == "pacms" and not (own or options)
        if name == "pacms":  # see SelectionConfig.strategy
            given = {**own, **options}
            loop = self.selector.profile.tool_loop_similarity_threshold
            if "relevance_feedback" not in given:
                options["relevance_feedback"] = 0.0
            if tool_rounds and "similarity_threshold" not in given and loop is not None:
                # tool outputs share their words: a looser kernel, and its greedy runs to
                # the budget; the fill still passes over near-copies only (docs/integrations.md)
                tool_loop = {
                    "fill_threshold": self.selector.profile.similarity_threshold,
                    "gain_floor": 0.0,
                    "similarity_threshold": loop,
                }
                options.update({k: v for k, v in tool_loop.items() if k not in given})
        strategy = None if chosen is None else chosen.strategy
        return {"strategy": strategy, **options}, covers and self.config.tool_loop.cover_values

    def _values_of(self, candidate: Candidate) -> frozenset[str]:
        """The values a candidate's text holds (paths, ids, numbers), memoised by text."""
        found = self._values.get(candidate.text)
        if found is None:
            found = reusable_values(candidate.text)
            self._values.put(candidate.text, found)
        return found

    def fit(
        self, messages: Sequence[BaseMessage], pool: Pool, query: str, *, local: bool = False
    ) -> Steps[tuple[Selection, list[BaseMessage]]]:
        """Select until what is sent fits the budget (see :func:`~.fit.fit`).

        ``local``: by recency, in this process, not by the selector
        (:func:`~langchain_pacms.selector.recency_selection`).
        """
        counter, framing = self.selector.token_counter, self.config.message_framing
        role = self.config.context_role
        options, covers = self._select_kwargs(query, _tool_rounds(pool))
        return (
            yield from fit(
                _Recency(counter) if local else self.selector,
                pool,
                query,
                options=options,
                apply=lambda sel: with_unsent_noted(
                    messages, apply_selection(messages, sel, pool.spans, context_role=role)
                ),
                sent_of=lambda out: sent_tokens(out, counter, memo=self._memo) + framing * len(out),
                lift_reused=self.config.tool_loop.lift_reused,
                values_of=self._values_of if covers else None,
                fallback=_Recency(counter),
            )
        )

    def _steps(
        self,
        messages: list[BaseMessage],
        state: Any,
        config: RunnableConfig | None,
        store: BaseStore | None,
        context: Any,
        request: RequestCost,
    ) -> Steps[tuple[list[BaseMessage], dict[str, Any] | None]]:
        """One call's steps: the messages to send and the summary the trace records."""
        if not messages:
            return [], None
        keep_first = self._keeps_first(config)
        try:
            query = self.query_for(state, messages)
            memories, documents, lookup_error = yield from lookups(
                self.config, self.source, store, query, state, config, context
            )
            counter = self.selector.token_counter
            folds = self._folds.variants(messages, counter, state) if request.recovers else {}
            pool = self.candidates(
                messages,
                memories,
                documents,
                folds={i: v.messages for i, v in folds.items()},
                request=request,
                keep_first=keep_first,
            )
            pool = self._folds.reused(messages, pool, self._memo)
            selection, out = yield from self.fit(messages, pool, query)
            if self.config.strict and selection.fell_back:
                raise RuntimeError(f"context selection fell back to recency: {selection.error}")
            folded = yield from self._folds.store(messages, selection, folds, config, state)
            floor = _FLOOR if selection.info.get("stub_floor") else ""
            extra: dict[str, Any] = {"mandatory": pool.mandatory + floor}
            if folded:
                extra["folded"] = folded
            if lookup_error:
                extra["memory_error"] = lookup_error
        except Exception as err:
            if self.config.strict:
                raise
            error = f"{type(err).__name__}: {err}"  # reported with the recency window below
            query, extra = "", {"fell_back": True, "error": error}
            try:
                fallback = self.candidates(
                    messages, (), (), placeholders=False, request=request, keep_first=keep_first
                )
            except Exception as again:  # last resort: never stall the agent
                logger.warning(
                    "pacms %s: selection failed (%s) and its recency fallback too (%s); "
                    "passing the messages through",
                    self.source,
                    error,
                    again,
                )
                return list(messages), {"source": self.source, "kept": len(messages), **extra}
            try:
                selection, out = yield from self.fit(messages, fallback, "")
            except Exception:  # the selector fails again (a service refusing): recency here
                selection, out = yield from self.fit(messages, fallback, "", local=True)
            selection = dataclasses.replace(selection, fell_back=True, error=error)
        self.last_selection = selection
        event = yield Call(
            report_selection,
            areport_selection,
            (selection,),
            {"query": query, "source": self.source, "config": config, "log": self.log, **extra},
        )
        return out, event

    def _traced(self, call: _RunArguments) -> Steps[list[BaseMessage]]:
        """The call's steps inside a ``pacms_selection`` run (see ``traced_selection``)."""
        messages, state, config, store, context, model, tools = call
        converted = _without_old_context(messages)
        request = self.request(model, tools)
        budget = self.config.budget
        chosen = self.config.strategy
        inputs = {
            "source": self.source,
            "messages": len(converted),
            "strategy": self.selector.strategy if chosen is None else chosen.strategy,
            "budget": {
                budget.kind: getattr(budget, budget.kind),
                **({"tokens": request.budget} if request.budget else {}),
            },
            "tool_tokens": request.tools,
            "selector": type(self.selector).__name__,
        }
        return (
            yield from traced_selection(
                lambda child: self._steps(converted, state, child, store, context, request),
                config,
                inputs,
            )
        )

    @method_parameters_of(run_arguments)
    def run(self, *args: Any, **kwargs: Any) -> list[BaseMessage]:  # noqa: D417 (*args: the parameters)
        """Select the messages for one model call (traced as a ``pacms_selection`` child run).

        Args:
            messages: The conversation (not modified); tuples and dicts are converted.
            state: The graph state (for a ``query`` callable and namespace callables).
            config: The run config (callbacks, namespace placeholders).
            store: The graph's store, used when none was configured.
            context: The runtime context (namespace placeholders).
            model: The chat model (default: the configured one), for a ``fraction`` budget.
            tools: The tools bound to it (default: the configured ones), charged to the budget.

        Returns:
            The messages to send.

        Raises:
            ValueError: For a fraction budget without a model or a model without a profile.
        """
        return drive_calls(self._traced(run_arguments(*args, **kwargs)))

    @method_parameters_of(run_arguments)
    async def arun(self, *args: Any, **kwargs: Any) -> list[BaseMessage]:
        """Async twin of :meth:`run`."""
        return await adrive_calls(self._traced(run_arguments(*args, **kwargs)), offload=True)


class RunnerViews:
    """What the hook and the middleware show of their :class:`SelectionRunner`."""

    runner: SelectionRunner

    @property
    def selector(self) -> Selector:
        """The selector (one warm embedding cache for the integration's whole life)."""
        return self.runner.selector

    @property
    def last_selection(self) -> Selection | None:
        """The most recent selection (for debugging; shared by concurrent runs)."""
        return self.runner.last_selection
