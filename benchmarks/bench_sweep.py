"""Speed of a budget sweep: one problem solved at several budgets, linked or built afresh.

An evaluation (and a budget slider) solves the same candidates at several budgets. The
``pacms`` coverage kernel does not depend on the budget, and problems linked by
:meth:`~langchain_pacms.core.Problem.with_budget` build it once. For each size and dimension
this prints, per strategy, the median time of solving every budget

* ``afresh``: a new problem per budget (every solve builds its kernel), and
* ``linked``: one problem and its ``with_budget`` siblings,

their ratio, and ``linked`` relative to one float32 ``E @ E.T`` product measured in the same
run (the floor for anything that looks at all pairwise similarities). It checks that both ways
keep the same items at every budget. Instances are those of ``bench_core.py``.

Usage::

    python benchmarks/bench_sweep.py                      # n in 500, 2000; d in 384, 768, 4096
    python benchmarks/bench_sweep.py --sizes 2000 --dims 4096 --blas-threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from bench_core import fresh, machine, make_problem, timed
from threadpoolctl import threadpool_limits

from langchain_pacms.core import Problem, solve

BUDGETS = [0.05, 0.1, 0.2, 0.45, 0.7]
"""Budget fractions of the recall study."""


def sweep(problem: Problem, strategy: str, budgets: list[int], *, linked: bool) -> list[list[int]]:
    """Solve ``problem`` at every budget; return the kept indices per budget."""
    if linked:
        base = fresh(problem)
        return [solve(base.with_budget(b), strategy).order.tolist() for b in budgets]
    return [
        solve(dataclasses.replace(fresh(problem), budget=b), strategy).order.tolist()
        for b in budgets
    ]


def measure(n: int, d: int, strategies: list[str], repeats: int) -> list[dict[str, Any]]:
    """Time every strategy's sweep on one instance, both ways, and check they agree."""
    problem = make_problem(n, d, seed=0)
    total = int(problem.tokens.sum())
    budgets = [max(1, int(f * total)) for f in BUDGETS]
    vectors = problem.vectors
    floor, _, _, _, _ = timed(lambda: vectors @ vectors.T, repeats, 5.0)
    rows = []
    for strategy in strategies:
        times = {}
        kept = {}
        for linked in (False, True):
            times[linked], _, _, kept[linked], _ = timed(
                lambda s=strategy, k=linked: sweep(problem, s, budgets, linked=k), repeats, 5.0
            )
        if kept[False] != kept[True]:
            raise SystemExit(f"{strategy} n={n} d={d}: linked picks differ from afresh")
        rows.append(
            {
                "n": n,
                "d": d,
                "strategy": strategy,
                "afresh_ms": times[False] * 1e3,
                "linked_ms": times[True] * 1e3,
                "speedup": times[False] / times[True],
                "x_gram": times[True] / floor,
            }
        )
    return rows


def run(args: argparse.Namespace) -> None:
    """Measure every (n, d, strategy); print a markdown table as it goes."""
    print("| n | d | strategy | afresh ms | linked ms | afresh / linked | linked / E@E.T |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for n in args.sizes:
        for d in args.dims:
            for row in measure(n, d, args.strategies, args.repeats):
                print(
                    f"| {n} | {d} | {row['strategy']} | {row['afresh_ms']:,.1f} | "
                    f"{row['linked_ms']:,.1f} | {row['speedup']:.2f} | {row['x_gram']:.2f} |",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 768, 4096])
    parser.add_argument("--strategies", nargs="+", default=["pacms", "pacms_paper"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--blas-threads", type=int, default=None, help="cap BLAS threads")
    args = parser.parse_args(argv)
    info = machine()
    print(
        f"machine: {info['cpu']}, {info['nproc']} cores, numpy {info['numpy']}, "
        f"python {info['python']}, load {info['loadavg']}; BLAS {info['blas']}; "
        f"budgets {BUDGETS} of the pool's tokens"
    )
    if args.blas_threads is not None:
        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            run(args)
    else:
        run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
