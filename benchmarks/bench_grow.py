"""A growing pool: ``ContextSelector.select`` on a pool that grew by a few candidates.

Between two model calls an agent's pool usually grows by a few messages. This script builds a
pool of ``--n`` texts with dense vectors (a custom ``Embeddings`` that looks up clustered unit
vectors, d = 384, as a remote model's cache would return them) and token counts given with the
candidates, then times, with one BLAS thread:

* **cold**: ``select`` on the pool by a selector that has solved no pool yet (its embedding
  cache is warm: the time is that of the similarities and the selection);
* **grown**: ``select`` on the pool grown by ``--grow`` new candidates, by a selector whose
  last call was on the pool before it grew (the repeated step of a conversation): it embeds
  only the new texts and carries the cosine matrix over
  (:meth:`~langchain_pacms.core.Problem.grown`), so it computes the new rows' cosines only.

Each figure is the median of ``--repeats`` calls, cold and grown interleaved, with process CPU
times and the load average (the machine may be shared). Issue 23's target: grown <= 25% of
cold at n = 2,000.

Usage::

    python benchmarks/bench_grow.py                 # n = 2,000, grown by 5, budget 45%
    python benchmarks/bench_grow.py --n 4000 --grow 5 --budget 0.1
    python benchmarks/bench_grow.py --new-query      # each call asks something else
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import script_parser

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.blas import blas_threads
from langchain_pacms.embeddings import CachedEmbeddings


class LookupEmbeddings(Embeddings):
    """Dense vectors looked up by text (clustered unit vectors, like a cached remote model)."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vectors[text]


def make_pool(
    n: int, d: int, seed: int, queries: int = 1
) -> tuple[list[Candidate], list[str], LookupEmbeddings]:
    """``n`` candidates in groups of about 40 look-alikes, and queries near some groups."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(8, n // 40), d))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    spread = rng.uniform(0.6, 1.2, n)[:, None] / np.sqrt(d)
    vectors = centers[rng.integers(0, centers.shape[0], n)] + spread * rng.standard_normal((n, d))
    tokens = np.clip(rng.lognormal(np.log(120), 0.8, n), 20, 600).astype(int)
    texts = [f"message {i}" for i in range(n)]
    names = ["the question"] + [f"question {k}" for k in range(1, queries)]
    table = {t: v.tolist() for t, v in zip(texts, vectors)}
    for k, name in enumerate(names):
        near = centers[k % centers.shape[0]]
        table[name] = (near + rng.standard_normal(d) / np.sqrt(d)).tolist()
    cands = [
        Candidate(t, id=str(i), position=i, tokens=int(c))
        for i, (t, c) in enumerate(zip(texts, tokens))
    ]
    return cands, names, LookupEmbeddings(table)


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__, n=2000, d=384, grow=5, repeats=9)
    parser.add_argument("--budget", type=float, default=0.45)
    parser.add_argument(
        "--new-query",
        action="store_true",
        help="a different query at every call (an agent's newest step)",
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.grow < 1 or args.repeats < 1 or not 0 < args.budget <= 1:
        parser.error("--n, --grow and --repeats must be >= 1, --budget in (0, 1]")
    cands, queries, table = make_pool(
        args.n + args.grow * (args.repeats + 1),
        args.d,
        0,
        queries=args.repeats + 1 if args.new_query else 1,
    )
    cached = CachedEmbeddings(table)
    cached.embed_matrix([c.text for c in cands])  # a warm cache: no model time in either figure
    cached.embed_matrix(queries, kind="query")
    growing = ContextSelector(cached)
    size = args.n
    growing.select(cands[: size - args.grow], queries[-1], budget=("ratio", args.budget))
    cold: list[tuple[float, float]] = []
    grown: list[tuple[float, float]] = []
    same = True
    with blas_threads(1):
        for step in range(args.repeats):
            pool = cands[:size]
            query = queries[step % len(queries)]
            cpu, start = time.process_time(), time.perf_counter()
            fresh = ContextSelector(cached).select(pool, query, budget=("ratio", args.budget))
            cold.append((time.perf_counter() - start, time.process_time() - cpu))
            # The growing selector's last pool is this one minus its newest --grow candidates.
            cpu, start = time.process_time(), time.perf_counter()
            again = growing.select(pool, query, budget=("ratio", args.budget))
            grown.append((time.perf_counter() - start, time.process_time() - cpu))
            same &= again.kept_ids == fresh.kept_ids
            size += args.grow
    cold_ms = statistics.median(w for w, _ in cold) * 1e3
    grown_ms = statistics.median(w for w, _ in grown) * 1e3
    print(
        f"# n={args.n} (+{args.grow} a call), d={args.d}, budget {args.budget:.0%}, "
        f"{'a new query' if args.new_query else 'the same query'} at every call, "
        f"{args.repeats} calls each, 1 BLAS thread, load average {os.getloadavg()}"
    )
    print("| call | median ms | median cpu ms |")
    print("|---|---:|---:|")
    cold_cpu = statistics.median(c for _, c in cold) * 1e3
    print(f"| cold similarity | {cold_ms:.1f} | {cold_cpu:.1f} |")
    print(
        f"| pool grown by {args.grow} | {grown_ms:.1f} | "
        f"{statistics.median(c for _, c in grown) * 1e3:.1f} |"
    )
    print(
        f"grown / cold: {grown_ms / cold_ms:.2f} (target <= 0.25); "
        f"kept sets equal to a fresh selector's: {same}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
