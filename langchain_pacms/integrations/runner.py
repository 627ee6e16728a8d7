"""The per-call plumbing shared by the LangGraph hook and the LangChain middleware.

``messages -> (memories, documents) -> candidates -> ContextSelector -> messages -> report``.
There is no selection logic here: budgets are resolved, candidates come from
:mod:`.messages`, the verdict from :class:`~langchain_pacms.selector.ContextSelector`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, SystemMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.store.base import BaseStore

from langchain_pacms._lru import LruMemo
from langchain_pacms._steps import Call, Steps, adrive_calls, drive_calls
from langchain_pacms.integrations.config import SelectionConfig
from langchain_pacms.integrations.messages import (
    CONTEXT_MESSAGE_ID,
    MessageMemo,
    Span,
    agent_query,
    apply_removals,
    apply_selection,
    content_text,
    messages_to_candidates,
    query_from_messages,
    sent_tokens,
)
from langchain_pacms.integrations.report import (
    SelectionLog,
    areport_selection,
    report_selection,
    selection_event,
    traced_selection,
)
from langchain_pacms.selector import (
    DEFAULT_MEMORY_CEILING,
    Candidate,
    ContextSelector,
    Selection,
)

__all__ = ["RunnerViews", "SelectionRunner", "tool_schema_text"]

logger = logging.getLogger(__name__)

_NO_QUERY = "the most recent conversation"
_PAGE = 100  # items per store.search page when a namespace is scanned
_MAX_ROUNDS = 6  # selections per call before keeping only the mandatory part
_GAP = 16  # tokens of room between a fitting round and one over budget not worth another round
_LATEST_TURN = "system prompt and the latest turn"
_NEWEST_STEP = "system prompt, the latest human message and the newest step"
_OVER = " (the latest turn alone exceeds the budget)"
_FLOOR = (
    "; the fold stubs of earlier tool spans that fit, those whose values later calls used"
    " first, then newest first (the stub floor)"
)


def _stub_floor(
    cands: Sequence[Candidate],
    room: int,
    first: Collection[int] = (),
    folded: Collection[int] = (),
) -> list[Candidate] | None:
    """The pool with fold stubs as the least their spans send, in floor order where they fit.

    Taken from the newest span back, each that still fits ``room`` with the mandatory part and
    the floor so far (the spans in ``first``, by their call's index, come before the others:
    those whose results later calls already used; one too large is passed over, so an older,
    smaller one can go in), each span's floor becomes mandatory: its stub, or the span
    itself when the stub costs no less or when the span is ``folded`` already (the lifecycle
    left its stub in the history). A span whose floor is its stub then costs only what it adds
    to the stub, so the selector decides which spans to show whole and the others go as their
    stubs. Stubs that do not fit stay alternatives to their spans. ``None`` when there is
    no fold stub, a cost is unknown, or no floor fits.
    """
    if any(c.tokens is None for c in cands):
        return None
    whole = {str(c.id): c for c in cands if isinstance(c.source, Span) and not c.source.stub}
    least_of: list[tuple[Candidate, Candidate]] = []  # (span, what its floor sends)
    for c in cands:
        if isinstance(c.source, Span) and c.source.sends:
            span = whole[c.source.full_id]
            least_of.append((span, span if int(span.tokens or 0) <= int(c.tokens or 0) else c))
        elif (
            str(c.id) in whole
            and not c.mandatory
            and c.source.indices
            and c.source.indices[0] in folded
        ):
            least_of.append((c, c))
    least_of.sort(
        key=lambda pair: (pair[0].source.indices[0] not in first, -int(pair[0].position or 0))
    )
    used = sum(int(c.tokens or 0) for c in cands if c.mandatory)
    floor: dict[str, Candidate] = {}  # span id -> its floor (the stub or the span)
    for span, least in least_of:
        if used + int(least.tokens or 0) > room:
            continue
        used += int(least.tokens or 0)
        floor[str(span.id)] = least
    if not floor:
        return None
    floored = {str(c.id) for c in floor.values()}
    out = []
    for c in cands:
        below = floor.get(str(c.id))
        if (
            isinstance(c.source, Span)
            and c.source.stub
            and c.source.full_id in floor
            and str(c.id) not in floored
        ):
            continue  # the span itself is the floor: its stub is no alternative
        if str(c.id) in floored:
            c = dataclasses.replace(c, mandatory=True)
        elif below is not None:  # a span over its stub: it costs what it adds
            c = dataclasses.replace(c, tokens=max(1, int(c.tokens or 0) - int(below.tokens or 0)))
        out.append(c)
    return out


def _settle_floor(
    selection: Selection, cands: Sequence[Candidate], shadowed: set[Any]
) -> Selection:
    """A floored selection in the pool's own terms.

    The stubs of spans kept whole leave it, and spans priced over their stubs carry their full
    cost again.
    """
    cost = {c.id: c.tokens for c in cands if c.tokens is not None}
    pool = tuple(
        c
        if c.mandatory or c.tokens == cost.get(c.id)
        else dataclasses.replace(c, tokens=cost[c.id])
        for c in selection.candidates
    )
    tokens = {
        **selection.tokens,
        **{str(c.id): int(c.tokens) for c in pool if c.tokens is not None},
    }
    kept = tuple(i for i in selection.kept_ids if i not in shadowed)
    total = sum(tokens.values())
    held = sum(tokens[i] for i in kept)
    return dataclasses.replace(
        selection,
        candidates=pool,
        kept_ids=kept,
        pick_order=tuple(i for i in selection.pick_order if i not in shadowed),
        gains={i: g for i, g in selection.gains.items() if i not in shadowed},
        tokens=tokens,
        tokens_total=total,
        tokens_kept=held,
        tokens_dropped=total - held,
    )


@dataclass(frozen=True)
class _Pool:
    """One call's candidates and what :meth:`SelectionRunner.fit` needs to know about them."""

    candidates: list[Candidate]
    spans: list[Span]
    mandatory: str  # which part of the conversation is mandatory, for the report
    budget: int  # the call's token budget
    unseen: int  # tokens the model receives besides the selection
    reused: frozenset[int] = frozenset()  # spans whose results later calls used (their stubs first)
    folded: frozenset[int] = frozenset()  # spans the lifecycle folded already (their own floor)
    in_turn: bool = False  # only the newest step is mandatory (a tool loop)


class _Request(NamedTuple):
    """What one model call's request adds to the budget: the model it goes to, its tools."""

    budget: int | None  # the call's budget, when the model's profile sets it
    tools: int  # tokens of the bound tools' schemas


def tool_schema_text(tool: Any) -> str:
    """A bound tool's schema as the budget counts it: ``convert_to_openai_tool``, as JSON.

    Example:
        >>> tool_schema_text({"name": "ls", "description": "List.", "parameters": {}})
        '{"function": {"description": "List.", "name": "ls", "parameters": {}}, "type": "function"}'
    """
    schema = convert_to_openai_tool(tool)
    return json.dumps(schema, sort_keys=True, ensure_ascii=False, default=str)


class _Fit(NamedTuple):
    """A selection round whose messages fit the budget."""

    sent: int  # the tokens its messages send, unseen prompt included
    selection: Selection
    out: list[BaseMessage]
    floor: bool  # whether the stub floor applied


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
    ``RemoveMessage`` entries are applied (see
    :func:`~langchain_pacms.integrations.messages.apply_removals`): neither they nor the
    messages they delete are sent.

    Raises:
        TypeError: For a ``messages`` that is not a sequence of messages, or an item that
            cannot be converted.
    """
    if isinstance(messages, (str, bytes, BaseMessage)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of messages, got {type(messages).__name__}")
    try:
        converted = convert_to_messages(messages)
    except (NotImplementedError, ValueError) as err:
        raise TypeError(f"messages: {str(err).splitlines()[0]}") from err
    return [m for m in apply_removals(converted) if m.id != CONTEXT_MESSAGE_ID]


class SelectionRunner:
    """Select for each model call (sync or async) with one :class:`SelectionConfig`.

    Each call: the query; memories from the store and documents from the retriever; the
    candidates; then selections until what is sent fits the budget (see :meth:`fit`); the
    report. The steps are written once; :meth:`run` and :meth:`arun` differ only in awaiting.

    Args:
        config: The validated options.
        selector: A :class:`ContextSelector` to reuse (default: a new one with ``embeddings``).
        embeddings: Embeddings for a new selector (default: the offline lexical embedder).
        source: Which integration runs it (``"hook"``, ``"middleware"``), for the reports.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> from langchain_pacms.integrations.config import Budget
        >>> runner = SelectionRunner(SelectionConfig(budget=Budget(tokens=20)))
        >>> [m.content for m in runner.run([HumanMessage("hi")])]
        ['hi']
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
            ceiling = config.memory_ceiling_bytes
            selector = ContextSelector(
                embeddings,
                strict=config.strict,
                embed_timeout=config.embed_timeout,
                memory_ceiling_bytes=DEFAULT_MEMORY_CEILING if ceiling is None else ceiling,
            )
        self.config = config
        self.selector = selector
        self.log = SelectionLog(config.log_path) if config.log_path is not None else None
        self.source = source
        self.last_selection: Selection | None = None
        self._memo = MessageMemo()  # texts and counts of the messages seen, between calls
        self._tool_memo: LruMemo[int, tuple[Any, Any, int]] = LruMemo(256)  # id -> tool, counter, n
        self._folds: Any = None  # the fold stubs of the spans seen (a FoldMemo), between calls

    # -- pure pieces -------------------------------------------------------------------------
    def budget_tokens(self, candidates: Sequence[Candidate]) -> int:
        """The token budget for one call, including what the selection does not see.

        A ``budget_ratio`` is a fraction of the conversation's tokens: looked-up memories and
        documents compete for that budget but do not raise it, and call-only variants of tool
        spans are not counted twice.

        Example:
            >>> from langchain_pacms.integrations.config import Budget
            >>> SelectionRunner(SelectionConfig(budget=Budget(tokens=99))).budget_tokens([])
            99
        """
        budget = self.config.budget
        if budget.tokens is not None:
            return budget.tokens
        if budget.context_window is not None:
            return budget.window_tokens()
        if budget.fraction is not None:
            if self.config.model is None:
                raise ValueError(
                    f'budget=("fraction", {budget.fraction}) takes the share of a chat model\'s '
                    'profile["max_input_tokens"]: the pre-model hook does not see the model, so '
                    "pass model=<the agent's chat model> (PACMSMiddleware reads request.model)"
                )
            return budget.model_tokens(self.config.model)
        assert budget.ratio is not None  # a Budget has exactly one kind
        conversation = [
            c
            for c in candidates
            if c.kind not in ("memory", "document") and not getattr(c.source, "stub", False)
        ]
        total = sum(self.selector.count_tokens(conversation))
        return max(1, math.floor(total * budget.ratio))

    def unseen_tokens(self) -> int:
        """Tokens the model receives besides the selection: ``prompt`` and ``reserve_tokens``.

        The schemas of the bound tools come on top (see :meth:`request`).

        Example:
            >>> from langchain_pacms.integrations.config import Budget
            >>> config = SelectionConfig(budget=Budget(tokens=99), reserve_tokens=7)
            >>> SelectionRunner(config).unseen_tokens()
            7
        """
        prompt = self.config.prompt
        if prompt is None:
            return self.config.reserve_tokens
        message = SystemMessage(prompt) if isinstance(prompt, str) else prompt
        framing = self.config.message_framing
        return (
            sent_tokens([message], self.selector.token_counter)
            + framing
            + self.config.reserve_tokens
        )

    def tool_tokens(self, tools: Sequence[Any]) -> int:
        """The tokens of the bound tools' schemas (:func:`tool_schema_text`), each counted once.

        Example:
            >>> from langchain_pacms.integrations.config import Budget
            >>> runner = SelectionRunner(SelectionConfig(budget=Budget(tokens=99)))
            >>> runner.tool_tokens([{"name": "ls", "description": "List.", "parameters": {}}]) > 0
            True
        """
        counter = self.selector.token_counter
        total = 0
        for tool in tools:
            known = self._tool_memo.get(id(tool))
            if known is None or known[0] is not tool or known[1] is not counter:
                known = (tool, counter, counter(tool_schema_text(tool)))
                self._tool_memo.put(id(tool), known)
            total += known[2]
        return total

    def request(self, model: Any = None, tools: Sequence[Any] | None = None) -> _Request:
        """What a call's model and bound tools add: the budget a profile sets, the tool tokens.

        ``model`` and ``tools`` default to the configured ones (the hook's); the middleware
        passes the request's. A ``("fraction", x)`` budget needs the model's
        ``profile["max_input_tokens"]``: without one this raises, whatever ``strict`` says.

        Raises:
            ValueError: For a fraction budget without a model, or a model without a profile.
        """
        budget = self.config.budget
        tokens = self.tool_tokens(self.config.tools if tools is None else tools)
        if budget.fraction is None:
            return _Request(None, tokens)
        if model is None:
            return _Request(self.budget_tokens([]), tokens)
        return _Request(budget.model_tokens(model), tokens)

    def query_for(self, state: Any, messages: Sequence[BaseMessage]) -> str:
        """The query: ``query(state)`` if configured, else by ``query_mode``.

        ``"agent"``: :func:`~langchain_pacms.integrations.messages.agent_query` (the task and
        the agent's latest step); ``"task"``: the latest human message.
        """
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
        for message in reversed(messages):  # no human text: use the newest text there is
            text = content_text(message)
            if text.strip():
                return text
        return ""

    def namespaces(self, state: Any, config: RunnableConfig | None, context: Any) -> list[tuple]:
        """Memory namespaces with ``{placeholders}`` filled from the configurable and context."""
        values = _template_values(config, context)
        out = []
        for ns in self.config.memory_namespaces:
            try:
                if callable(ns):
                    out.append(tuple(ns(state, values)))
                else:
                    out.append(tuple(p.format(**values) if "{" in p else p for p in ns))
            except (KeyError, IndexError) as err:
                logger.warning("memory namespace %r needs %s; skipped", ns, err)
        return out

    def candidates(
        self,
        messages: Sequence[BaseMessage],
        memories: Sequence[Any],
        documents: Sequence[Any],
        *,
        placeholders: bool = True,
        folds: Mapping[int, Sequence[BaseMessage]] | None = None,
        request: _Request | None = None,
    ) -> _Pool:
        """The candidates, their spans, which part is mandatory, the budget and unseen tokens.

        With ``keep_latest_turn="auto"`` the latest turn is mandatory while it fits the budget
        (with the system prompt and what the model receives unseen); when it alone exceeds it,
        only the task message, the newest span and the system prompt stay mandatory. The
        budget and the unseen tokens are worked out once, from the first cut (the second one
        holds the same conversation). ``folds`` are the fold-stub variants of tool spans (see
        :func:`~langchain_pacms.lifecycle.variants.fold_variants`). ``request`` is what the
        call's model and tools add (default: :meth:`request` of the configured ones).
        """
        keep = self.config.keep_latest_turn
        request = self.request() if request is None else request

        def cut(latest: bool) -> tuple[list[Candidate], list[Span]]:
            return messages_to_candidates(
                messages,
                memories=memories,
                documents=documents,
                keep_latest_turn=latest,
                tool_placeholders=placeholders and self.config.tool_placeholders,
                fold_stubs=folds,
                token_counter=self.selector.token_counter,
                memo=self._memo,
            )

        latest = keep is not False
        cands, spans = cut(latest)
        budget = self.budget_tokens(cands) if request.budget is None else request.budget
        unseen = self.unseen_tokens() + request.tools
        mandatory = _LATEST_TURN if latest else _NEWEST_STEP
        if keep == "auto":
            fixed = sum(self.selector.count_tokens([c for c in cands if c.mandatory]))
            framing = self.config.message_framing * sum(
                len(c.source.indices) for c in cands if c.mandatory and isinstance(c.source, Span)
            )
            if fixed + framing + unseen > budget:
                latest = False
                cands, spans = cut(latest)
                mandatory = _NEWEST_STEP + _OVER
        return _Pool(cands, spans, mandatory, budget, unseen, in_turn=not latest)

    def _select_kwargs(self, query: str, in_turn: bool = False) -> dict[str, Any]:
        if query.strip():
            options = dict(self.config.strategy_options)
            name = self.config.strategy or self.selector.strategy
            own = self.selector.strategy_options if name == self.selector.strategy else {}
            if name == "pacms":  # see SelectionConfig.strategy_options
                given = {**own, **options}
                loop = self.selector.profile.tool_loop_similarity_threshold
                if "relevance_feedback" not in given:
                    options["relevance_feedback"] = 0.0
                if in_turn and "similarity_threshold" not in given and loop is not None:
                    # a looser kernel; the fill still passes over near-copies only
                    options.setdefault("fill_threshold", self.selector.similarity_threshold)
                    options["similarity_threshold"] = loop
            return {"strategy": self.config.strategy, **options}
        return {"strategy": "lastk", "contiguous": False}  # nothing to be relevant to: recency

    def _apply(
        self, messages: Sequence[BaseMessage], selection: Selection, spans: Sequence[Span]
    ) -> list[BaseMessage]:
        return apply_selection(messages, selection, spans, context_role=self.config.context_role)

    # -- steps (one generator for the sync and the async path) -------------------------------
    def _namespace_items(self, store: BaseStore, ns: tuple, query: str) -> Steps[list[Any]]:
        """One namespace's memories: the nearest ones, or, without a vector index, a scan."""
        if query.strip() and getattr(store, "index_config", None):
            items = yield Call(
                store.search,
                store.asearch,
                (ns,),
                {"query": query, "limit": self.config.memory_limit},
            )
            return list(items)
        cap = self.config.memory_scan_limit
        found: list[Any] = []
        while len(found) <= cap:  # one item past the cap tells whether the cap cut it short
            want = min(_PAGE, cap + 1 - len(found))
            page = yield Call(
                store.search, store.asearch, (ns,), {"limit": want, "offset": len(found)}
            )
            found += page
            if len(page) < want:
                break
        if len(found) > cap:
            logger.warning(
                "pacms %s: namespace %r holds more than memory_scan_limit=%d items and the store "
                "has no vector index; only the first %d were considered",
                self.source,
                ns,
                cap,
                cap,
            )
        return found[:cap]

    def _lookups(
        self, store: BaseStore | None, query: str, state: Any, config: Any, context: Any
    ) -> Steps[tuple[list[Any], list[Any], str | None]]:
        memories: list[Any] = []
        documents: list[Any] = []
        errors = []
        store = self.config.store if self.config.store is not None else store
        if store is not None and self.config.memory_namespaces:
            for ns in self.namespaces(state, config, context):
                try:
                    memories += yield from self._namespace_items(store, ns, query)
                except Exception as err:
                    if self.config.strict:
                        raise
                    errors.append(f"{type(err).__name__}: {err}")
        retriever = self.config.retriever
        if retriever is not None and query.strip():
            try:
                documents = list((yield Call(retriever.invoke, retriever.ainvoke, (query, config))))
            except Exception as err:
                if self.config.strict:
                    raise
                errors.append(f"{type(err).__name__}: {err}")
        if errors:
            logger.warning("pacms %s: memory/document lookup failed: %s", self.source, errors)
        return memories, documents, "; ".join(errors) or None

    def fit(
        self, messages: Sequence[BaseMessage], pool: _Pool, query: str
    ) -> Steps[tuple[Selection, list[BaseMessage]]]:
        """Select until what is sent, framing and unseen prompt included, fits the budget.

        A round selects under the room left; when the messages it yields (context header, omission
        note and all, counted with :func:`sent_tokens`) exceed the budget, the room becomes what
        that round kept less the excess, and it selects again. Once a round fits after one that
        did not, the room between the two is halved while the gap is worth a round (more than 16
        tokens and 2% of the budget), and the fitting round that sends the most is returned
        (``info["rounds"]`` counts the selections). A tool span and its call-only variant
        are alternatives (so are a span and its fold stub): when both are picked the variant leaves
        the pool and it selects again. Fold stubs that fit are the floor (see
        ``SelectionConfig.fold_stubs``): a span kept whole simply replaces its stub, and
        ``info["stub_floor"]`` says whether the floor applied. With ``lift_reused`` the
        reused tool spans go to the selector as ``relevant_ids`` (``info["lifted"]`` counts
        them). After a few rounds with none that fits, only the mandatory part is kept. The
        returned selection carries the requested ``budget``, ``info["tokens_sent"]`` and
        ``over_budget`` = sent > budget (then exactly the mandatory part is kept).
        """
        budget, unseen, spans = pool.budget, pool.unseen, pool.spans
        kwargs = self._select_kwargs(query, pool.in_turn)
        cands = list(pool.candidates)
        fixed = {c.id for c in cands if c.mandatory}
        room = budget - unseen
        floor = False
        lifted = (
            [
                c.id
                for c in cands
                if isinstance(c.source, Span)
                and c.source.kind == "tool"
                and not (c.source.stub or c.mandatory)
                and c.source.indices[0] in pool.reused
            ]
            if self.config.lift_reused
            else []
        )
        fitted: _Fit | None = None  # the fitting round that sends the most
        low = over = 0  # the most room known to fit, the least known not to (0: none yet)
        rounds = 0
        for attempt in range(_MAX_ROUNDS + 1):
            if attempt == _MAX_ROUNDS:  # has not settled: keep only what must be kept
                if fitted is not None:
                    break  # the best fitting round stands
                room = 1
            floored = _stub_floor(cands, room, pool.reused, pool.folded)
            floor = floored is not None
            selection = yield Call(
                self.selector.select,
                self.selector.aselect,
                (cands if floored is None else floored, query if query.strip() else _NO_QUERY),
                {**kwargs, "budget_tokens": max(1, room), "relevant_ids": lifted},
            )
            rounds += 1
            kept = set(selection.kept_ids)
            shadowed = {
                c.id
                for c in selection.candidates
                if c.id in kept
                and isinstance(c.source, Span)
                and c.source.stub
                and c.source.full_id in kept
            }
            # A stub kept with its whole span: one of the floor gives way to the span; any other
            # leaves the pool, and the selection runs again.
            spare = {c.id for c in selection.candidates if c.id in shadowed and not c.mandatory}
            if spare:
                cands = [c for c in cands if c.id not in spare]
                continue
            if floored is not None:
                selection = _settle_floor(selection, cands, shadowed)
            out = self._apply(messages, selection, spans)
            sent = (
                sent_tokens(out, self.selector.token_counter, memo=self._memo)
                + self.config.message_framing * len(out)
                + unseen
            )
            if sent <= budget:
                if fitted is None or sent > fitted.sent:
                    fitted = _Fit(sent, selection, out, floor)
                # after a round that sent too much, the room between the two is searched
                # (halving) while the gap is worth a round: the best fitting round is sent
                low = max(low, room)
                if not over or over - low <= max(_GAP, budget // 50):
                    break
                room = (low + over) // 2
                continue
            # the floor's stubs are mandatory in the pool only while they fit: past the
            # budget (a stub shows left-out locators again), the next round has less room
            if room <= 1 or all(c.id in fixed for c in selection.kept):
                break
            over = min(over or room, room)
            if low:
                room = (low + over) // 2
                if room <= low:
                    break
                continue
            # below what this round kept (not just its room: a round that left slack would
            # pick the same again), by what the sent messages exceed the budget
            room = min(room, selection.tokens_kept) - (sent - budget)
        if fitted is not None and selection is not fitted.selection:
            sent, selection, out, floor = fitted
        info = {
            **selection.info,
            "tokens_sent": sent,
            "tokens_unseen": unseen,
            "rounds": rounds,
            "stub_floor": floor,
            "lifted": len(lifted),
        }
        return dataclasses.replace(
            selection, budget=budget, over_budget=sent > budget, info=info
        ), out

    def _fold_variants(self, messages: Sequence[BaseMessage]) -> Mapping[int, Any]:
        """The fold-stub variants of the tool spans (none unless ``fold_stubs``)."""
        if not self.config.fold_stubs:
            return {}
        from langchain_pacms.lifecycle.variants import FoldMemo, fold_variants

        if self._folds is None:
            self._folds = FoldMemo()
        return fold_variants(messages, token_counter=self.selector.token_counter, memo=self._folds)

    def _reused(self, messages: Sequence[BaseMessage], pool: _Pool) -> _Pool:
        """``pool`` with its reused tool spans, and those the lifecycle folded already.

        A span is reused when its results hold a value a later call took up
        (:func:`~langchain_pacms.lifecycle.variants.reused_spans`) or it holds the newest read
        of a file (:func:`~langchain_pacms.lifecycle.variants.latest_reads`): ``lift_reused``
        raises its relevance, and its stub goes first in the stub floor. A span whose results the
        lifecycle already replaced by a fold stub has no stub variant of its own: its floor is
        the span itself, and its values are its stub's and those the stub left out as shown
        elsewhere.
        """
        tools = [
            sp
            for sp in pool.spans
            if sp.kind == "tool" and not sp.stub and len(sp.indices) > 1 and not sp.mandatory
        ]
        if not tools or not (self.config.lift_reused or self.config.fold_stubs):
            return pool
        from langchain_pacms.lifecycle.heuristic import reusable_values
        from langchain_pacms.lifecycle.objects import LIFECYCLE_KEY
        from langchain_pacms.lifecycle.variants import latest_reads, reused_spans

        def mark(i: int) -> Mapping[str, Any]:
            return messages[i].additional_kwargs.get(LIFECYCLE_KEY) or {}

        folded = {sp.indices[0] for sp in tools if mark(sp.indices[-1]).get("state") == "folded"}
        # each result's values, found once per message (a folded span's are its stub's), and
        # those a folded span's stub left out as shown elsewhere (only folded spans have any)
        values = {
            sp.indices[0]: frozenset().union(
                *(self._memo.values(messages[j]) for j in sp.indices[1:]),
                reusable_values(
                    "\n".join(str(t) for j in sp.indices for t in mark(j).get("elsewhere") or ())
                )
                if sp.indices[0] in folded
                else frozenset(),
            )
            for sp in tools
        }
        reused = reused_spans(messages, values) | latest_reads(messages, values.keys())
        return dataclasses.replace(
            pool, reused=reused, folded=frozenset(folded) if self.config.fold_stubs else frozenset()
        )

    def _store_folds(
        self,
        messages: Sequence[BaseMessage],
        selection: Selection,
        folds: Mapping[int, Any],
        config: RunnableConfig | None,
    ) -> Steps[list[str]]:
        """Write the payload of every fold stub that is sent to the sidecar store.

        It runs before the messages go to the model, so ``recover_context`` finds each one.
        Returns the object ids written.
        """
        sent = [
            c.source.indices[0]
            for c in selection.kept
            if isinstance(c.source, Span) and c.source.sends
        ]
        if not sent:
            return []
        from langchain_pacms.lifecycle.node import thread_of
        from langchain_pacms.lifecycle.sidecar import SidecarStore

        assert self.config.sidecar_store is not None  # checked by SelectionConfig
        sidecars = SidecarStore(self.config.sidecar_store, thread_of(config, messages))
        records = [folds[i].record for i in sent]
        yield Call(sidecars.put_many, sidecars.aput_many, (records,))
        return [r.object_id for r in records]

    def _steps(
        self,
        messages: list[BaseMessage],
        state: Any,
        config: RunnableConfig | None,
        store: BaseStore | None,
        context: Any,
        request: _Request,
    ) -> Steps[tuple[list[BaseMessage], dict[str, Any] | None]]:
        """One call's selection: the messages to send and the summary the trace records."""
        if not messages:
            return [], None
        try:
            query = self.query_for(state, messages)
            memories, documents, lookup_error = yield from self._lookups(
                store, query, state, config, context
            )
            folds = self._fold_variants(messages)
            pool = self.candidates(
                messages,
                memories,
                documents,
                folds={i: v.messages for i, v in folds.items()},
                request=request,
            )
            pool = self._reused(messages, pool)
            selection, out = yield from self.fit(messages, pool, query)
            if self.config.strict and selection.fell_back:
                raise RuntimeError(f"context selection fell back to recency: {selection.error}")
            folded = yield from self._store_folds(messages, selection, folds, config)
        except Exception as err:
            if self.config.strict:
                raise
            logger.warning(
                "pacms %s: selection failed (%s: %s); keeping the most recent context",
                self.source,
                type(err).__name__,
                err,
            )
            failure = {"fell_back": True, "error": f"{type(err).__name__}: {err}"}
            try:
                fallback = self.candidates(messages, (), (), placeholders=False, request=request)
                selection, out = yield from self.fit(messages, fallback, "")
                return out, selection_event(selection, source=self.source, **failure)
            except Exception as again:  # last resort: never stall the agent
                logger.warning(
                    "pacms %s: recency fallback failed too (%s); passing messages through",
                    self.source,
                    again,
                )
                return list(messages), {"source": self.source, "kept": len(messages), **failure}
        self.last_selection = selection
        floor = _FLOOR if selection.info.get("stub_floor") else ""
        extra: dict[str, Any] = {"mandatory": pool.mandatory + floor}
        if folded:
            extra["folded"] = folded
        if lookup_error:
            extra["memory_error"] = lookup_error
        event = yield Call(
            report_selection,
            areport_selection,
            (selection,),
            {"query": query, "source": self.source, "config": config, "log": self.log, **extra},
        )
        return out, event

    def _traced(
        self,
        messages: Sequence[Any],
        state: Any,
        config: RunnableConfig | None,
        store: BaseStore | None,
        context: Any,
        model: Any,
        tools: Sequence[Any] | None,
    ) -> Steps[list[BaseMessage]]:
        """The call's steps inside a ``pacms_selection`` run (see ``traced_selection``)."""
        converted = _without_old_context(messages)
        request = self.request(model, tools)
        budget = {
            k: v
            for k, v in dataclasses.asdict(self.config.budget).items()
            if v is not None and k in ("tokens", "ratio", "context_window", "fraction")
        }
        inputs = {
            "source": self.source,
            "messages": len(converted),
            "strategy": self.config.strategy or self.selector.strategy,
            "budget": {**budget, **({"tokens": request.budget} if request.budget else {})},
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

    def run(
        self,
        messages: Sequence[Any],
        *,
        state: Any = None,
        config: RunnableConfig | None = None,
        store: BaseStore | None = None,
        context: Any = None,
        model: Any = None,
        tools: Sequence[Any] | None = None,
    ) -> list[BaseMessage]:
        """Select the messages for one model call.

        The selection is a ``pacms_selection`` child run of the run in ``config`` (see
        :func:`~langchain_pacms.integrations.report.traced_selection`).

        Args:
            messages: The conversation (not modified); tuples and dicts are converted.
            state: The graph state (for a ``query`` callable and namespace callables).
            config: The run config (callbacks for the trace and the custom event, namespace
                placeholders).
            store: The graph's store, used when none was configured.
            context: The runtime context (namespace placeholders).
            model: The chat model the messages go to (default: the configured ``model``),
                for a ``("fraction", x)`` budget.
            tools: The tools bound to it (default: the configured ``tools``), charged to the
                budget.

        Returns:
            The messages to send.

        Raises:
            ValueError: For a fraction budget without a model or a model without a profile.
        """
        return drive_calls(self._traced(messages, state, config, store, context, model, tools))

    async def arun(
        self,
        messages: Sequence[Any],
        *,
        state: Any = None,
        config: RunnableConfig | None = None,
        store: BaseStore | None = None,
        context: Any = None,
        model: Any = None,
        tools: Sequence[Any] | None = None,
    ) -> list[BaseMessage]:
        """Async twin of :meth:`run` (the same steps, awaiting the store, retriever, selector)."""
        steps = self._traced(messages, state, config, store, context, model, tools)
        return await adrive_calls(steps)


class RunnerViews:
    """What the hook and the middleware show of their :class:`SelectionRunner`.

    Example:
        >>> from langchain_pacms.integrations import create_pacms_hook
        >>> hook = create_pacms_hook(budget_tokens=10)
        >>> isinstance(hook, RunnerViews), hook.selector is hook.runner.selector
        (True, True)
    """

    runner: SelectionRunner

    @property
    def selector(self) -> ContextSelector:
        """The selector (one warm embedding cache for the integration's whole life)."""
        return self.runner.selector

    @property
    def last_selection(self) -> Selection | None:
        """The most recent selection (for debugging; shared by concurrent runs)."""
        return self.runner.last_selection
