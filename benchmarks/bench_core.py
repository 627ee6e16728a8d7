"""Speed and memory of the numeric core (`core.solve`) on cached embeddings.

Embedding time is excluded: each instance is a prebuilt :class:`~langchain_pacms.core.Problem`
(random unit vectors with cluster structure, token costs drawn log-normally and clipped to
20-600, budget 45% of the pool's tokens or each share ``--budgets`` gives, no mandatory
items). For every size and dimension it prints, per strategy, the median wall time of
``solve(problem, name)`` over several repeats
(and the median process CPU time, which other processes on the machine inflate less),
the peak memory traced by ``tracemalloc`` during one extra call (numpy buffers included; the
timed calls run without tracing), and two ratios measured in the same run:

* ``vs LC MMR``: how many times faster than LangChain's ``maximal_marginal_relevance`` with
  ``k = n`` walked under the same budget (the reference the ``mmr`` strategy reproduces). Its
  cost grows as ``n^3``; a size is skipped when the time extrapolated from the largest size
  measured so far exceeds ``--langchain-max-seconds``.
* ``x E@E.T``: time relative to one float32 ``E @ E.T`` product, the floor for any method that
  looks at all pairwise similarities. The product is timed right after every timed call of the
  strategy and the ratio is of the two medians, so it holds while the machine's load drifts;
  the ``E @ E.T`` row shows the product timed on its own before the strategies.

Usage::

    python benchmarks/bench_core.py            # n in 100, 500, 2000, 10000; d in 384, 768
    python benchmarks/bench_core.py --quick    # n in 100, 500, 2000; d = 384; fewer repeats
    python benchmarks/bench_core.py --blas-threads 1   # single-threaded BLAS
    python benchmarks/bench_core.py --plot time.png --plot-only a.json b.json  # redraw
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from langchain_pacms.core import Problem, solve

STRATEGIES = ["pacms", "topk", "lastk", "mmr", "rag"]
TARGETS = {  # n -> (max ms for pacms)
    500: 10.0,
    2000: 60.0,
    10000: 2000.0,
}


def script_parser(doc: str, **counts: int) -> argparse.ArgumentParser:
    """A benchmark script's parser, described by ``doc``'s first line, with an integer option
    ``--name`` per item of ``counts`` (``_`` written ``-``), defaulting to its value."""
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    for name, default in counts.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    return parser


# ----------------------------------------------------------------------------------------------
# instances
# ----------------------------------------------------------------------------------------------


def make_problem(n: int, d: int, seed: int) -> Problem:
    """Clustered unit vectors, a query near one cluster, log-normal token costs."""
    rng = np.random.default_rng(seed)
    clusters = max(8, n // 40)
    centers = rng.standard_normal((clusters, d)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    members = rng.integers(0, clusters, n)
    spread = rng.uniform(0.6, 1.2, n).astype(np.float32)[:, None] / np.sqrt(d)
    vectors = centers[members] + spread * rng.standard_normal((n, d)).astype(np.float32)
    query = centers[0] + rng.standard_normal(d).astype(np.float32) / np.sqrt(d)
    tokens = np.clip(rng.lognormal(np.log(120), 0.8, n), 20, 600).astype(np.int64)
    budget = int(0.45 * int(tokens.sum()))
    return Problem.build(vectors, query, tokens=tokens, budget=budget)


def fresh(problem: Problem) -> Problem:
    """The same arrays without the cached relevance, so every timed call pays for it."""
    return dataclasses.replace(problem)  # init fields only: no cached or shared results


# ----------------------------------------------------------------------------------------------
# measuring
# ----------------------------------------------------------------------------------------------


def timed(
    fn: Callable[[], Any],
    repeats: int,
    slow_seconds: float,
    reference: Callable[[], Any] | None = None,
) -> tuple[float, float, int, Any, float | None]:
    """Median wall and process-CPU seconds of ``fn``, number of timed calls, its result, and
    the median wall seconds of ``reference`` timed right after each call of ``fn``.

    One warm-up call first; at most 2 timed calls when a call is slower than ``slow_seconds``.
    CPU time counts every thread of the process (BLAS threads included). Timing the reference
    in turn with ``fn`` makes their ratio hold when the machine's load drifts during a run.
    """
    result = fn()  # warm-up (also the answer we check)
    walls: list[float] = []
    cpus: list[float] = []
    refs: list[float] = []
    for _ in range(repeats):
        gc.collect()
        cpu = time.process_time()
        start = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        if reference is not None:
            start = time.perf_counter()
            reference()
            refs.append(time.perf_counter() - start)
        if walls[-1] > slow_seconds and len(walls) >= 2:
            break
    paired = statistics.median(refs) if refs else None
    return statistics.median(walls), statistics.median(cpus), len(walls), result, paired


def traced_peak(fn: Callable[[], Any]) -> float:
    """Peak bytes allocated during one call, as seen by tracemalloc (MiB)."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (peak - base) / 2**20


def langchain_mmr_walk(problem: Problem, lambda_mult: float = 0.5) -> list[int]:
    """LangChain's MMR ranking (k = n) walked under the budget, as the `mmr` strategy does."""
    from langchain_core.vectorstores.utils import maximal_marginal_relevance

    ranking = maximal_marginal_relevance(
        problem.query, problem.vectors, lambda_mult=lambda_mult, k=problem.n
    )
    left = problem.budget
    kept = []
    for j in ranking:
        cost = int(problem.tokens[j])
        if cost <= left:
            kept.append(int(j))
            left -= cost
    return kept


# ----------------------------------------------------------------------------------------------
# reporting
# ----------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "nproc": os.cpu_count(),
        "cpu": "unknown",
        "env": {
            k: os.environ[k]
            for k in (
                "OPENBLAS_CORETYPE",
                "OPENBLAS_L2_SIZE",
                "OMP_NUM_THREADS",
                "OPENBLAS_NUM_THREADS",
            )
            if k in os.environ
        },
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["blas"] = [
        {k: p.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
        for p in threadpool_info()
    ]
    info["loadavg"] = loadavg()
    return info


def loadavg() -> tuple[float, float, float] | None:
    """1/5/15-minute load averages (other processes compete for the same cores)."""
    try:
        return os.getloadavg()
    except OSError:
        return None


def fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 1000 else f"{ms:,.0f}"


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.0f}"


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    info = machine()
    print(f"# machine: {json.dumps(info)}", flush=True)
    results: list[dict[str, Any]] = []
    langchain_seen: dict[int, tuple[int, float]] = {}  # d -> (largest n measured, seconds)
    for d in args.dims:
        for n in args.sizes:
            problem = make_problem(n, d, args.seed + n + d)
            repeats = args.repeats if n < 10000 else max(1, args.repeats // 3)
            print(
                f"\n## n={n} d={d} budget={problem.budget} of {int(problem.tokens.sum())} "
                f"tokens, {repeats} repeats, load average {loadavg()}",
                flush=True,
            )
            e = problem.vectors
            floor, floor_cpu, _, _, _ = timed(lambda e=e: e @ e.T, repeats, args.slow_seconds)
            floor_peak = traced_peak(lambda e=e: e @ e.T)

            lc_time: float | None = None
            lc_note = ""
            lc_kept: list[int] | None = None
            estimate = None
            if d in langchain_seen:
                n0, t0 = langchain_seen[d]
                estimate = t0 * (n / n0) ** 3
            if n > args.langchain_max_n:
                lc_note = f"skipped (n > --langchain-max-n {args.langchain_max_n})"
            elif estimate is not None and estimate > args.langchain_max_seconds:
                lc_note = (
                    f"skipped: ~{estimate:,.0f} s estimated from n={langchain_seen[d][0]} "
                    f"(limit {args.langchain_max_seconds:.0f} s)"
                )
            else:
                start = time.perf_counter()
                lc_kept = langchain_mmr_walk(problem)
                lc_time = time.perf_counter() - start
                langchain_seen[d] = (n, lc_time)
                lc_note = "1 run" if lc_time > 5 else ""
                if lc_time <= 5:
                    lc_time, _, _, _, _ = timed(
                        lambda p=problem: langchain_mmr_walk(p), min(3, repeats), 5.0
                    )
            row_base = {
                "n": n,
                "d": d,
                "budget": problem.budget,
                "loadavg": loadavg(),
                "matmul_s": floor,
                "matmul_cpu_s": floor_cpu,
                "matmul_peak_mib": floor_peak,
                "langchain_mmr_s": lc_time,
                "langchain_note": lc_note,
            }
            total = int(problem.tokens.sum())
            for name, share in [(s, b) for b in args.budgets for s in args.strategies]:
                budgeted = problem.with_budget(max(1, int(share * total)))
                seconds, cpu, count, pick, paired = timed(
                    lambda p=budgeted, s=name: solve(fresh(p), s),
                    repeats,
                    args.slow_seconds,
                    reference=lambda e=e: e @ e.T,
                )
                peak = traced_peak(lambda p=budgeted, s=name: solve(fresh(p), s))
                same = None
                at_lc_budget = budgeted.budget == problem.budget  # LC MMR walks the 45% budget
                if name == "mmr" and lc_kept is not None and at_lc_budget:
                    same = pick.order.tolist() == lc_kept
                row = {
                    **row_base,
                    "strategy": name,
                    "budget": budgeted.budget,
                    "budget_share": share,
                    "median_s": seconds,
                    "cpu_s": cpu,
                    "runs": count,
                    "peak_mib": peak,
                    "kept": int(pick.order.size),
                    "tokens_kept": int(problem.tokens[pick.order].sum()),
                    "matmul_paired_s": paired,
                    "x_matmul": seconds / paired if paired else None,
                    "langchain_speedup": lc_time / seconds if lc_time and at_lc_budget else None,
                    "same_picks_as_langchain": same,
                }
                results.append(row)
                print(
                    f"{name:>6} @{share:4.0%}: {fmt_ms(seconds):>9} ms "
                    f"(x{count}, cpu {fmt_ms(cpu)} ms)  "
                    f"peak {peak:8.1f} MiB  "
                    f"x E@E.T {fmt_ratio(row['x_matmul']):>6}  "
                    f"vs LC MMR {fmt_ratio(row['langchain_speedup']):>6}x faster"
                    + ("" if same is None else f"  same picks as LC MMR: {same}"),
                    flush=True,
                )
            print(
                f"E@E.T : {fmt_ms(floor):>9} ms (cpu {fmt_ms(floor_cpu)} ms)  "
                f"peak {floor_peak:8.1f} MiB",
                flush=True,
            )
            print(f"LC MMR: {fmt_ms(lc_time):>9} ms  {lc_note}", flush=True)
    return {"machine": info, "args": vars(args), "results": results}


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "| n | d | strategy | budget | median ms | cpu ms | peak MiB | x E@E.T "
        "| LC MMR / strategy |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    last: tuple[int, int] | None = None
    rows = report["results"]
    for i, row in enumerate(rows):
        lines.append(
            f"| {row['n']} | {row['d']} | {row['strategy']} | {row['budget_share']:.0%} | "
            f"{fmt_ms(row['median_s'])} | "
            f"{fmt_ms(row['cpu_s'])} | {row['peak_mib']:.1f} | {fmt_ratio(row['x_matmul'])} | "
            f"{fmt_ratio(row['langchain_speedup'])} |"
        )
        last = (row["n"], row["d"])
        end = i + 1 == len(rows) or (rows[i + 1]["n"], rows[i + 1]["d"]) != last
        if end:
            lines.append(
                f"| {row['n']} | {row['d']} | *E @ E.T (float32)* | | {fmt_ms(row['matmul_s'])} | "
                f"{fmt_ms(row['matmul_cpu_s'])} | {row['matmul_peak_mib']:.1f} | 1 | |"
            )
            note = row["langchain_note"]
            lines.append(
                f"| {row['n']} | {row['d']} | *LangChain MMR, k=n* | 45% | "
                f"{fmt_ms(row['langchain_mmr_s'])} | | | | {note} |"
            )
    return "\n".join(lines)


def plot(reports: list[dict[str, Any]], path: str) -> None:
    """Draw median CPU time against n for each strategy and budget, and the ``E @ E.T`` floor.

    Process CPU time, which other processes on a shared machine inflate less than wall time.
    ``reports`` are one or more JSON reports of this script (``--json``); their rows are drawn
    together, one line per (strategy, budget, d), and the floor as the first report that
    measured it at each n. Needs matplotlib.

    Raises:
        ImportError: Without matplotlib (``pip install -e ./bench`` brings it).
    """
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(
            "--plot needs matplotlib: pip install -e ./bench (or pip install matplotlib)"
        ) from err

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, dict[int, float]] = {}
    for report in reports:
        for row in report["results"]:
            label = f"{row['strategy']} {row['budget_share']:.0%} d={row['d']}"
            lines.setdefault(label, {})[row["n"]] = row["cpu_s"]
            floor = lines.setdefault(f"E @ E.T d={row['d']}", {})
            floor.setdefault(row["n"], row["matmul_cpu_s"])  # the first report's floor
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in sorted(lines.items()):
        sizes = sorted(points)
        floor = label.startswith("E @ E.T")
        ax.plot(
            sizes,
            [points[n] for n in sizes],
            "k--" if floor else "-o",
            label=label,
            markersize=3,
            linewidth=2 if floor else 1,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("candidates n")
    ax.set_ylabel("median process CPU seconds per selection")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def check_targets(report: dict[str, Any]) -> list[str]:
    out = []
    for row in report["results"]:
        if row["strategy"] != "pacms":
            continue
        n, ms = row["n"], row["median_s"] * 1e3
        if n in TARGETS:
            ok = ms <= TARGETS[n]
            out.append(
                f"n={n} d={row['d']}: pacms {ms:.1f} ms <= {TARGETS[n]:.0f} ms: "
                f"{'met' if ok else 'MISSED'}"
            )
        if n == 10000:
            ok = row["peak_mib"] <= 1.5 * 1024
            out.append(
                f"n={n} d={row['d']}: peak {row['peak_mib']:.0f} MiB <= 1536 MiB: "
                f"{'met' if ok else 'MISSED'}"
            )
        if n >= 2000:  # issue 23: within 2x of one E @ E.T at every size and budget
            x = row["x_matmul"]
            out.append(
                f"n={n} d={row['d']} budget {row['budget_share']:.0%}: pacms {x:.2f} "
                f"x E@E.T <= 2: {'met' if x <= 2 else 'MISSED'}"
            )
            s = row["langchain_speedup"]
            if s is not None:
                out.append(
                    f"n={n} d={row['d']}: pacms {s:.0f}x faster than LC MMR >= 20x: "
                    f"{'met' if s >= 20 else 'MISSED'}"
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--quick", action="store_true", help="n in 100, 500, 2000 and d = 384 only, 3 repeats"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--dims", type=int, nargs="+", default=None)
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES)
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed calls per measurement (default 9; 3 with --quick; a third of it at n >= 10000)",
    )
    parser.add_argument(
        "--slow-seconds",
        type=float,
        default=2.0,
        help="stop repeating after 2 calls slower than this",
    )
    parser.add_argument(
        "--langchain-max-seconds",
        type=float,
        default=900.0,
        help="skip LangChain MMR where its extrapolated time exceeds this",
    )
    parser.add_argument(
        "--langchain-max-n",
        type=int,
        default=None,
        help="never run LangChain MMR above this n (default: no limit; 500 with --quick)",
    )
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        help="limit BLAS threads; default: numpy's own",
    )
    parser.add_argument(
        "--budgets",
        type=float,
        nargs="+",
        default=[0.45],
        help="budgets as shares of the pool's tokens (LangChain MMR: 45%%)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the full report here")
    parser.add_argument(
        "--plot", default=None, help="also draw CPU time against n (PNG; needs matplotlib) here"
    )
    parser.add_argument(
        "--plot-only",
        nargs="+",
        default=None,
        metavar="JSON",
        help="draw --plot from these earlier --json reports and stop",
    )
    args = parser.parse_args(argv)
    if args.plot_only:
        if not args.plot:
            parser.error("--plot-only needs --plot")
        reports = []
        for name in args.plot_only:
            with open(name, encoding="utf-8") as fh:
                reports.append(json.load(fh))
        plot(reports, args.plot)
        return 0
    if not all(0.0 < b <= 1.0 for b in args.budgets):
        parser.error("--budgets: every share must be in (0, 1]")
    args.sizes = args.sizes or ([100, 500, 2000] if args.quick else [100, 500, 2000, 10000])
    args.dims = args.dims or ([384] if args.quick else [384, 768])
    args.repeats = args.repeats or (3 if args.quick else 9)
    if args.langchain_max_n is None:
        args.langchain_max_n = 500 if args.quick else sys.maxsize
    if args.blas_threads is not None:
        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            report = run(args)
    else:
        report = run(args)
    print("\n" + markdown(report))
    print("\nTargets:")
    for line in check_targets(report):
        print(f"- {line}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, default=str)
    if args.plot:
        plot([report], args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
