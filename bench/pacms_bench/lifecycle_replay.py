"""Run the lifecycle replay on recorded agent runs: every data set's tables and cost, one report.

Protocol (after the Self-GC paper's offline evaluation):

* **Cuts** (:mod:`pacms_bench.replay_cuts`): after a tool output, once the prefix holds at
  least ``min_tools`` tool spans; at most ``max_cuts`` per session, evenly spaced with a seeded
  offset. The policy manages the prefix; the task message and the newest tool span are always
  kept.
* **Judge** (:mod:`pacms_bench.dependency_judge`, separate rules): the exact strings the
  rest of the session takes from earlier tool outputs must stay visible (strict), or be in a
  folded sidecar (with recovery). Dependencies follow the judge's strict definition (a value a
  later tool output shows again still counts; a path matches by ``/``-aligned suffix too);
  strict no-impact under the earlier definition, which leaves such re-derivable values out, is
  reported beside it.
* **Metrics** per data set and policy: pruning rate (share of prefix tokens removed from the
  view; also over non-system tokens), strict and with-recovery no-impact with Wilson 95%
  intervals, strict no-impact with re-derivable values excluded, recovery calls, rejected
  actions by reason.
* **Cost** (:mod:`pacms_bench.replay_cost`): each session replayed call by call with the
  harness in the loop; the input tokens of each model call are priced ``cached_price`` for the
  unchanged prefix since the previous call and ``1.0`` for the rest.
* **Baselines** (:mod:`pacms_bench.replay_policies`), through the same lifecycle checks:
  oldest-first fold, tool-output prune keeping the last 3, tool mask then prune, a hybrid of
  turn fold and tool prune, and LangChain's ``ClearToolUsesEdit`` (its real class, ``keep=3``).

The heuristic planner's settings are chosen on a seeded development split of the sessions (with
every development-only session, :data:`~pacms_bench.traces.DEV_ONLY`) and reported on
the rest (:mod:`pacms_bench.replay_settings`). :func:`run_lifecycle_eval` runs it all, in worker
processes if asked; :mod:`pacms_bench.lifecycle_report` writes the report's files.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from langchain_pacms.tokens import TokenCounter
from pacms_bench.lifecycle_report import totals_and_targets
from pacms_bench.progress import progress_bar
from pacms_bench.replay_cache import ReplayCache
from pacms_bench.replay_cost import BASELINE_COST_THRESHOLDS, cost_runs, session_cost
from pacms_bench.replay_policies import BASELINES
from pacms_bench.replay_settings import (
    DEV_STRICT,
    HEURISTIC_GRID,
    HORIZON_GRID,
    choose_setting,
    dev_split,
    match_baselines,
    matched_name,
    scorer,
)
from pacms_bench.selection_replay import behind_lifecycle
from pacms_bench.traces import TraceSession

__all__ = ["run_lifecycle_eval"]


Task = tuple[Any, ...]
"""``("cuts", dataset, session, policy, settings, max_cuts, seed)`` or
``("cost", dataset, session, run, boundary, cached_price)``: one replay cell to compute."""

_WORKER: dict[str, Any] = {}


def _worker_init(sessions: Mapping[tuple[str, str], TraceSession], cache: ReplayCache) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool on Ctrl-C
    _WORKER.update(sessions=sessions, cache=cache, counter=TokenCounter())


def _fill(task: Task) -> None:
    """Compute one cell into the worker's cache."""
    kind, dataset, name, *rest = task
    session, cache, counter = (
        _WORKER["sessions"][(dataset, name)],
        _WORKER["cache"],
        _WORKER["counter"],
    )
    if kind == "cuts":
        policy, settings, max_cuts, seed = rest
        scorer([session], max_cuts, seed, counter, cache, lambda: None)(policy, settings)
    else:
        run, boundary, cached_price = rest
        session_cost(session, run, boundary, cached_price, counter, cache)


def _fill_all(
    tasks: Sequence[Task],
    sessions: Sequence[TraceSession],
    cache: ReplayCache,
    jobs: int,
    tick: Callable[[], None],
) -> None:
    """Compute ``tasks`` in ``jobs`` worker processes into ``cache`` (a tick per task)."""
    by_name = {(s.dataset, s.name): s for s in sessions}
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_worker_init, initargs=(by_name, cache)
    )
    try:
        for done in as_completed([pool.submit(_fill, t) for t in tasks]):
            done.result()
            tick()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # cells finished so far stay cached
        raise
    pool.shutdown()


def _prefill(
    splits: Mapping[str, tuple[list[TraceSession], list[TraceSession]]],
    selection: Sequence[str],
    thresholds: Sequence[float],
    cached_price: float,
    max_cuts: int,
    seed: int,
    cache: ReplayCache,
    jobs: int,
    tick: Callable[[], None],
    grow: Callable[[int], None],
) -> None:
    """Every cell of the replay, computed in worker processes before the tables read them.

    First what does not depend on the heuristic setting (the development grids, the baselines
    on both splits, per-call selection), then, with the setting chosen, the rest (the heuristic,
    its matched and ``life+select`` rows, the cost replays); ``grow`` adds the matched rows'
    cells to the progress bar's total. The largest data set goes first in each phase.
    """
    order = sorted(splits, key=lambda d: -sum(len(s.messages) for s in splits[d][1]))
    sessions = [s for d in order for part in splits[d] for s in part]
    first: list[Task] = []
    for d in order:
        dev, test = splits[d]
        first += [
            ("cuts", d, s.name, "heuristic", g, max_cuts, seed)
            for g in (*HEURISTIC_GRID, *HORIZON_GRID)
            for s in dev
        ]
        first += [
            ("cuts", d, s.name, p, None, max_cuts, seed)
            for p in BASELINES
            if p != "none"
            for s in dev
        ]
        first += [
            ("cuts", d, s.name, p, None, max_cuts, seed)
            for p in (*BASELINES, *selection)
            if not behind_lifecycle(p)
            for s in test
        ]
    _fill_all(first, sessions, cache, jobs, tick)
    second: list[Task] = []
    for d in order:
        dev, test = splits[d]
        best, scored = choose_setting(dev, max_cuts, seed, TokenCounter(), cache, lambda: None)
        second += [
            ("cuts", d, s.name, p, best, max_cuts, seed)
            for p in ("heuristic", *(p for p in selection if behind_lifecycle(p)))
            for s in test
        ]
        matched = match_baselines(
            dev, best, scored, max_cuts, seed, TokenCounter(), cache, lambda: None
        )
        second += [
            ("cuts", d, s.name, "heuristic", m["settings"], max_cuts, seed)
            for m in matched.values()
            for s in test
        ]
        grow(len(matched) * len(test))
        second += [
            ("cost", d, s.name, run, "tool", cached_price)
            for run in cost_runs(best, thresholds)
            for s in test
        ]
    _fill_all(second, sessions, cache, jobs, tick)


def _figures(row: Mapping[str, Any]) -> str:
    """A row's strict no-impact and mean pruning, for the progress lines."""
    return f"{row['strict_no_impact']:.3f} @ {row['pruning_mean']:.3f}"


def run_lifecycle_eval(
    sessions: Sequence[TraceSession],
    *,
    max_cuts: int = 8,
    seed: int = 0,
    dev_share: float = 0.3,
    thresholds: Sequence[float] = (0.0, 0.1, 0.3, 0.5),
    cached_price: float = 0.1,
    selection: Sequence[str] = (),
    progress: Callable[[str], None] = lambda _: None,
    cache: ReplayCache | None = None,
    bar: bool = False,
    planner: Any = None,
    planner_spec: str = "",
    jobs: int = 1,
) -> dict[str, Any]:
    """Cuts, policies and cost replay over every data set of ``sessions``; a JSON-ready dict.

    ``selection`` adds per-call selection policies (``select:<strategy>@<kept share>``, e.g.
    :data:`~pacms_bench.replay_policies.SELECTION`) to the per-cut tables. With ``cache``
    every session's cells are kept and reused (an interrupted run resumes where it stopped);
    ``bar`` shows a progress bar on a terminal. ``planner`` (an
    :class:`~langchain_pacms.lifecycle.LLMPlanner` built from the chat model
    ``planner_spec``) adds an ``llm`` row on the test split and its cost replay at the default
    threshold 0.3. With ``cache`` and ``jobs > 1`` (and no ``planner``) the cells are computed
    in that many worker processes first; the tables are the same as with one.
    """
    llm = {"spec": planner_spec} if planner is not None else None
    counter = TokenCounter()
    report: dict[str, Any] = {
        "protocol": {
            "max_cuts": max_cuts,
            "seed": seed,
            "dev_share": dev_share,
            "min_tools": 4,
            "cached_price": cached_price,
            "thresholds": list(thresholds),
            "baseline_thresholds": list(BASELINE_COST_THRESHOLDS),
            "dev_strict": DEV_STRICT,
        },
        "datasets": {},
    }
    splits = {
        d: dev_split([s for s in sessions if s.dataset == d], dev_share, seed)
        for d in sorted({s.dataset for s in sessions})
    }
    replays = len(cost_runs({}, thresholds, llm))
    total = sum(
        (len(HEURISTIC_GRID) + len(HORIZON_GRID) + len(BASELINES) - 1) * len(dev)
        + (1 + len(BASELINES) + len(selection) + (llm is not None) + replays) * len(test)
        for dev, test in splits.values()
    )
    shown = progress_bar(total, bar, desc="lifecycle", unit="session")
    tick = shown.update if shown is not None else (lambda: None)
    say = shown.write if shown is not None else progress

    def grow(cells: int) -> None:  # the matched rows are known once the dev split is scored
        if shown is not None:
            shown.total += cells
            shown.refresh()

    prefilled = False
    if cache is not None and jobs > 1 and planner is None:
        prefilled = True
        _prefill(
            splits, selection, thresholds, cached_price, max_cuts, seed, cache, jobs, tick, grow
        )
        tick = lambda: None  # noqa: E731 (every cell is counted: the tables read them back)
    for dataset, (dev, test) in splits.items():
        best, scored = choose_setting(dev, max_cuts, seed, counter, cache, tick)
        for _, settings, row in scored:
            say(f"{dataset} dev heuristic {settings}: {_figures(row)}")
        on_test = scorer(test, max_cuts, seed, counter, cache, tick)
        rows = {"heuristic": on_test("heuristic", settings=best)}
        say(f"{dataset} heuristic (test): {_figures(rows['heuristic'])}")
        if llm is not None:
            rows["llm"] = on_test("llm", settings=llm, planner=planner)
        for name in (*BASELINES, *selection):
            rows[name] = on_test(name, settings=best if behind_lifecycle(name) else None)
            say(f"{dataset} {name}: {_figures(rows[name])}")
        matched = match_baselines(dev, best, scored, max_cuts, seed, counter, cache, tick)
        if not prefilled:
            grow(len(matched) * len(test))
        for baseline, m in matched.items():
            name = matched_name(baseline)
            rows[name] = on_test("heuristic", settings=m["settings"])
            say(f"{dataset} {name} {m['settings']}: {_figures(rows[name])}")
        boundary = "auto"  # the harness's default, as the cuts
        costs: dict[str, Any] = {}
        seconds = 0.0
        for run in cost_runs(best, thresholds, llm):
            label, name = run[0], run[1]
            total_cost, commits = 0.0, 0
            for s in test:
                c, k, t = session_cost(s, run, boundary, cached_price, counter, cache, planner)
                total_cost, commits, seconds = total_cost + c, commits + k, seconds + t
                tick()
            costs[label] = total_cost
            if name != "none":
                costs[f"{label}:commits"] = commits
        base = costs["none"]
        report["datasets"][dataset] = {
            "sessions_dev": len(dev),
            "sessions_test": len(test),
            "heuristic_settings": best,
            "dev_grid": [
                {"settings": st, "strict": r["strict_no_impact"], "pruning": r["pruning_mean"]}
                for _, st, r in scored
            ],
            "matched": matched,
            "policies": rows,
            "cost": {k: (round(v, 1) if ":" not in k else v) for k, v in costs.items()},
            "cost_vs_none": {
                k: round(1 - v / base, 4)
                for k, v in costs.items()
                if ":" not in k and k != "none" and base
            },
            "cost_seconds": round(seconds, 1),
        }
        say(f"{dataset} cost vs none: {report['datasets'][dataset]['cost_vs_none']}")
    if shown is not None:
        shown.close()
    report["cost_total"], report["targets"] = totals_and_targets(report["datasets"])
    return report
