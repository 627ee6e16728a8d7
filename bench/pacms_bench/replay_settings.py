"""Choose the heuristic planner's settings on the development split and match them to baselines.

The sessions are split by a seed (:func:`dev_split`); on the development part
:func:`choose_setting` picks the default from :data:`HEURISTIC_GRID` and
:func:`match_baselines` picks, per baseline the default does not dominate (:func:`dominates`),
the setting that meets it. The test split reports them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_pacms.tokens import TokenCounter
from pacms_bench.replay_cache import ReplayCache
from pacms_bench.replay_cuts import evaluate_cuts
from pacms_bench.replay_policies import BASELINES
from pacms_bench.traces import TraceSession

__all__ = [
    "DEV_STRICT",
    "HEURISTIC_BASE",
    "HEURISTIC_GRID",
    "HORIZON_GRID",
    "choose_setting",
    "dev_split",
    "dominates",
    "match_baselines",
    "matched_name",
    "scorer",
]


HEURISTIC_BASE: dict[str, Any] = {
    "fold_min_tokens": 800,
    "mask_min_tokens": 300,
    "keep_recent": 2,
    "keep_above": 0.6,
    "keep_file_views": True,
}
"""Planner settings every evaluated setting starts from (stated in full, so the grid does not move
when the planner's defaults do; the planner's defaults are the setting the grid chose)."""

HEURISTIC_GRID: tuple[dict[str, Any], ...] = tuple(
    {**HEURISTIC_BASE, **g}
    for g in (
        {},
        {"keep_recent": 1},
        {"fold_min_tokens": 250, "mask_min_tokens": 150},
        {"fold_min_tokens": 250, "mask_min_tokens": 150, "keep_recent": 1},
        {"fold_min_tokens": 120, "mask_min_tokens": 120, "keep_above": 0.8, "keep_recent": 1},
        {"fold_min_tokens": 60, "mask_min_tokens": 60, "keep_above": 1.0, "keep_recent": 1},
        {"fold_min_tokens": 60, "mask_min_tokens": 60, "keep_above": 1.0, "keep_recent": 0},
        {
            "fold_min_tokens": 60,
            "mask_min_tokens": 60,
            "keep_above": 1.0,
            "keep_recent": 0,
            "fold_calls": False,
        },
    )
)
"""Heuristic planner settings tried on the development split (the last one folds tool results
alone, as the planner did before span folds), each over :data:`HEURISTIC_BASE`.

The one chosen prunes most among those at or above :data:`DEV_STRICT` strict no-impact on the
development split (the target's bar); if none reaches it, the one with the highest strict rate.
"""

DEV_STRICT = 0.95
"""Strict no-impact a setting must reach on the development split to be chosen for pruning."""

HORIZON_GRID: tuple[dict[str, Any], ...] = tuple(
    {
        "fold_min_tokens": 60,
        "mask_min_tokens": 60,
        "keep_above": 1.0,
        "keep_recent": 0,
        "keep_file_views": views,
        "max_stubs": k,
    }
    for views in (False, True)
    for k in (1, 2, 3, 6, 12, 20, 30, 40)
)
"""Settings that also prune every stub but the newest ``max_stubs``, for matching.

They are never the default: a planner that drops the pointer to a folded payload drops the
model's way back to it. Without kept file views they prune the most (a kept view is not bounded
by the horizon); with them, and a wide horizon, they sit just above the default's pruning. With
:data:`HEURISTIC_GRID` they are the settings :func:`match_baselines` chooses from on the development
split when the default does not dominate a baseline there.
"""


def dev_split(sessions: Sequence[TraceSession], share: float, seed: int) -> tuple[list, list]:
    """``(development, test)``: a seeded ``share`` of the sessions, plus every development-only one.

    The seeded draw is over the other sessions alone, so adding development-only sessions
    leaves the test split as it was.
    """
    pool = sorted(s.name for s in sessions if not s.dev_only)
    dev = set(random.Random(seed).sample(pool, max(1, round(share * len(pool))))) if pool else set()
    return (
        [s for s in sessions if s.dev_only or s.name in dev],
        [s for s in sessions if not s.dev_only and s.name not in dev],
    )


def scorer(
    sessions: Sequence[TraceSession],
    max_cuts: int,
    seed: int,
    counter: TokenCounter,
    cache: ReplayCache | None,
    tick: Callable[[], None],
) -> Callable[..., dict[str, Any]]:
    """``(policy, settings, planner=...) -> row`` on ``sessions``.

    The row is :func:`~pacms_bench.replay_cuts.evaluate_cuts`' summary row.
    """

    def row(policy: str, settings: Mapping[str, Any] | None = None, **more: Any) -> dict[str, Any]:
        return evaluate_cuts(
            sessions,
            policy,
            settings=settings,
            max_cuts=max_cuts,
            seed=seed,
            counter=counter,
            cache=cache,
            tick=tick,
            **more,
        ).row()

    return row


def choose_setting(
    dev: Sequence[TraceSession],
    max_cuts: int,
    seed: int,
    counter: TokenCounter,
    cache: ReplayCache | None,
    tick: Callable[[], None],
) -> tuple[dict[str, Any], list[tuple[Any, dict[str, Any], dict[str, Any]]]]:
    """The heuristic setting chosen on the development split, and every setting's score."""
    dev_row = scorer(dev, max_cuts, seed, counter, cache, tick)
    scored = []
    for settings in HEURISTIC_GRID:
        row = dev_row("heuristic", settings=settings)
        safe = row["strict_no_impact"] >= DEV_STRICT
        score = (safe, row["pruning_mean"] if safe else row["strict_no_impact"])
        scored.append((score, settings, row))
    return max(scored, key=lambda t: t[0])[1], scored


def match_baselines(
    dev: Sequence[TraceSession],
    best: Mapping[str, Any],
    scored: Sequence[tuple[Any, dict[str, Any], dict[str, Any]]],
    max_cuts: int,
    seed: int,
    counter: TokenCounter,
    cache: ReplayCache | None,
    tick: Callable[[], None],
) -> dict[str, dict[str, Any]]:
    """Per baseline the default does not dominate on the dev split, the setting that meets it.

    Meeting a baseline is reaching its development pruning at the highest strict no-impact
    there. The candidates are :data:`HEURISTIC_GRID` (its rows ``scored`` by :func:`choose_setting`,
    which chose ``best`` among them) and :data:`HORIZON_GRID`; a setting qualifies when its
    development pruning is at least the baseline's, and the one with the highest development
    strict rate (then the higher pruning) is chosen. A baseline that no setting meets gets
    none. Every figure here is from the development split.
    """
    dev_row = scorer(dev, max_cuts, seed, counter, cache, tick)
    grid = [(g, row) for _, g, row in scored]
    mine = next(row for g, row in grid if g == best)
    grid += [(g, dev_row("heuristic", g)) for g in HORIZON_GRID]
    matched: dict[str, dict[str, Any]] = {}
    for name in BASELINES:
        if name == "none":
            continue
        other = dev_row(name, None)
        if dominates(mine, other):
            continue
        fits = [
            (r["strict_no_impact"], r["pruning_mean"], i)
            for i, (_, r) in enumerate(grid)
            if r["pruning_mean"] >= other["pruning_mean"]
        ]
        if not fits:
            continue
        settings, row = grid[max(fits)[2]]
        matched[name] = {
            "settings": settings,
            "dev": {"strict": row["strict_no_impact"], "pruning": row["pruning_mean"]},
            "baseline_dev": {"strict": other["strict_no_impact"], "pruning": other["pruning_mean"]},
        }
    return matched


def matched_name(baseline: str) -> str:
    """The row name of the heuristic setting matched to ``baseline`` (:func:`match_baselines`)."""
    return f"heuristic~{baseline}"


def dominates(mine: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """No lower strict no-impact at no lower pruning, and better on one of them (Pareto).

    An empty ``mine`` (a row that was not run) dominates nothing.
    """
    if not mine:
        return False
    a, b = (
        (mine["strict_no_impact"], mine["pruning_mean"]),
        (other["strict_no_impact"], other["pruning_mean"]),
    )
    return a[0] >= b[0] and a[1] >= b[1] and a != b
