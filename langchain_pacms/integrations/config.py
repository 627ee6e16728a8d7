"""One frozen, validated configuration for the pre-model hook and the agent middleware.

:func:`~langchain_pacms.integrations.create_pacms_hook` and
:class:`~langchain_pacms.integrations.middleware.PACMSMiddleware` take a few keywords
(:data:`AGENT_KEYWORDS`: the budget, the strategy, memory, a retriever, tool-loop options, the
selector and a log) or one :class:`SelectionConfig` with those and the advanced fields; either
way the options are checked once, here, at construction. An unknown keyword is a ``TypeError``
that lists the valid ones (:func:`resolve_config`).

Example:
    >>> config = SelectionConfig(budget=500, strategy="topk")
    >>> config.budget.tokens, config.strategy
    (500, StrategyOptions('topk'))
    >>> resolve_config(None, {"budget": 500}, {"relevance_wieght": 0.3}, "create_pacms_hook")
    Traceback (most recent call last):
    ...
    TypeError: create_pacms_hook() got an unknown keyword: relevance_wieght. ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.embeddings import Embeddings
from langchain_core.messages import SystemMessage
from langchain_core.retrievers import BaseRetriever

from langchain_pacms._timeout import check_embed_timeout
from langchain_pacms.budget import Budget
from langchain_pacms.integrations.options import (
    MemoryOptions,
    StrategyOptions,
    ToolLoopOptions,
    positive_int,
)
from langchain_pacms.selector import Selector

__all__ = [
    "AGENT_KEYWORDS",
    "DEFAULT_EMBED_TIMEOUT",
    "DEFAULT_OUTPUT_KEY",
    "DEFAULT_TOKENS_PER_MESSAGE",
    "QueryFn",
    "SelectionConfig",
    "resolve_config",
]

DEFAULT_EMBED_TIMEOUT = 10.0
"""Default ``embed_timeout`` (seconds) of the selector the hook or middleware builds itself."""

DEFAULT_OUTPUT_KEY = "llm_input_messages"
"""The hook's default state key for the selected messages (the model reads it)."""

DEFAULT_TOKENS_PER_MESSAGE = 3
"""Framing tokens charged per sent message with a ``("fraction", x)`` budget (role, separators).

The figure LangChain's ``count_tokens_approximately`` charges (``extra_tokens_per_message``).
"""

AGENT_KEYWORDS = (
    "budget",
    "strategy",
    "memory",
    "retriever",
    "tool_loop",
    "selector",
    "log",
    "config",
)
"""The keywords of ``create_pacms_hook`` and ``PACMSMiddleware``: fields of
:class:`SelectionConfig` (all but ``config`` itself), or the whole configuration."""

QueryFn = Callable[[Any], str]


def _non_negative(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def _one_of(name: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


@dataclass(frozen=True)
class SelectionConfig:
    """Every option of the hook and the middleware, checked once at construction.

    The first seven fields are also keywords of
    :func:`~langchain_pacms.integrations.create_pacms_hook` and
    :class:`~langchain_pacms.integrations.middleware.PACMSMiddleware` (:data:`AGENT_KEYWORDS`);
    the others are the advanced options.

    Attributes:
        budget: The :class:`~langchain_pacms.budget.Budget` (or a number of tokens, or
            ``("tokens", n)``, ``("ratio", x)``, ``("fraction", x)``). A ``ratio`` is a share
            of the conversation's own tokens (memories and documents compete for the budget
            but do not raise it); a ``fraction`` is a share of the chat model's
            ``profile["max_input_tokens"]``.
        strategy: A strategy name (``pacms``, ``topk``, ``lastk``, ``mmr``, ``rag`` or a
            registered one) or its options (:class:`~.options.StrategyOptions`,
            :class:`~.options.Pacms`); ``None``: the selector's own (``pacms`` by default).
            ``pacms`` selects messages without the embedder's relevance feedback unless the
            options set ``relevance_feedback``; when only the newest step is mandatory (a
            tool loop that outgrew the budget, or ``keep_latest_turn=False``) its kernel
            threshold is the profile's ``tool_loop_similarity_threshold`` where the profile
            sets one, unless the options set ``similarity_threshold`` (docs/results/
            lifecycle.md has the figures behind both).
        memory: Where memories come from (:class:`~.options.MemoryOptions`); ``None``: none.
        retriever: A retriever whose documents join the pool as ``document`` candidates.
        tool_loop: How tool spans are selected (:class:`~.options.ToolLoopOptions`).
        selector: A :class:`~langchain_pacms.selector.Selector` to use (a
            ``ContextSelector``, a ``RemoteSelector``), or LangChain ``Embeddings`` for the
            ``ContextSelector`` built here (default: the offline lexical embedder). A selector
            passed in keeps its own ``strict``, ``embed_timeout`` and memory ceiling.
        log: Append one JSONL record per model call to this path (every candidate's verdict
            and scores).
        query: ``state -> str`` giving the text to select for (default: see ``query_mode``).
        query_mode: The default query when ``query`` is not given: ``"agent"`` (default) is
            the latest human message plus what the agent is doing now (the text and tool calls
            of its latest message after it), which separates the outputs a long tool loop still
            needs; ``"task"`` is the latest human message alone.
        prompt: A system prompt the model receives that the hook does not see: the ``prompt=``
            of ``create_react_agent``, which is added after the pre-model hook. Its tokens are
            charged to the budget (the middleware sees the system message: not there).
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
        strict: Raise on selection failure (embedding and lookup errors included) instead of
            falling back to recency.
        context_role: ``"system"`` or ``"human"``: role of the memory/document message.
        embed_timeout: Seconds the selector built here waits for embeddings before the call
            falls back to recency, so a stalled embedding backend delays a model call by at
            most this much. Default :data:`DEFAULT_EMBED_TIMEOUT`; ``None``: no limit.
        memory_ceiling_bytes: Memory ceiling of the selector built here (the bytes its
            embedding cache and token memo may hold); ``None``: the selector's default.
        output_key: The hook's state key for the selected messages (default
            ``llm_input_messages``: the model sees the selection and the stored history stays
            whole). ``"messages"`` replaces the stored history with the selection.

    Example:
        >>> from langchain_pacms.integrations.options import Pacms, ToolLoopOptions
        >>> config = SelectionConfig(budget=("ratio", 0.5), strategy=Pacms(gain_floor=0.1),
        ...                          tool_loop=ToolLoopOptions(keep_latest_turn=False))
        >>> config.budget.ratio, dict(config.strategy.options)
        (0.5, {'gain_floor': 0.1})
    """

    budget: Budget
    strategy: StrategyOptions | None = None
    memory: MemoryOptions | None = None
    retriever: BaseRetriever | None = None
    tool_loop: ToolLoopOptions = field(default_factory=ToolLoopOptions)
    selector: Selector | Embeddings | None = None
    log: str | Path | None = None
    query: QueryFn | None = None
    query_mode: Literal["agent", "task"] = "agent"
    prompt: str | SystemMessage | None = None
    reserve_tokens: int = 0
    model: Any = None
    tools: Sequence[Any] = ()
    tokens_per_message: int | None = None
    strict: bool = False
    context_role: str = "system"
    embed_timeout: float | None = DEFAULT_EMBED_TIMEOUT
    memory_ceiling_bytes: int | None = None
    output_key: str = DEFAULT_OUTPUT_KEY

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget", Budget.coerce(self.budget))
        if self.strategy is not None:
            object.__setattr__(self, "strategy", StrategyOptions.coerce(self.strategy))
        self._check_parts()
        if self.model is not None:
            if self.budget.fraction is None:
                raise ValueError('model is only used with budget=("fraction", x)')
            self.budget.resolve(model=self.model)  # a model without a profile fails now
        if isinstance(self.tools, (str, bytes, Mapping)) or not isinstance(self.tools, Sequence):
            raise ValueError(f"tools must be a list of tools, got {type(self.tools).__name__}")
        object.__setattr__(self, "tools", tuple(self.tools))
        if self.tokens_per_message is not None:
            _non_negative("tokens_per_message", self.tokens_per_message)
        _non_negative("reserve_tokens", self.reserve_tokens)
        if self.prompt is not None and not isinstance(self.prompt, (str, SystemMessage)):
            raise ValueError(f"prompt must be a str or SystemMessage, got {self.prompt!r}")
        _one_of("query_mode", self.query_mode, ("agent", "task"))
        _one_of("context_role", self.context_role, ("system", "human"))
        _one_of("strict", self.strict, (True, False))
        if self.memory_ceiling_bytes is not None:
            positive_int("memory_ceiling_bytes", self.memory_ceiling_bytes)
        check_embed_timeout(self.embed_timeout)
        if not isinstance(self.output_key, str) or not self.output_key:
            raise ValueError(f"output_key must be a state key, got {self.output_key!r}")

    def _check_parts(self) -> None:
        """The option objects are of their types (an unknown one would be silently unused)."""
        parts: tuple[tuple[str, Any, Any], ...] = (
            ("memory", self.memory, MemoryOptions),
            ("retriever", self.retriever, BaseRetriever),
            ("tool_loop", self.tool_loop, ToolLoopOptions),
            ("selector", self.selector, (Selector, Embeddings)),
            ("log", self.log, (str, Path)),
            ("query", self.query, Callable),
        )
        for name, value, kind in parts:
            if value is not None and not isinstance(value, kind):
                wanted = " or ".join(
                    k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,))
                )
                raise ValueError(f"{name} must be a {wanted}, got {type(value).__name__}")

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


def resolve_config(
    config: SelectionConfig | None,
    keywords: Mapping[str, Any],
    unknown: Mapping[str, Any],
    owner: str,
) -> SelectionConfig:
    """The configuration of a hook or middleware: ``config``, or the one its keywords make.

    Args:
        config: The configuration passed as ``config=`` (then no other keyword).
        keywords: The other keywords of :data:`AGENT_KEYWORDS`, by name (``None``: not given).
        unknown: Any other keyword the call got.
        owner: The call's name, for the errors.

    Raises:
        TypeError: For an unknown keyword (the valid ones are listed).
        ValueError: For both ``config`` and keywords, no budget, or a bad option.

    Example:
        >>> resolve_config(None, {"budget": 10}, {}, "create_pacms_hook").budget.tokens
        10
    """
    if unknown:
        advanced = [f.name for f in dataclasses.fields(SelectionConfig)]
        advanced = [name for name in advanced if name not in AGENT_KEYWORDS]
        raise TypeError(
            f"{owner}() got an unknown keyword: {', '.join(sorted(unknown))}. Its keywords are "
            f"{', '.join(AGENT_KEYWORDS)}; the advanced options are fields of "
            f"config=SelectionConfig(...): {', '.join(advanced)}; strategy options go in "
            "strategy=StrategyOptions(name, ...) or Pacms(...)"
        )
    given = {name: value for name, value in keywords.items() if value is not None}
    if config is None:
        if "budget" not in given:
            raise ValueError(
                f'{owner}() needs a budget: budget=2000, budget=("fraction", 0.5), '
                "budget=Budget(...), or config=SelectionConfig(budget=...)"
            )
        return SelectionConfig(**given)
    if not isinstance(config, SelectionConfig):
        raise ValueError(f"config must be a SelectionConfig, got {type(config).__name__}")
    if given:
        raise ValueError(f"pass config or keywords, not both (got {', '.join(sorted(given))})")
    return config
