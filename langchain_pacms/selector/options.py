"""The strategy and options a selection runs: a selector's defaults merged with a call's own.

Example:
    >>> from langchain_pacms.embeddings.profile import DENSE_PROFILE
    >>> resolve_options("topk", {"k": 1}, DENSE_PROFILE, None, None)
    ('topk', {'k': 1})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_pacms.core import Strategy, get_strategy, rejection
from langchain_pacms.embeddings.profile import EmbedderProfile

__all__ = ["check_strategy", "resolve_options"]


def resolve_options(
    own: str | Strategy,
    own_options: Mapping[str, Any],
    profile: EmbedderProfile,
    strategy: str | Strategy | None,
    options: Mapping[str, Any] | None,
) -> tuple[str | Strategy, dict[str, Any]]:
    """The strategy and keyword options a selection with these arguments would run.

    Call ``options`` are merged over ``own_options`` when the strategy is ``own`` (the
    selector's). ``pacms`` gets the ``profile``'s ``similarity_threshold``, ``min_gain`` and
    ``relevance_feedback`` unless given, and ``calibrate=True`` for a calibrated profile.
    """
    given = dict(options or {})
    if strategy is None or strategy == own:
        name, opts = own, {**own_options, **given}
    else:
        name, opts = strategy, given
    if name == "pacms":
        opts.setdefault("similarity_threshold", profile.similarity_threshold)
        opts.setdefault("min_gain", profile.min_gain)
        opts.setdefault("relevance_feedback", profile.relevance_feedback)
        if profile.calibration is not None:
            opts.setdefault("calibrate", True)
    return name, opts


def check_strategy(
    strategy: str | Strategy, options: Mapping[str, Any], profile: EmbedderProfile
) -> None:
    """Raise ``ValueError`` now for an unknown strategy, or options it does not take or rejects.

    Example:
        >>> from langchain_pacms.embeddings.profile import DENSE_PROFILE
        >>> check_strategy("rag", {"k": -1}, DENSE_PROFILE)
        Traceback (most recent call last):
        ...
        ValueError: strategy 'rag' rejected strategy_options {'k': -1}: rag needs k >= 1, got -1
    """
    if isinstance(strategy, str):
        get_strategy(strategy)  # unknown: raises, listing the registered names
    elif not callable(strategy):
        raise ValueError(f"strategy must be a strategy name or a callable, got {strategy!r}")
    reason = rejection(*resolve_options(strategy, options, profile, None, None))
    if reason is not None:
        label = strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "?")
        raise ValueError(
            f"strategy {label!r} rejected strategy_options {dict(options)!r}: {reason}"
        )
