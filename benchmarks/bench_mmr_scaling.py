"""Time of ``mmr`` against ``topk`` as the pool grows, through ``ContextSelector``.

``mmr`` ranks the pool by maximal marginal relevance and walks the ranking under the budget. It
ranks only until no candidate left to rank could fit, so its time follows ``topk``'s as ``n``
grows when the budget fills up early (an earlier version ranked every candidate, and past
12,000 candidates each step multiplied the whole pool by one vector). The walk goes deep when
the budget's last few tokens still fit some short candidate that ranks late: ``ranked`` shows
how far it went.

For each ``--sizes`` it builds a pool of seeded synthetic texts (words drawn from a Zipf
vocabulary, log-normal lengths), warms a fresh selector with the built-in embedder on it, then
times ``select`` with ``topk`` and with ``mmr`` (``--repeats`` calls each, in turn, median wall
and process-CPU seconds: the machine may be shared) and, on the prepared problem, ``solve``
alone on fresh copies. It prints one row per size: the ``select`` times and their ratio, the
``solve`` times, how many items ``mmr`` ranked and how many it kept. ``--check`` also ranks
every candidate and walks that whole ranking under the budget, and fails when the picks differ.

Usage::

    python benchmarks/bench_mmr_scaling.py                        # n = 5k, 12k, 12,001, 20k
    python benchmarks/bench_mmr_scaling.py --sizes 2000 5000 --budget-tokens 4000 --check
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from langchain_pacms import ContextSelector
from langchain_pacms.blas import blas_threads
from langchain_pacms.core import Problem, mmr_ranking, solve

QUERY = "w5 w17 w230 w999 w3000"


def make_texts(n: int, seed: int) -> list[str]:
    """``n`` distinct texts of Zipf-distributed words (3-400 words, median 60)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    weights = 1.0 / np.arange(1, vocab.size + 1) ** 1.1
    weights /= weights.sum()
    lengths = np.clip(rng.lognormal(np.log(60), 0.7, n), 3, 400).astype(int)
    return [
        " ".join(rng.choice(vocab, size=k, p=weights)) + f" n{i}" for i, k in enumerate(lengths)
    ]


def timed(fns: list[Callable[[], Any]], repeats: int) -> list[tuple[float, float]]:
    """Median wall and process-CPU seconds of each of ``fns``, called in turn ``repeats`` times."""
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, wall, cpu in zip(fns, walls, cpus):
            started_cpu, started = time.process_time(), time.perf_counter()
            fn()
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus)]


def reference_picks(problem: Problem, lambda_mult: float) -> list[int]:
    """The whole MMR ranking walked under the budget, skipping what does not fit."""
    ranking, _ = mmr_ranking(problem.vectors, problem.query, lambda_mult, relevance=problem.scores)
    kept = np.flatnonzero(problem.mandatory).tolist()
    left = problem.budget - int(problem.tokens[kept].sum())
    for j in ranking.tolist():
        if not problem.mandatory[j] and problem.tokens[j] <= left:
            kept.append(j)
            left -= int(problem.tokens[j])
    return kept


def measure(n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Time ``topk`` and ``mmr`` on one pool of ``n`` texts (and check ``mmr``'s picks)."""
    texts = make_texts(n, args.seed + n)
    selector = ContextSelector()
    budget = args.budget_tokens

    def select(strategy: str) -> Any:
        options = {"lambda_mult": args.lambda_mult} if strategy == "mmr" else {}
        return selector.select(texts, QUERY, budget=budget, strategy=strategy, **options)

    select("topk")  # warm-up: the embedding cache and the token memo
    topk, mmr = timed([lambda: select("topk"), lambda: select("mmr")], args.repeats)
    problem = selector.prepare(texts, QUERY, budget=budget)
    with blas_threads(1):
        solve_topk, solve_mmr = timed(
            [
                lambda: solve(dataclasses.replace(problem), "topk"),
                lambda: solve(dataclasses.replace(problem), "mmr", lambda_mult=args.lambda_mult),
            ],
            args.repeats,
        )
        pick = solve(problem, "mmr", lambda_mult=args.lambda_mult)
        ranking = problem.shared(("mmr", float(args.lambda_mult)), lambda: None)
        ranked = 0 if ranking is None else len(ranking)
        same = None
        if args.check:
            same = pick.order.tolist() == reference_picks(problem, args.lambda_mult)
    return {
        "n": n,
        "topk": topk,
        "mmr": mmr,
        "solve_topk": solve_topk,
        "solve_mmr": solve_mmr,
        "ranked": ranked,
        "kept": int(pick.order.size),
        "same": same,
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 12000, 12001, 20000])
    parser.add_argument("--budget-tokens", type=int, default=10_000)
    parser.add_argument("--lambda-mult", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--check", action="store_true", help="compare mmr's picks with the whole ranking's"
    )
    args = parser.parse_args(argv)
    print(f"budget {args.budget_tokens} tokens, lambda_mult {args.lambda_mult}, built-in embedder")
    print(
        "| n | select topk s (CPU) | select mmr s (CPU) | mmr / topk (CPU) "
        "| solve topk s | solve mmr s (CPU) | ranked | kept | same picks |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    failed = False
    for n in args.sizes:
        row = measure(n, args)
        same = "-" if row["same"] is None else ("yes" if row["same"] else "NO")
        failed |= row["same"] is False
        (topk, topk_cpu), (mmr, mmr_cpu) = row["topk"], row["mmr"]
        print(
            f"| {n:,} | {topk:.2f} ({topk_cpu:.2f}) | {mmr:.2f} ({mmr_cpu:.2f}) "
            f"| {mmr / topk:.2f} ({mmr_cpu / max(topk_cpu, 1e-9):.2f}) "
            f"| {row['solve_topk'][0]:.3f} | {row['solve_mmr'][0]:.3f} ({row['solve_mmr'][1]:.3f}) "
            f"| {row['ranked']:,} | {row['kept']:,} | {same} |",
            flush=True,
        )
    if failed:
        print("mmr's picks differ from the whole ranking's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
