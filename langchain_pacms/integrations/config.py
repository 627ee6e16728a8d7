"""One frozen configuration of the pre-model hook and the agent middleware, checked when made."""

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
from langchain_pacms.budget import Budget, BudgetInput
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
"""Framing tokens per sent message with a ``fraction`` budget (as LangChain charges)."""

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
"""The keywords of ``create_pacms_hook`` and ``PACMSMiddleware``."""

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

    The first seven fields are also keywords of ``create_pacms_hook`` and ``PACMSMiddleware``.

    Attributes:
        budget: Tokens, ``("tokens", n)``, ``("ratio", x)`` (of the conversation),
            ``("fraction", x)`` (of the model's window) or a :class:`~langchain_pacms.Budget`.
        strategy: A strategy name or its options; ``None``: the selector's own. ``pacms`` runs
            without relevance feedback, and with the profile's ``tool_loop_similarity_threshold``
            among tool rounds (only the newest step mandatory, or earlier turns with tool
            calls), unless the options say otherwise.
        memory: Where memories come from (:class:`~.options.MemoryOptions`).
        retriever: A retriever whose documents join the pool.
        tool_loop: How tool spans are selected (:class:`~.options.ToolLoopOptions`).
        selector: A ``Selector``, or the ``Embeddings`` of the ``ContextSelector`` built here.
        log: A JSONL path: one record per model call (every candidate's verdict).
        query: ``state -> str`` giving the text to select for (default: see ``query_mode``).
        query_mode: ``"agent"``: the latest human message and agent step; ``"task"``: that message.
        prompt: A system prompt the model gets unseen by the hook, charged. Hook only.
        reserve_tokens: More tokens the model gets unseen by the selection, charged to the budget.
        model: The chat model of a ``fraction`` budget. Hook only (the middleware reads requests).
        tools: The tools bound to the model, their schemas charged. Hook only.
        tokens_per_message: Framing tokens per sent message (``None``: 3 if ``fraction``, else 0).
        strict: Raise on selection failure instead of falling back to recency.
        context_role: ``"system"`` or ``"human"``: role of the memory/document message.
        embed_timeout: Seconds the selector built here waits for embeddings (``None``: no limit).
        memory_ceiling_bytes: Memory ceiling of the selector built here (``None``: its default).
        output_key: The hook's state key for the selection; ``"messages"`` replaces the history.

    Example:
        >>> from langchain_pacms.integrations.options import Pacms
        >>> config = SelectionConfig(budget=("ratio", 0.5), strategy=Pacms(gain_floor=0.1))
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
        """Raise unless each option object is of its type (else it would go unused)."""
        parts: tuple[tuple[str, Any, tuple[Any, ...]], ...] = (
            ("memory", self.memory, (MemoryOptions,)),
            ("retriever", self.retriever, (BaseRetriever,)),
            ("tool_loop", self.tool_loop, (ToolLoopOptions,)),
            ("selector", self.selector, (Selector, Embeddings)),
            ("log", self.log, (str, Path)),
            ("query", self.query, (Callable,)),
        )
        for name, value, kinds in parts:
            if value is not None and not isinstance(value, kinds):
                wanted = " or ".join(k.__name__ for k in kinds)
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


def agent_arguments(
    budget: BudgetInput | None = None,
    *,
    strategy: str | StrategyOptions | None = None,
    memory: MemoryOptions | None = None,
    retriever: BaseRetriever | None = None,
    tool_loop: ToolLoopOptions | None = None,
    selector: Selector | Embeddings | None = None,
    log: str | Path | None = None,
    config: SelectionConfig | None = None,
    **unknown: Any,
) -> tuple[SelectionConfig | None, dict[str, Any], dict[str, Any]]:
    """The parameters of ``create_pacms_hook`` and ``PACMSMiddleware``, written once.

    Returns ``config``, the other :data:`AGENT_KEYWORDS` and any unknown keyword: the arguments
    of :func:`resolve_config` before its ``owner``.

    Example:
        >>> agent_arguments(10, log="run.jsonl")[1]["log"]
        'run.jsonl'
    """
    keywords = {
        "budget": budget,
        "strategy": strategy,
        "memory": memory,
        "retriever": retriever,
        "tool_loop": tool_loop,
        "selector": selector,
        "log": log,
    }
    return config, keywords, unknown


def resolve_config(
    config: SelectionConfig | None,
    keywords: Mapping[str, Any],
    unknown: Mapping[str, Any],
    owner: str,
) -> SelectionConfig:
    """The configuration of a hook or middleware: ``config``, or the one its keywords make.

    Args:
        config: The ``config=`` keyword (then no other keyword).
        keywords: The other keywords of :data:`AGENT_KEYWORDS` (``None``: not given).
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
