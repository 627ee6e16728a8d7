"""The strategy and options a selection runs: a selector's defaults merged with a call's own."""

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
    """The strategy and options a call runs: ``options`` over ``own_options`` for ``own``.

    ``pacms`` gets the ``profile``'s defaults unless given (``calibrate=True`` if calibrated).
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
    """Raise ``ValueError`` now for an unknown strategy, or options it does not take or rejects."""
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
