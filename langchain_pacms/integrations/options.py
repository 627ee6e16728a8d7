"""The small typed options of the hook, the middleware and the compressor, each checked when made.

* :class:`StrategyOptions`: a strategy by name (or a strategy callable) with its keyword options,
  checked against the strategy's parameters: ``StrategyOptions("rag", k=4)``;
* :class:`Pacms`: the ``pacms`` strategy's options, typed: ``Pacms(similarity_threshold=0.3)``;
* :class:`MemoryOptions`: where a call's memories come from (a LangGraph store's namespaces);
* :class:`ToolLoopOptions`: how tool spans are treated (the latest turn, reused outputs, fold
  stubs and placeholders).

Example:
    >>> StrategyOptions("rag", k=4)
    StrategyOptions('rag', k=4)
    >>> StrategyOptions("rag", lambda_mult=0.5)
    Traceback (most recent call last):
    ...
    ValueError: strategy 'rag' rejects its options {'lambda_mult': 0.5}: unknown option 'lambda_mult'; it accepts: k
"""  # noqa: E501

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from langgraph.store.base import BaseStore

from langchain_pacms.core import Strategy, check_options, get_strategy

__all__ = ["MemoryOptions", "Namespace", "Pacms", "StrategyOptions", "ToolLoopOptions"]

Namespace = tuple[str, ...] | Callable[[Any, Mapping[str, Any]], tuple[str, ...]]
"""A memory namespace: a tuple (its parts may hold ``{placeholders}``) or ``(state, values) ->``."""


def positive_int(name: str, value: Any) -> int:
    """``value`` when it is a positive ``int``, else ``ValueError`` naming ``name``.

    Example:
        >>> positive_int("limit", 0)
        Traceback (most recent call last):
        ...
        ValueError: limit must be a positive int, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _parts(namespace: Any) -> bool:
    """Whether ``namespace`` is a namespace's parts: a non-empty tuple or list of str."""
    return (
        isinstance(namespace, (tuple, list))
        and bool(namespace)
        and all(isinstance(p, str) for p in namespace)
    )


def _flag(name: str, value: Any) -> None:
    if value not in (True, False):
        raise ValueError(f"{name} must be True or False, got {value!r}")


class StrategyOptions:
    """A strategy and its keyword options, checked against the strategy when made.

    An unknown strategy name, an option the strategy does not take or a bad value is a
    ``ValueError`` here, naming what the strategy accepts (see
    :func:`~langchain_pacms.core.check_options`), not on every model call.

    Args:
        strategy: A registered strategy name (``pacms``, ``topk``, ``lastk``, ``mmr``,
            ``rag``, ...) or a strategy callable.
        **options: The strategy's keyword options.

    Attributes:
        strategy: The strategy name or callable.
        options: Its options (read-only).

    Example:
        >>> StrategyOptions("mmr", lambda_mult=0.7).options["lambda_mult"]
        0.7
        >>> StrategyOptions.coerce("topk")
        StrategyOptions('topk')
    """

    strategy: str | Strategy
    options: Mapping[str, Any]

    def __init__(self, strategy: str | Strategy, /, **options: Any) -> None:
        self._settle(strategy, options)

    def _settle(self, strategy: str | Strategy, options: Mapping[str, Any]) -> None:
        """Check ``strategy`` and ``options`` and set them (once: the object is frozen)."""
        if isinstance(strategy, str):
            get_strategy(strategy)  # an unknown name raises, listing the registered ones
        elif not callable(strategy):
            raise ValueError(f"strategy must be a strategy name or a callable, got {strategy!r}")
        check_options(strategy, **options)
        object.__setattr__(self, "strategy", strategy)
        object.__setattr__(self, "options", MappingProxyType(dict(options)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StrategyOptions):
            return NotImplemented
        return (self.strategy, dict(self.options)) == (other.strategy, dict(other.options))

    __hash__ = None  # type: ignore[assignment]  # options may hold unhashable values

    def __repr__(self) -> str:
        args = [repr(self.name), *(f"{k}={v!r}" for k, v in self.options.items())]
        return f"StrategyOptions({', '.join(args)})"

    @property
    def name(self) -> str:
        """The strategy's name (a callable's ``__name__``), as selections report it.

        Example:
            >>> StrategyOptions("rag", k=2).name
            'rag'
        """
        strategy = self.strategy
        return strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "?")

    @classmethod
    def coerce(cls, strategy: str | Strategy | StrategyOptions) -> StrategyOptions:
        """``strategy`` itself when it is options already, else the strategy without options.

        Raises:
            ValueError: For an unknown name or something that is no strategy.
        """
        return strategy if isinstance(strategy, StrategyOptions) else cls(strategy)


@dataclass(frozen=True, repr=False)
class Pacms(StrategyOptions):
    """The ``pacms`` strategy with typed options (see :func:`~langchain_pacms.core.pacms.pacms`).

    An option left ``None`` is not passed: the strategy's default applies, or, for
    ``similarity_threshold``, ``min_gain``, ``relevance_feedback`` and ``calibrate``, the
    selector's embedder profile's. ``fill=False`` turns the fill off. The ``experimental_*``
    options, ``cost_exponent`` and ``guarantee`` are research settings: change them to study
    the strategy, not to tune an agent.

    Example:
        >>> Pacms(similarity_threshold=0.3)
        Pacms(similarity_threshold=0.3)
        >>> Pacms(relevance_weight=2.0)
        Traceback (most recent call last):
        ...
        ValueError: strategy 'pacms' rejects its options {'relevance_weight': 2.0}: ...
    """

    relevance_weight: float | None = None
    similarity_threshold: float | None = None
    density: bool | None = None
    cost_exponent: float | None = None
    guarantee: float | None = None
    gain_floor: float | None = None
    min_gain: float | None = None
    fill: bool | str | None = None
    fill_threshold: float | None = None
    relevance_feedback: float | None = None
    feedback_items: int | None = None
    calibrate: bool | None = None
    experimental_auto_relevance_weight: bool | None = None
    experimental_coverage_prior: float | None = None

    def __post_init__(self) -> None:
        given = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }
        self._settle("pacms", given)

    def __repr__(self) -> str:
        return f"Pacms({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"


@dataclass(frozen=True)
class MemoryOptions:
    """Where each call's memories come from: namespaces of a LangGraph ``BaseStore``.

    Attributes:
        namespaces: The namespaces to search, e.g. ``[("memories", "{user_id}")]``;
            ``{placeholders}`` are filled from ``config["configurable"]`` and the runtime
            context. A callable ``(state, values) -> tuple`` works too.
        store: The store (default: the graph's or the agent's store).
        limit: Most items fetched per namespace from a store with a vector index
            (``store.search(ns, query=..., limit=...)``: the store ranks them by the query).
        scan_limit: A store without a vector index (no ``index_config``) cannot rank by the
            query, so each namespace is read in pages, up to this many items, and all of them
            join the pool for the selector to rank; a warning says when the cap cut a
            namespace short.

    Example:
        >>> MemoryOptions([("memories", "{user_id}")]).limit
        10
    """

    namespaces: Sequence[Namespace]
    store: BaseStore | None = None
    limit: int = 10
    scan_limit: int = 1000

    def __post_init__(self) -> None:
        spaces = self.namespaces
        if (
            isinstance(spaces, str)
            or not isinstance(spaces, Sequence)
            or not spaces
            or not all(callable(ns) or _parts(ns) for ns in spaces)
        ):
            raise ValueError(
                "namespaces must be a non-empty list of namespaces (tuples of str, or "
                f"callables), e.g. [('memories', '{{user_id}}')], got {spaces!r}"
            )
        object.__setattr__(self, "namespaces", tuple(spaces))
        if self.store is not None and not isinstance(self.store, BaseStore):
            raise ValueError(
                f"store must be a langgraph BaseStore, got {type(self.store).__name__}"
            )
        positive_int("limit", self.limit)
        positive_int("scan_limit", self.scan_limit)


@dataclass(frozen=True)
class ToolLoopOptions:
    """How tool spans are selected: the latest turn, reused outputs, fold stubs, placeholders.

    Attributes:
        keep_latest_turn: ``True``: everything from the latest human message on is mandatory.
            ``False``: only that message, the system prompt and the newest span (the current
            tool call with its results, or the last message) are. ``"auto"`` (default): as
            ``True``, unless that part alone exceeds the budget (a long single-task tool loop):
            then as ``False``, so the earlier tool spans of the turn compete for the budget
            (whole, never split). The selection event's ``mandatory`` says which applied.
        lift_reused: Treat a tool span whose results hold a value a later tool call already
            took up (a path, an id, a long number), and the newest read of each file (an edit
            quotes the file as the agent last saw it), as relevant as the most relevant
            candidate of the pool, whatever its words say (the selector's ``relevant_ids``),
            for every strategy that reads relevance (docs/results/lifecycle.md has the
            figures). Default ``True``.
        fold_stubs: Send optional tool spans that are not kept whole as their lifecycle fold
            stubs (the object id, one line, the locators the output contains: paths, ids,
            URLs; the call's own text is folded with the results, its tool calls stay). The
            stubs are the floor: those that fit beside the mandatory part are always sent,
            first the stubs of outputs whose values later calls already used, then newest
            first; a span the lifecycle already folded is its own floor. The selector decides
            which of those spans to send whole instead, each costing what it adds to its stub;
            a stub that does not fit is an alternative to its span (whole, stub or neither).
            The exact payload of every stub that is sent is written to ``sidecar_store``
            first, so the ``recover_context`` tool
            (:func:`~langchain_pacms.lifecycle.make_recover_tool` over the same store) returns
            it byte for byte. Needs ``sidecar_store``; not with ``placeholders``. Default
            (``None``): on when a ``sidecar_store`` is given (and ``placeholders`` is not).
        sidecar_store: The LangGraph ``BaseStore`` fold stubs write their payloads to, under
            the run's ``configurable.thread_id`` (a run without one has its own thread, named
            after its first message: :func:`~langchain_pacms.messages.run_thread`).
        placeholders: Offer each optional tool span also as a call-only variant whose results
            are replaced by a short placeholder ``ToolMessage``.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> ToolLoopOptions(sidecar_store=InMemoryStore()).fold_stubs
        True
        >>> ToolLoopOptions(fold_stubs=True)
        Traceback (most recent call last):
        ...
        ValueError: fold_stubs=True needs sidecar_store=<a BaseStore> for the folded outputs
    """

    keep_latest_turn: bool | Literal["auto"] = "auto"
    lift_reused: bool = True
    fold_stubs: bool | None = None
    sidecar_store: BaseStore | None = None
    placeholders: bool = False

    def __post_init__(self) -> None:
        if self.keep_latest_turn not in (True, False, "auto"):
            raise ValueError(
                f"keep_latest_turn must be True, False or 'auto', got {self.keep_latest_turn!r}"
            )
        _flag("lift_reused", self.lift_reused)
        _flag("placeholders", self.placeholders)
        store = self.sidecar_store
        if store is not None and not isinstance(store, BaseStore):
            raise ValueError(
                f"sidecar_store must be a langgraph BaseStore, got {type(store).__name__}"
            )
        if self.fold_stubs is None:  # the default: stubs wherever their payloads can be stored
            object.__setattr__(self, "fold_stubs", store is not None and not self.placeholders)
        _flag("fold_stubs", self.fold_stubs)
        if self.fold_stubs and store is None:
            raise ValueError(
                "fold_stubs=True needs sidecar_store=<a BaseStore> for the folded outputs"
            )
        if store is not None and not self.fold_stubs:
            raise ValueError("sidecar_store is only used with fold_stubs (pass fold_stubs=True)")
        if self.fold_stubs and self.placeholders:
            raise ValueError(
                "pass fold_stubs or placeholders, not both (each is a variant of a dropped "
                "tool span)"
            )
