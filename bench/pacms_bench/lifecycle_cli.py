"""``pacms-bench lifecycle``: replay the lifecycle policies on recorded agent runs."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from pacms_bench._options import add_result_cache

__all__ = ["add_lifecycle_parser"]


def _thresholds(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError("thresholds must be numbers within [0, 1]")
    return values


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its finished worker processes."""
    used = os.times()
    return used.user + used.system + used.children_user + used.children_system


def _default_jobs() -> int:
    """The CPU count up to 4 where worker processes can be forked (they are), else 1."""
    import multiprocessing

    forks = "fork" in multiprocessing.get_all_start_methods()
    return min(os.cpu_count() or 1, 4) if forks else 1


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be a whole number >= 1, got {text!r}")
    return value


def _llm_planner(spec: str, ollama_url: str | None) -> Any:
    """An ``LLMPlanner`` on the chat model ``spec``, once it answered a probe (else ``None``)."""
    from langchain_pacms.lifecycle import LLMPlanner
    from pacms_bench.backends import chat_model_from_spec

    try:
        model = chat_model_from_spec(spec, ollama_url=ollama_url, temperature=0)
        model.invoke("Reply with OK.")
    except Exception as err:  # any failure of the model means no LLM rows, said clearly
        print(
            f"--planner {spec}: the chat model is not reachable ({type(err).__name__}: {err})",
            file=sys.stderr,
        )
        return None
    return LLMPlanner(model, name=f"llm:{spec}")


def _run(args: argparse.Namespace) -> int:
    from pacms_bench.lifecycle_replay import run_lifecycle_eval
    from pacms_bench.lifecycle_report import write_report
    from pacms_bench.replay_cache import ReplayCache
    from pacms_bench.replay_policies import SELECTION
    from pacms_bench.traces import load_traces

    say = (
        (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    )
    cache = ReplayCache.create(args.cache_dir) if args.result_cache == "on" else None
    if cache is not None and args.prune_result_cache:
        say(f"result cache: removed {cache.prune()} cells of other code versions")

    start = time.perf_counter()
    sessions, problems = load_traces(args.data, args.datasets)
    if args.sessions:
        sessions = [s for s in sessions if s.name in set(args.sessions)]
    for where, reason in problems:
        print(f"not read: {where}: {reason}", file=sys.stderr)
    if not sessions:
        print("no sessions could be read (see --data)", file=sys.stderr)
        return 1
    say(f"{len(sessions)} sessions, {len(problems)} not read")
    planner = None
    if args.planner:
        planner = _llm_planner(args.planner, args.ollama_url)
        if planner is None:
            return 2
    load = os.getloadavg()
    cpu = _cpu_seconds()
    try:
        report = run_lifecycle_eval(
            sessions,
            max_cuts=args.max_cuts,
            seed=args.seed,
            thresholds=args.thresholds,
            cached_price=args.cached_price,
            selection=SELECTION if args.selection else (),
            progress=say,
            cache=cache,
            bar=not args.quiet,
            planner=planner,
            planner_spec=args.planner or "",
            jobs=args.jobs,
        )
    except KeyboardInterrupt:
        kept = (
            f"the sessions finished so far are kept in {args.cache_dir}: the same command resumes"
            if cache is not None
            else "nothing was kept (--result-cache off)"
        )
        print(f"interrupted; {kept}", file=sys.stderr)
        return 130
    report["unread"] = problems
    report["seconds"] = round(time.perf_counter() - start, 1)
    report["cpu_seconds"] = round(_cpu_seconds() - cpu, 1)
    report["load_average"] = {
        "start": [round(x, 2) for x in load],
        "end": [round(x, 2) for x in os.getloadavg()],
    }
    report["result_cache"] = None if cache is None else str(cache.folder)
    for path in write_report(report, args.out):
        print(path)
    say(f"done in {report['seconds']} s ({report['cpu_seconds']} s CPU)")
    return 0


def add_lifecycle_parser(benches: Any) -> None:
    """Add ``lifecycle`` under ``pacms-bench``."""
    from pacms_bench.traces import DATASETS, default_traces_dir

    p = benches.add_parser(
        "lifecycle",
        help="replay lifecycle policies on recorded agent runs (pruning, no-impact, cost)",
        description="Cut recorded tool-calling runs after tool outputs, let each policy manage "
        "the prefix, judge whether the exact strings the rest of the run needs stay visible "
        "(or recoverable), and replay whole sessions for the cache-adjusted input cost.",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=default_traces_dir(),
        help="the agent-traces folder (default: %(default)s)",
    )
    p.add_argument("--datasets", nargs="+", choices=sorted(DATASETS), default=sorted(DATASETS))
    p.add_argument("--max-cuts", type=int, default=8, help="cuts per session (default: 8)")
    p.add_argument("--seed", type=int, default=0, help="cut offsets and dev split (default: 0)")
    p.add_argument(
        "--thresholds",
        type=_thresholds,
        default=[0.0, 0.1, 0.3, 0.5],
        help="commit thresholds of the cost replay (default: 0,0.1,0.3,0.5)",
    )
    p.add_argument(
        "--cached-price",
        type=float,
        default=0.1,
        help="price of an unchanged prefix token, the rest costs 1 (default: 0.1)",
    )
    p.add_argument(
        "--selection",
        action="store_true",
        help="also replay per-call selection (pacms, topk, mmr, lastk keeping 50%%, 30%% "
        "and 70%% of the prefix, as the hook selects with its defaults), "
        "without and with fold stubs for dropped tool spans, and behind the "
        "heuristic planner (life+select rows)",
    )
    p.add_argument(
        "--planner",
        metavar="SPEC",
        help="also replay the LLM planner on this chat model (ollama:<model>, "
        "<provider>:<model>, python:<module>:<factory>); the model is probed first",
    )
    p.add_argument(
        "--ollama-url",
        default=None,
        help="Ollama server for ollama: specs (default: $OLLAMA_HOST or Ollama's own)",
    )
    p.add_argument(
        "--sessions",
        nargs="+",
        metavar="NAME",
        help="only these sessions (names as in the JSON report), e.g. to tune quickly",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(".pacms-cache"),
        metavar="DIR",
        help="result cache folder, shared with the recall sweep (default: %(default)s)",
    )
    add_result_cache(
        p,
        "keep every session's cells in --cache-dir and reuse them: an "
        "interrupted run resumes, a rerun of unchanged code reads them back "
        "(default: on)",
        "before the run, delete the cells of other code versions",
    )
    p.add_argument(
        "--jobs",
        type=_jobs,
        default=_default_jobs(),
        metavar="N",
        help="worker processes that compute the cells (with the result cache and no "
        "--planner; default: the CPU count, at most 4, where processes can fork, "
        "else 1)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar or status lines")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("docs/results/lifecycle"),
        help="output folder for lifecycle.json/.md/.png (default: %(default)s)",
    )
    p.set_defaults(func=_run)
