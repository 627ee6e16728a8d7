"""The strategy registry, and :func:`solve`, which checks every strategy's pick the same way."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from langchain_pacms.core.baselines import lastk, rag, topk
from langchain_pacms.core.mmr import mmr
from langchain_pacms.core.pacms import pacms, pacms_paper
from langchain_pacms.core.pick import Pick, Strategy
from langchain_pacms.core.problem import Problem
from langchain_pacms.errors import PACMSError

__all__ = [
    "StrategyError",
    "available_strategies",
    "check_options",
    "get_strategy",
    "register_strategy",
    "rejection",
    "solve",
]


class StrategyError(PACMSError, RuntimeError):
    """A strategy returned a pick that breaks the selection invariants."""


_REGISTRY: dict[str, Strategy] = {}


def register_strategy(name: str, strategy: Strategy, *, replace: bool = False) -> None:
    """Register a strategy under ``name``.

    Args:
        name: Registry key, e.g. ``"mine"``.
        strategy: Callable ``(problem, **options) -> Pick``.
        replace: Allow replacing an existing name.

    Raises:
        ValueError: If the name is taken and ``replace`` is false, or the name is empty.

    Example:
        >>> import numpy as np
        >>> from langchain_pacms.core import Pick, Problem, solve
        >>> def first(p, **_):
        ...     return Pick(np.array([0]), np.array([0.0, np.nan]))
        >>> register_strategy("first", first, replace=True)
        >>> p = Problem.build(np.eye(2), [0.0, 1.0], tokens=[1, 1], budget=1)
        >>> solve(p, "first").order.tolist(), solve(p, "topk").order.tolist()
        ([0], [1])
    """
    if not name or not isinstance(name, str):
        raise ValueError("strategy name must be a non-empty string")
    if name in _REGISTRY and not replace:
        raise ValueError(f"strategy {name!r} is already registered (pass replace=True)")
    _REGISTRY[name] = strategy


def get_strategy(name: str) -> Strategy:
    """Look up a registered strategy, with a clear error for unknown names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(available_strategies())
        raise ValueError(f"unknown strategy {name!r}; registered: {known}") from None


def available_strategies() -> list[str]:
    """Names of the registered strategies, sorted.

    Example:
        >>> {"pacms", "topk", "mmr"} <= set(available_strategies())
        True
    """
    return sorted(_REGISTRY)


def solve(problem: Problem, strategy: str | Strategy = "pacms", **options: Any) -> Pick:
    """Run a strategy and check its pick (:class:`StrategyError` if it breaks an invariant).

    Mandatory items alone over the budget are kept as they are, with ``over_budget`` set.
    """
    fn = get_strategy(strategy) if isinstance(strategy, str) else strategy
    mandatory = np.flatnonzero(problem.mandatory).astype(np.int64)
    if int(problem.tokens[mandatory].sum()) > problem.budget:
        return Pick(mandatory, np.full(problem.n, np.nan), over_budget=True)
    pick = fn(problem, **options)
    if not isinstance(pick, Pick):
        raise StrategyError(f"strategy returned {type(pick).__name__}, expected a Pick")
    raw = np.asarray(pick.order)
    if raw.ndim != 1:
        raise StrategyError(f"strategy returned order of shape {raw.shape}, expected 1-D")
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise StrategyError(f"strategy returned {raw.dtype} indices, expected integer indices")
    order = raw.astype(np.int64)
    scores = np.asarray(pick.scores, dtype=np.float64)
    if scores.shape != (problem.n,):
        raise StrategyError(
            f"strategy returned scores of shape {scores.shape}, expected ({problem.n},)"
        )
    if order.size and (order.min() < 0 or order.max() >= problem.n):
        raise StrategyError("strategy returned an index out of range")
    if np.unique(order).size != order.size:
        raise StrategyError("strategy returned an index twice")
    if not np.isin(mandatory, order).all():
        raise StrategyError("strategy dropped a mandatory item")
    spent = int(problem.tokens[order].sum())
    if spent > problem.budget:
        name = strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "?")
        raise StrategyError(
            f"strategy {name!r} exceeded the token budget: {spent} tokens for {problem.budget}"
        )
    rest = order[~np.isin(order, mandatory)]
    return Pick(np.concatenate([mandatory, rest]), scores, False, pick.info)


def _keyword_options(fn: Callable[..., Any]) -> list[str] | None:
    """The keyword options ``fn`` takes after the problem; ``None`` when it takes any."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):  # no signature to read
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


_PROBED: dict[tuple[Any, str], str | None] = {}  # a built-in's answer to options it was run on
_PROBED_MAX = 256


def rejection(
    strategy: str | Strategy, options: Mapping[str, Any], *, probe: bool = True
) -> str | None:
    """Why ``strategy`` rejects ``options``, or ``None``.

    An option the strategy does not take is named; with ``probe``, a built-in is also run on a
    two-item problem, which rejects bad values (per-candidate options such as ``values`` need
    ``probe=False``: the probe has its own two candidates).
    """
    fn = get_strategy(strategy) if isinstance(strategy, str) else strategy
    accepted = _keyword_options(fn)
    unknown = [] if accepted is None else sorted(set(options) - set(accepted))
    if unknown:
        return f"unknown option {unknown[0]!r}; it accepts: {', '.join(accepted or ['nothing'])}"
    if not probe or fn not in _BUILTINS.values():
        return None
    try:  # a built-in's answer depends on its options only: asked once each
        key: tuple[Any, str] | None = (fn, json.dumps(dict(options), sort_keys=True))
    except (TypeError, ValueError):  # options JSON cannot hold: asked every time
        key = None
    if key is not None and key in _PROBED:
        return _PROBED[key]
    two = Problem.build(np.eye(2), np.array([1.0, 0.0]), tokens=[1, 1], budget=1)
    reason = None
    try:
        solve(two, strategy, **options)
    except (TypeError, ValueError) as err:
        reason = str(err)
    if key is not None:
        if len(_PROBED) >= _PROBED_MAX:
            _PROBED.clear()
        _PROBED[key] = reason
    return reason


def check_options(strategy: str | Strategy, **options: Any) -> None:
    """Raise :class:`ValueError` when ``strategy`` rejects ``options`` (see :func:`rejection`)."""
    reason = rejection(strategy, options)
    if reason is not None:
        label = strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "?")
        raise ValueError(f"strategy {label!r} rejects its options {dict(options)}: {reason}")


_BUILTINS: dict[str, Callable[..., Pick]] = {
    "pacms": pacms,
    "pacms_paper": pacms_paper,
    "topk": topk,
    "lastk": lastk,
    "mmr": mmr,
    "rag": rag,
}
for _name, _fn in _BUILTINS.items():
    register_strategy(_name, _fn)
