"""The typed options of the hook, the middleware and the compressor, each checked when made."""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from langgraph.store.base import BaseStore

from langchain_pacms.core import Strategy, check_flag, check_options, get_strategy

__all__ = ["MemoryOptions", "Namespace", "Pacms", "StrategyOptions", "ToolLoopOptions"]

Namespace = tuple[str, ...] | Callable[[Any, Mapping[str, Any]], tuple[str, ...]]
"""A memory namespace: a tuple (parts may hold ``{placeholders}``) or ``(state, values) ->``."""


def positive_int(name: str, value: Any) -> int:
    """``value`` when it is a positive ``int``, else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _parts(namespace: Any) -> bool:
    """Whether ``namespace`` is a non-empty tuple or list of str."""
    return (
        isinstance(namespace, (tuple, list))
        and bool(namespace)
        and all(isinstance(p, str) for p in namespace)
    )


class StrategyOptions:
    """A strategy and its keyword options (read-only), checked against the strategy when made.

    Args:
        strategy: A registered strategy name (``pacms``, ``topk``, ``lastk``, ``mmr``, ``rag``,
            ...) or a strategy callable.
        **options: The strategy's keyword options.

    Raises:
        ValueError: For an unknown strategy, an option it does not take or a bad value.

    Example:
        >>> StrategyOptions("mmr", lambda_mult=0.7)
        StrategyOptions('mmr', lambda_mult=0.7)
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
        k = options.get("k", 1)  # rag's count (its default is valid)
        if strategy in ("rag", get_strategy("rag")) and (
            isinstance(k, bool) or not isinstance(k, int) or k < 1
        ):
            raise ValueError(
                f"strategy 'rag' rejects its options {dict(options)}: it needs an int k >= 1, "
                f"got {k!r}"
            )
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

        Example:
            >>> StrategyOptions.coerce("topk")
            StrategyOptions('topk')
        """
        return strategy if isinstance(strategy, StrategyOptions) else cls(strategy)


@dataclass(frozen=True, repr=False)
class Pacms(StrategyOptions):
    """The ``pacms`` strategy with typed options (see :func:`~langchain_pacms.core.pacms.pacms`).

    An option left ``None`` is not passed (the default applies); ``fill=False`` turns the fill
    off. ``experimental_*``, ``cost_exponent`` and ``guarantee`` are research settings.
    ``pacms``'s ``values`` are not a setting: a tool loop passes each call's
    (``ToolLoopOptions.cover_values``).

    Example:
        >>> Pacms(similarity_threshold=0.3)
        Pacms(similarity_threshold=0.3)
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


def _template_problem(part: str) -> str | None:
    """What ``str.format`` would reject in a namespace part, else ``None``."""
    try:
        fields = list(string.Formatter().parse(part))
    except ValueError as err:
        return str(err)
    bad = [c for _, _, _, c in fields if c not in (None, "r", "s", "a")]
    return f"unknown conversion !{bad[0]}" if bad else None


@dataclass(frozen=True)
class MemoryOptions:
    """Where each call's memories come from: namespaces of a LangGraph ``BaseStore``.

    Attributes:
        namespaces: The namespaces to search, e.g. ``[("memories", "{user_id}")]`` (filled from
            the configurable and the runtime context), or ``(state, values) -> tuple`` callables.
        store: The store (default: the graph's or the agent's).
        limit: Most items fetched per namespace from a store with a vector index.
        scan_limit: Most items read per namespace from a store without one (all join the pool).

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
        for ns in spaces:  # a malformed template fails here, not at every call
            parts: tuple[str, ...] = () if callable(ns) else tuple(ns)
            for part in parts:
                if "{" in part and (problem := _template_problem(part)):
                    raise ValueError(f"namespace {parts!r}: {part!r} is not a template: {problem}")
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
        keep_latest_turn: ``True``: everything from the latest human message on is mandatory;
            ``False``: that message, the system prompt and the newest span; ``"auto"``: ``True``
            while it fits the budget.
        lift_reused: Rank a tool span whose results a later call used (a path, an id), or the
            newest read of a file, as the most relevant.
        fold_stubs: Send optional tool spans not kept whole as fold stubs (one line of locators),
            payloads written to ``sidecar_store`` for ``recover_context``; ``None``: on with one.
        sidecar_store: The ``BaseStore`` for those payloads, under the run's ``thread_id``
            (else :func:`~langchain_pacms.messages.run_thread`).
        placeholders: Also offer optional tool spans with placeholder results (not with stubs).
        cover_values: Where ``pacms`` selects among tool rounds, cover the candidates' exact
            values (paths, ids, numbers; :func:`~langchain_pacms.core.values.value_coverage`),
            not their embeddings' similarity (a ``RemoteSelector`` sends the values).

    Example:
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
    cover_values: bool = True

    def __post_init__(self) -> None:
        if self.keep_latest_turn not in (True, False, "auto"):
            raise ValueError(
                f"keep_latest_turn must be True, False or 'auto', got {self.keep_latest_turn!r}"
            )
        check_flag("lift_reused", self.lift_reused)
        check_flag("placeholders", self.placeholders)
        check_flag("cover_values", self.cover_values)
        store = self.sidecar_store
        if store is not None and not isinstance(store, BaseStore):
            raise ValueError(
                f"sidecar_store must be a langgraph BaseStore, got {type(store).__name__}"
            )
        if self.fold_stubs is None:  # the default: stubs wherever their payloads can be stored
            object.__setattr__(self, "fold_stubs", store is not None and not self.placeholders)
        check_flag("fold_stubs", self.fold_stubs)
        if self.fold_stubs and store is None:
            raise ValueError(
                "fold_stubs=True needs sidecar_store=<a BaseStore> for the folded outputs"
            )
        if store is not None and not self.fold_stubs:
            raise ValueError(
                "sidecar_store is only used for fold stubs, which "
                + (
                    "exclude placeholders=True (pass one of the two)"
                    if self.placeholders
                    else "fold_stubs=False turns off (leave sidecar_store out)"
                )
            )
        if self.fold_stubs and self.placeholders:
            raise ValueError(
                "pass fold_stubs or placeholders, not both (each is a variant of a dropped "
                "tool span)"
            )
