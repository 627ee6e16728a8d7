"""One validated configuration for the pre-model hook and the agent middleware.

:class:`SelectionConfig` holds every option that
:func:`~langchain_pacms.integrations.create_pacms_hook` and
:class:`~langchain_pacms.integrations.middleware.PACMSMiddleware` share; both build it from
their keyword arguments (or take ``config=SelectionConfig(...)``), so the options are documented
and checked in one place. An unknown option or a strategy option the strategy does not accept is
a ``ValueError`` at construction, naming the option and listing the valid ones.

:class:`Budget` says what the token budget is, in one of four ways:

* ``Budget(tokens=2000)``: an absolute number of tokens;
* ``Budget(ratio=0.5)``: a share of the conversation's own tokens (looked-up memories and
  documents compete for it but do not raise it);
* ``Budget(context_window=128_000, answer_reserve=4096, fill=0.25)``: a share ``fill`` of the
  model's window minus the tokens left for the answer;
* ``Budget(fraction=0.5)``: a share of the chat model's ``profile["max_input_tokens"]``, as
  LangChain's ``SummarizationMiddleware`` takes ``("fraction", 0.5)``; the keyword form is
  ``budget=("fraction", 0.5)`` (``budget=("tokens", 2000)`` is the absolute form).

Example:
    >>> config = SelectionConfig(budget=Budget(tokens=500), strategy="topk")
    >>> config.budget.tokens
    500
    >>> SelectionConfig.from_options(budget_tokens=500, relevance_wieght=0.3)
    Traceback (most recent call last):
    ...
    ValueError: unknown option 'relevance_wieght' ...
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import SystemMessage
from langchain_core.retrievers import BaseRetriever
from langgraph.store.base import BaseStore

from langchain_pacms._timeout import check_embed_timeout
from langchain_pacms.core import check_options, get_strategy

__all__ = [
    "DEFAULT_ANSWER_RESERVE",
    "DEFAULT_EMBED_TIMEOUT",
    "DEFAULT_TOKENS_PER_MESSAGE",
    "Budget",
    "Namespace",
    "QueryFn",
    "SelectionConfig",
    "resolve_config",
]

DEFAULT_ANSWER_RESERVE = 4096

DEFAULT_EMBED_TIMEOUT = 10.0
"""Default ``embed_timeout`` (seconds) of the selector the hook or middleware builds itself."""

DEFAULT_TOKENS_PER_MESSAGE = 3
"""Framing tokens charged per sent message with a ``("fraction", x)`` budget (role, separators).

The figure LangChain's ``count_tokens_approximately`` charges (``extra_tokens_per_message``).
"""

QueryFn = Callable[[Any], str]
Namespace = tuple[str, ...] | Callable[[Any, Mapping[str, Any]], tuple[str, ...]]


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _share(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")


def max_input_tokens(model: Any) -> int | None:
    """A chat model's ``profile["max_input_tokens"]``, or ``None`` when it has none.

    Example:
        >>> from langchain_core.language_models import GenericFakeChatModel
        >>> model = GenericFakeChatModel(messages=iter([]), profile={"max_input_tokens": 8000})
        >>> max_input_tokens(model), max_input_tokens(object())
        (8000, None)
    """
    profile = getattr(model, "profile", None)
    if not isinstance(profile, Mapping):
        return None
    limit = profile.get("max_input_tokens")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


@dataclass(frozen=True)
class Budget:
    """The token budget of each selection: absolute, a share of the pool, or window based.

    Give exactly one of ``tokens``, ``ratio``, ``context_window`` or ``fraction``.

    Attributes:
        tokens: An absolute number of tokens.
        ratio: A share in ``(0, 1]`` of the conversation's own tokens.
        context_window: The model's input window; the budget is
            ``floor((context_window - answer_reserve) * fill)``.
        answer_reserve: Tokens left for the answer (window budgets only; ``>= 0``).
        fill: Share in ``(0, 1]`` of ``context_window - answer_reserve`` to fill.
        fraction: A share in ``(0, 1]`` of the chat model's ``profile["max_input_tokens"]``
            (an input limit: no answer reserve); see :meth:`model_tokens`.

    Example:
        >>> Budget(context_window=5000, answer_reserve=4000, fill=0.5).window_tokens()
        500
        >>> Budget.coerce(("fraction", 0.5)).fraction
        0.5
    """

    tokens: int | None = None
    ratio: float | None = None
    context_window: int | None = None
    answer_reserve: int = DEFAULT_ANSWER_RESERVE
    fill: float = 1.0
    fraction: float | None = None

    def __post_init__(self) -> None:
        kinds = ("tokens", "ratio", "context_window", "fraction")
        given = [n for n in kinds if getattr(self, n) is not None]
        if not given:
            raise ValueError(
                'pass budget_tokens, budget_ratio or context_window, or budget=("fraction", x)'
            )
        if len(given) > 1:
            raise ValueError(f"pass one budget, not both {' and '.join(given)}")
        if self.tokens is not None:
            _positive_int("budget_tokens", self.tokens)
        if self.ratio is not None:
            _share("budget_ratio", self.ratio)
        if self.fraction is not None:
            _share("fraction", self.fraction)
        _share("fill", self.fill)
        if isinstance(self.answer_reserve, bool) or not isinstance(self.answer_reserve, int):
            raise ValueError(f"answer_reserve must be an int, got {self.answer_reserve!r}")
        if self.answer_reserve < 0:
            raise ValueError(f"answer_reserve must be >= 0, got {self.answer_reserve}")
        if self.context_window is not None:
            _positive_int("context_window", self.context_window)
            if self.context_window - self.answer_reserve <= 0:
                raise ValueError(
                    f"context_window ({self.context_window}) must exceed answer_reserve "
                    f"({self.answer_reserve})"
                )

    @classmethod
    def coerce(cls, budget: Any) -> Budget:
        """A :class:`Budget`, or the one LangChain's ``("fraction", x)``/``("tokens", n)`` means.

        Raises:
            ValueError: For anything else, or a bad value.

        Example:
            >>> Budget.coerce(("tokens", 2000)).tokens
            2000
        """
        if isinstance(budget, Budget):
            return budget
        if isinstance(budget, tuple) and len(budget) == 2 and budget[0] in ("fraction", "tokens"):
            return cls(**{budget[0]: budget[1]})
        raise ValueError(
            f'budget must be ("fraction", x), ("tokens", n) or a Budget, got {budget!r}'
        )

    @classmethod
    def from_options(
        cls,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
        context_window: int | None = None,
        answer_reserve: int = DEFAULT_ANSWER_RESERVE,
        budget: Any = None,
    ) -> Budget:
        """The budget the keyword arguments of the hook and the middleware describe.

        ``budget_ratio`` is the share of the conversation on its own, and ``fill`` together
        with ``context_window``; ``budget`` is LangChain's form (see :meth:`coerce`) and
        takes none of the others.

        Example:
            >>> Budget.from_options(context_window=1200, answer_reserve=200).window_tokens()
            1000
        """
        if budget is not None:
            others = {"budget_tokens": budget_tokens, "budget_ratio": budget_ratio}
            others["context_window"] = context_window
            given = [name for name, value in others.items() if value is not None]
            if given:
                raise ValueError(f"pass one budget, not both budget and {' and '.join(given)}")
            return cls.coerce(budget)
        if context_window is not None:
            if budget_tokens is not None:
                raise ValueError("pass one budget, not both budget_tokens and context_window")
            return cls(
                context_window=context_window,
                answer_reserve=answer_reserve,
                fill=1.0 if budget_ratio is None else budget_ratio,
            )
        return cls(tokens=budget_tokens, ratio=budget_ratio, answer_reserve=answer_reserve)

    def window_tokens(self) -> int:
        """The budget of a window-based budget (``ValueError`` for the other kinds)."""
        if self.context_window is None:
            raise ValueError("not a window budget")
        return max(1, int((self.context_window - self.answer_reserve) * self.fill))

    def model_tokens(self, model: Any) -> int:
        """The budget of a ``fraction`` budget for ``model``: that share of its input limit.

        Args:
            model: The chat model the messages go to (its ``profile["max_input_tokens"]``).

        Raises:
            ValueError: When this is not a fraction budget, or the model has no such profile.

        Example:
            >>> from langchain_core.language_models import GenericFakeChatModel
            >>> model = GenericFakeChatModel(messages=iter([]), profile={"max_input_tokens": 900})
            >>> Budget(fraction=0.5).model_tokens(model)
            450
        """
        if self.fraction is None:
            raise ValueError("not a fraction budget")
        limit = max_input_tokens(model)
        if limit is None:
            raise ValueError(
                f'budget=("fraction", {self.fraction}) is a share of the chat model\'s '
                f'profile["max_input_tokens"], and {type(model).__name__} has none: pass '
                "budget_tokens=N or context_window=W instead, or give the model one "
                '(ChatModel(..., profile={"max_input_tokens": ...}))'
            )
        return max(1, int(limit * self.fraction))


@dataclass(frozen=True)
class SelectionConfig:
    """The options of the hook and the middleware, checked once at construction.

    Attributes:
        budget: The :class:`Budget` (or LangChain's ``("fraction", x)`` / ``("tokens", n)``).
        strategy: ``pacms``, ``topk``, ``lastk``, ``mmr``, ``rag`` or a registered name
            (``None``: the selector's default, ``pacms``).
        strategy_options: Keyword options of the strategy, checked against its parameters.
            ``pacms`` selects messages without the embedder's relevance feedback unless
            these set ``relevance_feedback`` (the built-in embedder's profile turns it on for
            retrieval): on the recorded agent runs it kept fewer of the outputs later tool
            calls reused (``docs/results/lifecycle-notes.md``). When only the newest step is
            mandatory (a tool loop that outgrew the budget, or ``keep_latest_turn=False``: see
            below) its kernel threshold is the profile's ``tool_loop_similarity_threshold``
            where the profile sets one, unless these set ``similarity_threshold``: 0.3 for the
            built-in embedder, whose retrieval value is 0.85 (chosen on the replay's
            development split: ``docs/results/lifecycle-notes.md``).
        query: ``state -> str`` giving the text to select for (default: see ``query_mode``).
        query_mode: The default query when ``query`` is not given: ``"agent"`` (default) is
            the latest human message plus what the agent is doing now (the text and tool calls
            of its latest message after it), which separates the outputs a long tool loop still
            needs; ``"task"`` is the latest human message alone.
        store: A LangGraph ``BaseStore`` with memories (default: the graph's or agent's store).
        memory_namespaces: Namespaces to search, e.g. ``[("memories", "{user_id}")]``;
            ``{placeholders}`` are filled from ``config["configurable"]`` and the runtime
            context. A callable ``(state, values) -> tuple`` works too.
        memory_limit: Most items fetched per namespace from a store with a vector index
            (``store.search(ns, query=..., limit=...)``: the store ranks them by the query).
        memory_scan_limit: A store without a vector index (no ``index_config``) cannot rank by
            the query, so each namespace is read in pages, up to this many items, and all of
            them join the pool for the selector to rank; a warning says when the cap cut a
            namespace short.
        retriever: Optional retriever whose documents join the pool as ``document`` candidates.
        log_path: Append one JSONL record per model call (every candidate's verdict and scores).
        strict: Raise on selection failure (embedding errors included) instead of falling back
            to recency.
        keep_latest_turn: ``True``: everything from the latest human message on is mandatory.
            ``False``: only that message, the system prompt and the newest span (the current
            tool call with its results, or the last message) are. ``"auto"`` (default): as
            ``True``, unless that part alone exceeds the budget (a long single-task tool loop):
            then as ``False``, so the earlier tool spans of the turn compete for the budget
            (whole, never split). The selection event's ``mandatory`` says which applied.
        lift_reused: Treat a tool span whose results hold a value a later tool call already
            took up (a path, an id, a long number: the run keeps coming back to such records),
            and the newest read of each file (an edit quotes the file as the agent last saw
            it), as relevant as the most relevant candidate of the pool, whatever its words say
            (:meth:`~langchain_pacms.selector.ContextSelector.select`'s ``relevant_ids``), for
            every strategy that reads relevance. On the recorded agent runs' development
            split 41% of such spans held a value a later step copied, against 10% of the
            others, and it kept more of what later steps needed (mini-swe, 50% kept: 70.6% of
            360 cuts unaffected against 59.2% without it; 74.2% with the newest reads too).
            Default ``True``.
        tool_placeholders: Offer each optional tool span also as a call-only variant whose
            results are replaced by a short placeholder ``ToolMessage``.
        fold_stubs: Send optional tool spans that are not kept whole as their lifecycle fold
            stubs (the object id, one line, the locators the output contains: paths, ids,
            URLs; the call's own text is folded with the results, its tool calls stay). The
            stubs are the floor: those that fit beside the mandatory part are always sent,
            first the stubs of outputs whose values (ids, paths) later calls already used, then
            newest first; a span the lifecycle already folded is its own floor. The selector
            decides which of those spans to send whole instead, each costing what it adds to
            its stub; a stub that does not fit is an alternative to its span (whole, stub or
            neither). The exact payload of every stub
            that is sent is written to ``sidecar_store`` first, so the ``recover_context``
            tool (:func:`~langchain_pacms.lifecycle.make_recover_tool` over the same store)
            returns it byte for byte. Needs ``sidecar_store``; not with ``tool_placeholders``
            (the stub is the richer variant). Default (``None``): on when a
            ``sidecar_store`` is given (and ``tool_placeholders`` is not), off otherwise.
        sidecar_store: The LangGraph ``BaseStore`` fold stubs write their payloads to, under
            the run's ``configurable.thread_id`` (a run without one has its own thread, named
            after its first message: :func:`~langchain_pacms.lifecycle.sidecar.run_thread`).
        context_role: ``"system"`` or ``"human"``: role of the memory/document message.
        prompt: A system prompt the model receives that the hook does not see: the ``prompt=``
            of ``create_react_agent``, which is added after the pre-model hook. Its tokens are
            charged to the budget (the middleware sees the system message: do not pass it there).
        reserve_tokens: More tokens the model receives that the selection does not see (e.g. a
            callable prompt's output), charged to the budget.
        model: The chat model a ``("fraction", x)`` budget is a share of (its
            ``profile["max_input_tokens"]``, checked here). The hook's option: it does not see
            the model; the middleware reads each request's ``request.model``.
        tools: The tools bound to the model (LangChain tools, functions or tool dicts): each
            one's schema (``convert_to_openai_tool``, as JSON) is counted with the selector's
            counter and charged to the budget. The hook's option; the middleware charges the
            request's ``request.tools``.
        tokens_per_message: Framing tokens charged per sent message (role markers,
            separators). ``None`` (default): :data:`DEFAULT_TOKENS_PER_MESSAGE` with a
            ``("fraction", x)`` budget, whose tokens are the model's own, and ``0`` with the
            other budgets, which count message contents alone.
        memory_ceiling_bytes: Memory ceiling of the selector the hook or middleware builds
            itself (``ContextSelector(memory_ceiling_bytes=...)``: the bytes its embedding
            cache and token memo may hold); ``None``: the selector's default, 256 MiB.
        embed_timeout: Seconds the selector the hook or middleware builds itself waits for
            embeddings before the call falls back to recency (``ContextSelector(embed_timeout=
            ...)``), so a stalled embedding backend delays a model call by at most this much
            instead of stalling the agent. Default :data:`DEFAULT_EMBED_TIMEOUT` (10 s);
            ``None``: no limit. A ``selector`` passed in keeps its own.

    Example:
        >>> SelectionConfig(budget=Budget(ratio=0.5), strategy="rag",
        ...                 strategy_options={"k": 2}).strategy_options
        {'k': 2}
    """

    budget: Budget
    strategy: str | None = None
    strategy_options: Mapping[str, Any] = field(default_factory=dict)
    query: QueryFn | None = None
    query_mode: Literal["agent", "task"] = "agent"
    store: BaseStore | None = None
    memory_namespaces: Sequence[Namespace] = ()
    memory_limit: int = 10
    memory_scan_limit: int = 1000
    retriever: BaseRetriever | None = None
    log_path: str | Path | None = None
    strict: bool = False
    keep_latest_turn: bool | Literal["auto"] = "auto"
    lift_reused: bool = True
    tool_placeholders: bool = False
    fold_stubs: bool | None = None
    sidecar_store: BaseStore | None = None
    context_role: str = "system"
    prompt: str | SystemMessage | None = None
    reserve_tokens: int = 0
    model: Any = None
    tools: Sequence[Any] = ()
    tokens_per_message: int | None = None
    memory_ceiling_bytes: int | None = None
    embed_timeout: float | None = DEFAULT_EMBED_TIMEOUT

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget", Budget.coerce(self.budget))
        if self.model is not None:
            if self.budget.fraction is None:
                raise ValueError('model is only used with budget=("fraction", x)')
            self.budget.model_tokens(self.model)  # a model without a profile fails now
        if isinstance(self.tools, (str, bytes, Mapping)) or not isinstance(self.tools, Sequence):
            raise ValueError(f"tools must be a list of tools, got {type(self.tools).__name__}")
        object.__setattr__(self, "tools", tuple(self.tools))
        per = self.tokens_per_message
        if per is not None and (isinstance(per, bool) or not isinstance(per, int) or per < 0):
            raise ValueError(f"tokens_per_message must be an int >= 0, got {per!r}")
        _positive_int("memory_limit", self.memory_limit)
        _positive_int("memory_scan_limit", self.memory_scan_limit)
        reserve = self.reserve_tokens
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
            raise ValueError(f"reserve_tokens must be an int >= 0, got {self.reserve_tokens!r}")
        if self.prompt is not None and not isinstance(self.prompt, (str, SystemMessage)):
            raise ValueError(f"prompt must be a str or SystemMessage, got {self.prompt!r}")
        if self.keep_latest_turn not in (True, False, "auto"):
            raise ValueError(
                f"keep_latest_turn must be True, False or 'auto', got {self.keep_latest_turn!r}"
            )
        if self.lift_reused not in (True, False):
            raise ValueError(f"lift_reused must be True or False, got {self.lift_reused!r}")
        _check_fold_stubs(self)
        if self.query_mode not in ("agent", "task"):
            raise ValueError(f"query_mode must be 'agent' or 'task', got {self.query_mode!r}")
        if self.context_role not in ("system", "human"):
            raise ValueError(f"context_role must be 'system' or 'human', got {self.context_role!r}")
        if self.memory_ceiling_bytes is not None:
            _positive_int("memory_ceiling_bytes", self.memory_ceiling_bytes)
        check_embed_timeout(self.embed_timeout)
        object.__setattr__(self, "memory_namespaces", tuple(self.memory_namespaces))
        object.__setattr__(self, "strategy_options", dict(self.strategy_options))
        if self.strategy is not None:
            _check_strategy_options(self.strategy, self.strategy_options)
        elif self.strategy_options:
            _check_strategy_options("pacms", self.strategy_options)

    @property
    def message_framing(self) -> int:
        """Tokens charged per sent message (see ``tokens_per_message``).

        Example:
            >>> SelectionConfig(budget=("fraction", 0.5)).message_framing
            3
        """
        if self.tokens_per_message is not None:
            return self.tokens_per_message
        return DEFAULT_TOKENS_PER_MESSAGE if self.budget.fraction is not None else 0

    @classmethod
    def from_options(
        cls,
        *,
        budget: Any = None,
        budget_tokens: int | None = None,
        budget_ratio: float | None = None,
        context_window: int | None = None,
        answer_reserve: int = DEFAULT_ANSWER_RESERVE,
        **options: Any,
    ) -> SelectionConfig:
        """Build the configuration from the keyword arguments of the hook or the middleware.

        Keywords that are not fields of this class are taken as strategy options; an option
        that is neither fails here, naming it and the valid ones.

        Raises:
            ValueError: For a missing, doubled or bad budget, an unknown option or strategy.
        """
        names = {f.name for f in dataclasses.fields(cls)} - {"budget", "strategy_options"}
        fields = {k: v for k, v in options.items() if k in names}
        strategy_options = {k: v for k, v in options.items() if k not in names}
        if "strategy_options" in options:
            raise ValueError("pass strategy options as keywords, or use config=SelectionConfig")
        resolved = Budget.from_options(
            budget_tokens, budget_ratio, context_window, answer_reserve, budget
        )
        try:
            return cls(budget=resolved, strategy_options=strategy_options, **fields)
        except _UnknownOption as err:
            valid = sorted(
                names
                | {"budget", "budget_tokens", "budget_ratio", "context_window", "answer_reserve"}
                | set(err.accepted)
            )
            raise ValueError(
                f"unknown option {err.option!r} (strategy {err.strategy!r}); valid options: "
                f"{', '.join(valid)}"
            ) from None


def resolve_config(config: SelectionConfig | None, options: Mapping[str, Any]) -> SelectionConfig:
    """``config`` itself, or the configuration built from keyword ``options`` (not both).

    Example:
        >>> resolve_config(None, {"budget_tokens": 10}).budget.tokens
        10
    """
    if config is None:
        return SelectionConfig.from_options(**options)
    if not isinstance(config, SelectionConfig):
        raise ValueError(f"config must be a SelectionConfig, got {type(config).__name__}")
    if options:
        raise ValueError(f"pass config or keyword options, not both (got {sorted(options)})")
    return config


def _check_fold_stubs(config: SelectionConfig) -> None:
    if config.fold_stubs is None:  # the default: stubs wherever their payloads can be stored
        wanted = config.sidecar_store is not None and not config.tool_placeholders
        object.__setattr__(config, "fold_stubs", wanted)
    if config.fold_stubs not in (True, False):
        raise ValueError(f"fold_stubs must be True or False, got {config.fold_stubs!r}")
    store = config.sidecar_store
    if store is not None and not isinstance(store, BaseStore):
        raise ValueError(f"sidecar_store must be a langgraph BaseStore, got {type(store).__name__}")
    if config.fold_stubs and store is None:
        raise ValueError("fold_stubs=True needs sidecar_store=<a BaseStore> for the folded outputs")
    if store is not None and not config.fold_stubs:
        raise ValueError("sidecar_store is only used with fold_stubs (pass fold_stubs=True)")
    if config.fold_stubs and config.tool_placeholders:
        raise ValueError(
            "pass fold_stubs or tool_placeholders, not both (each is a variant of "
            "a dropped tool span)"
        )


class _UnknownOption(ValueError):
    def __init__(self, option: str, strategy: str, accepted: Sequence[str]) -> None:
        self.option, self.strategy, self.accepted = option, strategy, tuple(accepted)
        super().__init__(
            f"unknown option {option!r} for strategy {strategy!r}; it accepts: "
            f"{', '.join(accepted) or 'no options'}"
        )


def _strategy_parameters(fn: Callable[..., Any]) -> tuple[list[str], bool]:
    """A strategy's keyword parameters after ``problem``, and whether it takes ``**options``."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    names = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def _check_strategy_options(strategy: str, options: Mapping[str, Any]) -> None:
    fn = get_strategy(strategy)  # unknown names fail now, not on every model call
    names, open_ended = _strategy_parameters(fn)
    if not open_ended:  # e.g. pacms_paper(problem, **options): the signature cannot tell
        for option in options:
            if option not in names:
                raise _UnknownOption(option, strategy, sorted(set(names)))
    check_options(strategy, **options)  # bad values fail now too, not on every model call
