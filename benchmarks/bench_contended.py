"""Selection time on a busy machine: ``solve(problem, "pacms")`` idle and beside BLAS hogs.

The instance is :func:`bench_core.make_problem` (clustered unit vectors, log-normal token costs,
budget 45% of the pool's tokens). The script times the selection alone, then starts
``--hogs`` child processes that each multiply float32 matrices in a loop with BLAS's default
threads (the kind of neighbour an agent server has: tests, another evaluation) and times the
selection again. It does both with BLAS limited to each of ``--blas-threads`` for the
selection's own products (``blas_threads`` of :mod:`langchain_pacms.blas`; ``0`` leaves
numpy's default) and prints the medians and the contended/idle ratio (issue 23's target: <= 3).
The hogs are this script's children and are stopped when it ends.

Usage::

    python benchmarks/bench_contended.py                     # n=2000, d=384, 2 hogs
    python benchmarks/bench_contended.py --n 10000 --repeats 3 --blas-threads 1 0
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import fresh, make_problem, script_parser

from langchain_pacms.blas import blas_setup, blas_threads
from langchain_pacms.core import Problem, solve


def hog(size: int) -> None:
    """Multiply two float32 matrices forever (a BLAS-heavy neighbour)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(np.float32)
    while True:
        a = a @ a.T
        a /= np.float32(np.abs(a).max() or 1.0)


def median_seconds(problem: Problem, repeats: int, threads: int) -> float:
    """Median wall time of one selection (after one warm call), BLAS at ``threads`` (0: default)."""
    limit = threads or None
    with blas_threads(limit):
        solve(fresh(problem), "pacms")
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            solve(fresh(problem), "pacms")
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__, n=2000, d=384, repeats=5, hogs=2, hog_size=1000)
    parser.add_argument(
        "--blas-threads",
        type=int,
        nargs="+",
        default=[1, 0],
        help="BLAS threads for the selection (0: numpy's default)",
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeats < 1 or args.hogs < 0 or min(args.blas_threads) < 0:
        parser.error("--n and --repeats must be >= 1, --hogs and --blas-threads >= 0")
    problem = make_problem(args.n, args.d, 0)
    print(
        f"# n={args.n} d={args.d} budget 45%, BLAS {blas_setup()}, {args.hogs} hogs "
        f"of {args.hog_size}x{args.hog_size} float32 products",
        flush=True,
    )
    idle = {t: median_seconds(problem, args.repeats, t) for t in args.blas_threads}
    hogs = [mp.Process(target=hog, args=(args.hog_size,), daemon=True) for _ in range(args.hogs)]
    for process in hogs:
        process.start()
    try:
        time.sleep(1.0)  # let the hogs reach their loop
        busy = {t: median_seconds(problem, args.repeats, t) for t in args.blas_threads}
    finally:
        for process in hogs:
            process.terminate()
            process.join()
    print("| BLAS threads | idle ms | contended ms | contended / idle |")
    print("|---|---:|---:|---:|")
    for t in args.blas_threads:
        print(
            f"| {t or 'default'} | {idle[t] * 1e3:.1f} | {busy[t] * 1e3:.1f} | "
            f"{busy[t] / idle[t]:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
