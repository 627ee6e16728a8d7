"""The lifecycle's tuning: the heuristic planner's rules, the commit rule, the mask shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_pacms.lifecycle.boundary import Boundary, at_boundary

__all__ = ["CommitRule", "Masking", "PlannerTuning"]


def _check_int(name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _check_number(name: str, value: Any) -> None:
    """Raise unless ``value`` is an int or a float (a bool is neither) other than NaN."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if value != value:
        raise ValueError(f"{name} must be a number, got nan")


@dataclass(frozen=True)
class PlannerTuning:
    """The rules of :class:`~langchain_pacms.lifecycle.heuristic.HeuristicPlanner`.

    The defaults were chosen on recorded agent runs (docs/results/lifecycle.md).

    Attributes:
        fold_min_tokens: A low-value stable body of at least this many tokens is folded.
        mask_min_tokens: Noisy output of at least this many tokens is masked.
        user_fold_min_tokens: A later user message is folded only from this size on.
        keep_recent: Objects just before the latest turn that are never touched.
        keep_above: An object at least this valuable is kept (unless superseded).
        fold_calls: Fold a tool span with its call's text and long arguments.
        keep_file_views: Keep the latest whole read of each file in view.
        max_stubs: Stubs and masks kept in view, the newest; older ones are pruned (``None``: all).
        recency_half_life: Number of objects after which recency halves.
        cache_size: Entries of the planner's caches (``0``: none).

    Raises:
        TypeError: If a size, a number or a flag has the wrong type.
        ValueError: If a value is out of range (NaN included).

    Example:
        >>> PlannerTuning(keep_recent=2).keep_recent, PlannerTuning().fold_min_tokens
        (2, 60)
    """

    fold_min_tokens: int = 60
    mask_min_tokens: int = 60
    user_fold_min_tokens: int = 4_000
    keep_recent: int = 0
    keep_above: float = 1.0
    fold_calls: bool = True
    keep_file_views: bool = True
    max_stubs: int | None = None
    recency_half_life: float = 12.0
    cache_size: int = 4_096

    def __post_init__(self) -> None:
        for name in ("fold_min_tokens", "mask_min_tokens", "user_fold_min_tokens"):
            _check_int(name, getattr(self, name), 1)
        for name in ("keep_recent", "cache_size"):
            _check_int(name, getattr(self, name), 0)
        if self.max_stubs is not None:
            _check_int("max_stubs", self.max_stubs, 0)
        _check_number("keep_above", self.keep_above)
        if not 0.0 < self.keep_above <= 1.0:
            raise ValueError(f"keep_above must be in (0, 1], got {self.keep_above!r}")
        _check_number("recency_half_life", self.recency_half_life)
        if self.recency_half_life <= 0:
            raise ValueError(f"recency_half_life must be > 0, got {self.recency_half_life!r}")
        for flag in ("fold_calls", "keep_file_views"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {type(getattr(self, flag)).__name__}")
        object.__setattr__(self, "keep_above", float(self.keep_above))
        object.__setattr__(self, "recency_half_life", float(self.recency_half_life))


@dataclass(frozen=True)
class CommitRule:
    """When :class:`~langchain_pacms.lifecycle.harness.LifecycleHarness` commits staged actions.

    Attributes:
        threshold: Commit when the staged actions remove at least this share of the active
            view (default ``0``: every accepted plan).
        max_active_tokens: Also commit, whatever the share, when the view exceeds this.
        boundary: ``"auto"``, ``"turn"`` or ``"tool"`` (see :func:`at_boundary`).
        cached_price: A cached input token's price relative to an uncached one; when set, a
            commit must also pay under prompt caching.

    Raises:
        TypeError: If ``threshold`` or ``cached_price`` is not a number or ``max_active_tokens``
            not an int.
        ValueError: If a value is out of range (NaN included) or ``boundary`` is unknown.

    Example:
        >>> CommitRule(threshold=0.3, boundary="turn")
        CommitRule(threshold=0.3, max_active_tokens=None, boundary='turn', cached_price=None)
    """

    threshold: float = 0.0
    max_active_tokens: int | None = None
    boundary: Boundary = "auto"
    cached_price: float | None = None

    def __post_init__(self) -> None:
        _check_number("threshold", self.threshold)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be within [0, 1], got {self.threshold!r}")
        if self.max_active_tokens is not None:
            _check_int("max_active_tokens", self.max_active_tokens, 1)
        at_boundary([], self.boundary)
        if self.cached_price is not None:
            _check_number("cached_price", self.cached_price)
            if not 0.0 <= self.cached_price < 1.0:
                raise ValueError(f"cached_price must be within [0, 1), got {self.cached_price!r}")


@dataclass(frozen=True)
class Masking:
    """What a mask keeps of the output it replaces: its first ``head`` and last ``tail`` characters.

    Raises:
        ValueError: If ``head`` or ``tail`` is not an int >= 0.

    Example:
        >>> Masking()
        Masking(head=400, tail=200)
    """

    head: int = 400
    tail: int = 200

    def __post_init__(self) -> None:
        for name in ("head", "tail"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
