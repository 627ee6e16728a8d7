"""The strategy and options a selection runs: a selector's defaults merged with a call's own.

``pacms`` reads the embedder's cosine scale, so a selector fills in its
:class:`~langchain_pacms.embeddings.profile.EmbedderProfile`'s threshold, gain floor and
relevance feedback (and ``calibrate=True`` for a calibrated profile) unless they are given.

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

    Call ``options`` are merged over ``own_options`` when the strategy is the selector's own
    (``strategy`` is ``None`` or ``own``). ``pacms`` gets ``profile``'s
    ``similarity_threshold``, ``min_gain`` and ``relevance_feedback`` unless they are given,
    and ``calibrate=True`` when the profile is calibrated; every other strategy is left as
    given.

    Args:
        own: The selector's default strategy.
        own_options: The selector's options for it.
        profile: The embedder profile ``pacms`` runs with.
        strategy: A strategy override, or ``None`` for the selector's default.
        options: Options given for the call.

    Returns:
        ``(strategy, options)``, ready for :func:`~langchain_pacms.core.solve`.
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
    """Raise now for an unknown strategy, or options it does not take or rejects.

    Raises:
        ValueError: Naming the strategy and what it rejected (see
            :func:`~langchain_pacms.core.rejection`).

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
