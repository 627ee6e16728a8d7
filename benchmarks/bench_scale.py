"""Peak memory and time of ``pacms`` on large pools, each selection in a fresh child process.

The instance is :func:`bench_core.make_problem` (clustered unit vectors, log-normal token costs)
at each ``--sizes`` and ``--budgets`` share. Every selection runs in its own child process
(``spawn``), so its peak resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is
its own: the interpreter, numpy, the instance and the selection together. The child also
reports its resident size right after building the instance, so the selection's own share
shows. BLAS runs with one thread (:func:`langchain_pacms.blas.blas_threads`). The floor,
one float32 ``E @ E.T``, does not fit in memory at these sizes: the child times a block of its
rows (256 MiB) after the peak was read and scales its CPU time to all rows. CPU times are
reported beside wall times because the machine may be shared. Issue 23's target: n = 50,000
at d = 384 within 2 GB peak RSS.

Usage::

    python benchmarks/bench_scale.py                          # n = 50,000, budgets 10% and 45%
    python benchmarks/bench_scale.py --sizes 20000 50000 --budgets 0.05 0.1 0.45 0.7
    python benchmarks/bench_scale.py --ceiling-mib 16         # a smaller similarity ceiling
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _rss_mib() -> float:
    """Resident set size now, from ``/proc/self/statm`` (MiB)."""
    with open("/proc/self/statm", encoding="utf-8") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def one_selection(n: int, d: int, share: float, ceiling: int, out: Any) -> None:
    """Build the instance, select once, and send back time, CPU and memory (child process)."""
    import dataclasses

    from bench_core import make_problem

    from langchain_pacms.blas import blas_threads
    from langchain_pacms.core import solve

    problem = make_problem(n, d, n + d)
    problem = dataclasses.replace(
        problem.with_budget(max(1, int(share * int(problem.tokens.sum())))),
        similarity_ceiling=ceiling,
    )
    built = _rss_mib()
    with blas_threads(1):
        cpu = time.process_time()
        start = time.perf_counter()
        pick = solve(problem, "pacms")
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    # The floor, E @ E.T, would need 4 n^2 bytes (10 GB at n = 50,000): time a block of
    # rows of it instead (after the peak was read) and scale to all n rows.
    rows = max(1, min(n, 2**28 // (4 * n)))
    with blas_threads(1):
        vectors = problem.vectors
        cpu_floor = time.process_time()
        vectors[:rows] @ vectors.T
        cpu_floor = (time.process_time() - cpu_floor) * n / rows
    out.send(
        {
            "wall": wall,
            "cpu": cpu,
            "peak_mib": peak,
            "built_mib": built,
            "kept": int(pick.order.size),
            "filled": (pick.info or {}).get("filled"),
            "floor_cpu": cpu_floor,
        }
    )


def measure(n: int, d: int, share: float, ceiling: int) -> dict[str, Any]:
    """:func:`one_selection` in a fresh ``spawn`` child."""
    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=one_selection, args=(n, d, share, ceiling, send))
    child.start()
    result: dict[str, Any] = receive.recv()
    child.join()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000])
    parser.add_argument("--d", type=int, default=384)
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.1, 0.45])
    parser.add_argument(
        "--ceiling-mib",
        type=float,
        default=64.0,
        help="Problem.similarity_ceiling in MiB (default 64, the library's)",
    )
    args = parser.parse_args(argv)
    if min(args.sizes) < 1 or not all(0.0 < b <= 1.0 for b in args.budgets):
        parser.error("--sizes must be >= 1 and --budgets in (0, 1]")
    ceiling = max(1, int(args.ceiling_mib * 2**20))
    print(
        f"# d={args.d}, similarity ceiling {args.ceiling_mib:g} MiB, 1 BLAS thread, "
        f"load average {os.getloadavg()}",
        flush=True,
    )
    print(
        "| n | budget | wall s | cpu s | `E @ E.T` cpu s (est.) | cpu / floor | peak RSS MiB "
        "| RSS after build MiB | kept | filled | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in args.sizes:
        for share in args.budgets:
            r = measure(n, args.d, share, ceiling)
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(
                f"| {n:,} | {share:.0%} | {r['wall']:.2f} | {r['cpu']:.2f} | "
                f"{r['floor_cpu']:.2f} | {r['cpu'] / r['floor_cpu']:.2f} | "
                f"{r['peak_mib']:.0f} | {r['built_mib']:.0f} | {r['kept']:,} | "
                f"{r['filled']:,} | {load} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
