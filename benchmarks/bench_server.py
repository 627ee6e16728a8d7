"""Loopback load benchmark of ``pacms serve``: ``POST /select`` vs an in-process selection.

Starts the service in a subprocess (``pacms serve`` on a free 127.0.0.1 port), builds a pool of
``--candidates`` candidates from the bundled demo session (repeated with new ids past 164),
warms the embedding cache, then times:

* ``in-process``: ``ContextSelector.select`` on the same pool, one call at a time;
* ``remote, 1 client``: one keep-alive client, one request at a time (the service's overhead);
* ``remote, N clients``: ``--clients`` threads, each with its own keep-alive client.

    python benchmarks/bench_server.py [--candidates 200] [--clients 8] [--requests 400]

Client and service share this machine's cores, so the concurrent figures include the clients'
own JSON work.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import socket
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: one BLAS thread per process

import httpx

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.demo import load_demo_session


def pool(n: int) -> tuple[list[dict], str]:
    session = load_demo_session()
    base = list(session.candidates)
    out = []
    for i in range(n):
        c = base[i % len(base)]
        out.append({"id": f"{c.id}-{i // len(base)}", "text": c.text, "kind": c.kind,
                    "mandatory": c.mandatory and i < len(base)})
    return out, session.query


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=400, help="requests per remote run")
    parser.add_argument("--budget-ratio", type=float, default=0.05)
    args = parser.parse_args()

    cands, query = pool(args.candidates)
    body = {"candidates": cands, "query": query, "budget_ratio": args.budget_ratio}
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "langchain_pacms.cli.main", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the service did not start") from None
                time.sleep(0.1)

        selector = ContextSelector()
        local = [Candidate(**c) for c in cands]
        selector.select(local, query, budget_ratio=args.budget_ratio)  # warm
        expected = selector.select(local, query, budget_ratio=args.budget_ratio)

        def post(client: httpx.Client) -> float:
            t0 = time.perf_counter()
            r = client.post(f"{url}/select", json=body)
            elapsed = time.perf_counter() - t0
            assert r.status_code == 200, r.text
            assert r.json()["kept_ids"] == list(expected.kept_ids)
            return elapsed

        def run(n: int) -> list[float]:
            with httpx.Client(timeout=30) as client:
                return [post(client) for _ in range(n)]

        run(min(20, args.requests))  # warm the service's cache and connections
        # in-process and one remote client interleaved, so both see the same machine load
        inproc, single = [], []
        with httpx.Client(timeout=30) as client:
            for _ in range(min(args.requests, 200)):
                t0 = time.perf_counter()
                selector.select(local, query, budget_ratio=args.budget_ratio)
                inproc.append(time.perf_counter() - t0)
                single.append(post(client))
        per = max(1, args.requests // args.clients)
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as ex:
            parts = list(ex.map(run, [per] * args.clients))
        wall = time.perf_counter() - t0
        many = [t for p in parts for t in p]
    finally:
        server.terminate()
        server.wait(10)

    ms = 1000.0
    load = os.getloadavg()[0]
    print(f"/select, {args.candidates} candidates, budget_ratio {args.budget_ratio}, warm cache; "
          f"load average {load:.1f} on {os.cpu_count()} cores\n")
    print("| run | requests | p50 ms | p95 ms | p99 ms | requests/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, times, rate in (
        ("in-process select", inproc, len(inproc) / sum(inproc)),
        ("remote, 1 client", single, len(single) / sum(single)),
        (f"remote, {args.clients} clients", many, len(many) / wall),
    ):
        print(f"| {name} | {len(times)} | {pct(times, .5) * ms:.2f} | {pct(times, .95) * ms:.2f}"
              f" | {pct(times, .99) * ms:.2f} | {rate:.0f} |")
    print(f"\nservice overhead at p50 (1 client - in-process): "
          f"{(pct(single, .5) - pct(inproc, .5)) * ms:.2f} ms; "
          f"ratio remote/in-process p50: {pct(single, .5) / pct(inproc, .5):.2f}x")


if __name__ == "__main__":
    main()
