"""The lifecycle replay's report: the targets it checks, and its JSON, Markdown and plot files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pacms_bench.replay_policies import BASELINES
from pacms_bench.replay_settings import DEV_STRICT, dominates, matched_name
from pacms_bench.selection_replay import is_selection

__all__ = ["COST_TARGET", "TARGETS", "totals_and_targets", "write_report"]


TARGETS = {"mini-swe": 0.5, "tau-bench": 0.3}
"""Pruning rate the heuristic must reach at >= 95% strict no-impact, per data set."""
COST_TARGET = 0.25
"""Cache-adjusted cost saving against no management the whole replay must reach."""


def totals_and_targets(
    datasets: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole replay's cost per label, and each target of the issue with its figure."""
    labels = set.intersection(*(set(d["cost"]) for d in datasets.values())) if datasets else set()
    total = {k: sum(d["cost"][k] for d in datasets.values()) for k in sorted(labels)}
    base = total.get("none", 0.0)
    saved = {
        k: round(1 - v / base, 4) for k, v in total.items() if ":" not in k and k != "none" and base
    }
    best = max((k for k in saved if k.startswith("heuristic@")), key=saved.__getitem__, default="")
    targets: dict[str, Any] = {
        "cost": {
            "goal": COST_TARGET,
            "best": best,
            "saved": saved.get(best, 0.0),
            "met": saved.get(best, 0.0) >= COST_TARGET,
        }
    }
    for dataset, data in datasets.items():
        rows = data["policies"]
        mine = rows["heuristic"]
        not_dominated = [
            name
            for name, r in rows.items()
            if name in BASELINES and name != "none" and not dominates(mine, r)
        ]
        unmatched = [
            name
            for name in not_dominated
            if not dominates(rows.get(matched_name(name), {}), rows[name])
        ]
        entry: dict[str, Any] = {
            "strict": mine["strict_no_impact"],
            "strict_rederivable_excluded": mine["strict_rederivable_excluded"],
            "pruning": mine["pruning_mean"],
            "not_dominated": not_dominated,
            "above_every_baseline": not not_dominated,
            "not_matched": unmatched,
            "above_every_baseline_matched": not unmatched,
        }
        if dataset in TARGETS:
            entry["pruning_goal"] = TARGETS[dataset]
            entry["met"] = (
                mine["strict_no_impact"] >= DEV_STRICT and mine["pruning_mean"] >= TARGETS[dataset]
            )
        targets[dataset] = entry
    return {"cost": {k: round(v, 1) for k, v in total.items()}, "saved": saved}, targets


def _target_lines(report: Mapping[str, Any]) -> list[str]:
    """The targets as a Markdown table (empty for a report without them)."""
    targets = report.get("targets")
    if not targets:
        return []
    cost = targets["cost"]
    saved = report["cost_total"]["saved"]
    lines = [
        "### Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        f"| whole-replay cost >= {cost['goal']:.0%} below no management | "
        f"{cost['best'] or 'heuristic'} saves {cost['saved']:.1%} (all labels: "
        + ", ".join(f"{k} {v:+.1%}" for k, v in saved.items() if k.startswith("heur"))
        + f") | {'yes' if cost['met'] else 'no'} |",
    ]
    for dataset, t in targets.items():
        if dataset == "cost":
            continue
        if "pruning_goal" in t:
            lines.append(
                f"| {dataset}: strict >= {DEV_STRICT:.0%} at pruning >= "
                f"{t['pruning_goal']:.0%} | {t['strict']:.1%} at {t['pruning']:.1%} "
                f"({t['strict_rederivable_excluded']:.1%} re-derivable excluded) | "
                f"{'yes' if t['met'] else 'no'} |"
            )
        beaten = ", ".join(t["not_dominated"]) or "none"
        lines.append(
            f"| {dataset}: the default dominates every baseline (strict no-impact and "
            f"pruning no lower, one higher) | not dominated: {beaten} | "
            f"{'yes' if t['above_every_baseline'] else 'no'} |"
        )
        if t["not_dominated"]:
            left = ", ".join(t["not_matched"]) or "none"
            lines.append(
                f"| {dataset}: each of those dominated by the setting matched to it "
                f"on the development split (`{matched_name('<baseline>')}`) | "
                f"not dominated: {left} | "
                f"{'yes' if t['above_every_baseline_matched'] else 'no'} |"
            )
    return [*lines, ""]


def write_report(report: Mapping[str, Any], out: Path) -> list[Path]:
    """Write ``lifecycle.json``, ``lifecycle.md`` and (with matplotlib) ``lifecycle.png``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "lifecycle.json", out / "lifecycle.md"]
    paths[0].write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    lines = []
    for dataset, data in report["datasets"].items():
        lines += [
            f"### {dataset} ({data['sessions_test']} test sessions, "
            f"heuristic settings {data['heuristic_settings'] or 'defaults'})",
            "",
            "| policy | cuts | pruning (mean / median) | non-system pruning "
            "| strict no-impact [95% CI] | strict, re-derivable excluded [95% CI] "
            "| with recovery [95% CI] | recovery calls | rejected actions |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for name, r in data["policies"].items():
            rejected = "; ".join(f"{n} {why}" for why, n in r["rejected"].items()) or "-"
            lines.append(
                f"| {name} | {r['cuts']} | {r['pruning_mean']:.1%} / {r['pruning_median']:.1%} | "
                f"{r['pruning_non_system_mean']:.1%} | {r['strict_no_impact']:.1%} "
                f"[{r['strict_ci'][0]:.1%}, {r['strict_ci'][1]:.1%}] | "
                f"{r['strict_rederivable_excluded']:.1%} "
                f"[{r['strict_rederivable_excluded_ci'][0]:.1%}, "
                f"{r['strict_rederivable_excluded_ci'][1]:.1%}] | "
                f"{r['no_impact_with_recovery']:.1%} [{r['recovery_ci'][0]:.1%}, "
                f"{r['recovery_ci'][1]:.1%}] | {r['recovery_calls']} | {rejected} |"
            )
        lines += [
            "",
            f"Cache-adjusted input cost over the {data['sessions_test']} test sessions "
            "(`name@t`: committed by the harness at threshold t; saved: against no "
            "management, positive is cheaper):",
            "",
            "| policy | cost | saved | commits |",
            "|---|---:|---:|---:|",
            f"| none | {data['cost']['none']:,.0f} | - | - |",
        ]
        for label, saved in data["cost_vs_none"].items():
            commits = data["cost"].get(f"{label}:commits", "-")
            lines.append(f"| {label} | {data['cost'][label]:,.0f} | {saved:+.1%} | {commits} |")
        lines.append("")
    lines += _target_lines(report)
    paths[1].write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return paths
    paths.append(out / "lifecycle.png")
    _plot(report, plt, paths[-1])
    return paths


_STRATEGY_COLORS = {"pacms": 3, "topk": 0, "mmr": 2, "lastk": 1}  # tab10 indices
_FAMILY_MARKERS = {"select": "s", "select+stubs": "^", "life+select": "D"}


def _plot(report: Mapping[str, Any], plt: Any, path: Path) -> None:
    """Pruning against strict no-impact with Wilson intervals, one column per data set.

    The top row holds the planner (a star; a plus for a setting matched to a baseline) and the
    baselines; the bottom row the per-call selection
    rows (colour: strategy; marker: family; filled at 50% kept, hollow at 30%, thick-edged at
    70%) with the heuristic as a black star for reference.
    """
    from matplotlib.lines import Line2D

    datasets = list(report["datasets"])
    fig, axes = plt.subplots(
        2, len(datasets), figsize=(4.6 * len(datasets) + 3.2, 8), squeeze=False
    )
    tab = plt.get_cmap("tab10")

    def point(ax: Any, r: Mapping[str, Any], **style: Any) -> None:
        low, high = r["strict_ci"]
        y = r["strict_no_impact"]
        ax.errorbar(r["pruning_mean"], y, yerr=[[y - low], [high - y]], capsize=3, **style)

    for col, dataset in enumerate(datasets):
        policies = report["datasets"][dataset]["policies"]
        top, bottom = axes[0][col], axes[1][col]
        plain = [n for n in policies if not is_selection(n)]
        for k, name in enumerate(plain):
            mine = name.startswith("heuristic")  # the default (star) or a matched setting
            point(
                top,
                policies[name],
                fmt="*" if name == "heuristic" else "P" if mine else "o",
                color="black" if name == "heuristic" else "dimgray" if mine else tab(k % 10),
                label=name,
                markersize=11 if name == "heuristic" else 8 if mine else 6,
            )
        if "heuristic" in policies:
            point(bottom, policies["heuristic"], fmt="*", color="black", markersize=11)
        for name in (n for n in policies if is_selection(n)):
            family, _, spec = name.partition(":")
            strategy, _, share = spec.partition("@")
            color = tab(_STRATEGY_COLORS.get(strategy, 9))
            kept = float(share)
            point(
                bottom,
                policies[name],
                fmt=_FAMILY_MARKERS[family],
                color=color,
                markerfacecolor="none" if kept < 0.5 else color,
                markersize=7,
                markeredgewidth=2 if kept > 0.5 else 1,
            )
        for row, ax in ((0, top), (1, bottom)):
            ax.set_title(dataset if row == 0 else f"{dataset}: per-call selection")
            ax.set_xlabel("pruning rate (share of prefix tokens removed)")
            ax.set_ylabel("strict no-impact")
            ax.set_xlim(-0.02, 1)
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    keys = [Line2D([], [], marker="*", color="black", ls="", markersize=11, label="heuristic")]
    keys += [
        Line2D([], [], marker="o", color=tab(i), ls="", label=s)
        for s, i in _STRATEGY_COLORS.items()
    ]
    keys += [
        Line2D([], [], marker=m, color="black", ls="", label=f) for f, m in _FAMILY_MARKERS.items()
    ]
    keys += [
        Line2D([], [], marker="o", color="black", ls="", label="50% kept"),
        Line2D([], [], marker="o", color="black", markerfacecolor="none", ls="", label="30% kept"),
        Line2D(
            [],
            [],
            marker="o",
            color="black",
            markeredgewidth=2,
            ls="",
            label="70% kept (thick edge)",
        ),
    ]
    axes[1][-1].legend(handles=keys, fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
