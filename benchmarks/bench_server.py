"""Loopback load benchmark of ``pacms serve``: ``POST /select`` against in-process selection.

Builds ``--pools`` distinct pools of ``--candidates`` candidates from the bundled demo session
(each pool's texts carry its own agent number, so no two pools share a text, as different
agents' conversations do not), then, for each worker count in ``--workers``, starts
``pacms serve --workers N`` on a free 127.0.0.1 port (with ``--cache-url`` for more than one
worker: one embedding cache in Redis), sends every pool through it once to warm it, and times
two kinds of load:

* ``rotating``: each request carries the next pool in turn (what a service shared by many agents
  sees: the selector's reuse of the last pool never applies);
* ``repeated``: every request carries the same pool (the best case: all caches warm).

At 1 client, one request at a time alternates with an in-process ``ContextSelector.select`` of
the same body in this process (same machine load for both), so the ratio of the two is measured
in the run. At each larger count in ``--clients``, that many keep-alive connections send
requests back to back for ``--seconds``. Every answer is checked against the in-process
selection. The client is a small asyncio HTTP/1.1 client in this process (bodies encoded once),
so the clients cost little CPU next to the service; it still shares the machine's cores.

    python benchmarks/bench_server.py [--workers 1,2] [--clients 1,8,32,64] [--seconds 8]
        [--cache-url redis://127.0.0.1:6379/0]

``--cache-url`` defaults to ``$PACMS_TEST_REDIS_URL``; without either, more than one worker runs
with a cache each (the table says so). Service CPU is the CPU time of the ``pacms serve``
process and its workers over a run, divided by its requests (``/proc``, Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: one BLAS thread per process

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.demo import load_demo_session

MS = 1000.0


def pools(count: int, size: int) -> tuple[list[list[dict[str, Any]]], str]:
    """``count`` pools of ``size`` candidates with no text in common, and the query."""
    session = load_demo_session()
    base = list(session.candidates)
    out = []
    for agent in range(count):
        pool = []
        for i in range(size):
            c = base[(i + 7 * agent) % len(base)]
            pool.append(
                {
                    "id": f"{c.id}-{i}",
                    "text": f"{c.text} (agent {agent}, round {i // len(base)})",
                    "kind": c.kind,
                    "mandatory": c.mandatory and i < len(base),
                }
            )
        out.append(pool)
    return out, session.query


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children so far (0 off Linux)."""
    total = 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            children = [int(c) for c in fh.read().split()]
    except OSError:
        return total
    return total + sum(cpu_seconds(child) for child in children)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_request(port: int, body: bytes) -> bytes:
    head = (
        f"POST /select HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def content_length(head: bytes) -> int:
    """The body length a response head announces; the status must be 200."""
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].split()[1] == "200", lines[0]
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return int(value)
    raise AssertionError("no content-length in the answer")


def check(answer: bytes, expected: list[str]) -> None:
    kept = json.loads(answer)["kept_ids"]
    assert kept == expected, (kept, expected)


class Load:
    """Requests of one run: the bodies to send in turn and the answers they must get."""

    def __init__(self, port: int, bodies: list[bytes], expected: list[list[str]]) -> None:
        self.port = port
        self.requests = [http_request(port, b) for b in bodies]
        self.expected = expected
        self.turn = 0

    def next(self) -> int:
        self.turn += 1
        return (self.turn - 1) % len(self.requests)


def one_at_a_time(load: Load, bodies: list[dict[str, Any]], selector: ContextSelector, n: int):
    """``n`` remote requests, each after an in-process selection of the same body."""
    local = [([Candidate(**c) for c in b["candidates"]], b["query"]) for b in bodies]
    remote, inproc = [], []
    with socket.create_connection(("127.0.0.1", load.port)) as sock:
        stream = sock.makefile("rb")
        for _ in range(n):
            i = load.next()
            cands, query = local[i]
            t0 = time.perf_counter()
            selector.select(cands, query, budget=("ratio", bodies[i]["budget_ratio"]))
            t1 = time.perf_counter()
            sock.sendall(load.requests[i])
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += stream.readline()
            answer = stream.read(content_length(head))
            remote.append(time.perf_counter() - t1)
            inproc.append(t1 - t0)
            check(answer, load.expected[i])
    return remote, inproc


async def _client(load: Load, stop_at: float, limit: float, times: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", load.port)
    try:
        while time.perf_counter() < stop_at and load.turn < limit:
            i = load.next()
            t0 = time.perf_counter()
            writer.write(load.requests[i])
            head = await reader.readuntil(b"\r\n\r\n")
            answer = await reader.readexactly(content_length(head))
            times.append(time.perf_counter() - t0)
            check(answer, load.expected[i])
    finally:
        writer.close()


def concurrent(
    load: Load, clients: int, seconds: float, limit: float = math.inf
) -> tuple[list[float], float]:
    """``clients`` connections sending back to back for ``seconds`` (or until ``limit``
    requests were sent): latencies, wall time."""
    times: list[float] = []

    async def run() -> float:
        t0 = time.perf_counter()
        stop_at = t0 + seconds
        await asyncio.gather(*(_client(load, stop_at, limit, times) for _ in range(clients)))
        return time.perf_counter() - t0

    return times, asyncio.run(run())


def start_service(port: int, workers: int, cache_url: str | None) -> subprocess.Popen[bytes]:
    extra = ["--workers", str(workers)]
    if cache_url is not None and workers > 1:
        extra += ["--cache-url", cache_url]
    server = subprocess.Popen(
        [sys.executable, "-m", "langchain_pacms.cli.main", "serve", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            raise SystemExit("the service did not start")
        time.sleep(0.2)


def row(name: str, times: list[float], rate: float, cpu: str, ratio: str = "") -> str:
    return (
        f"| {name} | {len(times)} | {pct(times, 0.5) * MS:.2f} | {pct(times, 0.99) * MS:.2f}"
        f" | {rate:.0f} | {cpu} | {ratio} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--pools", type=int, default=50, help="distinct rotating bodies")
    parser.add_argument("--workers", default="1,2", help="worker counts to run (comma list)")
    parser.add_argument("--clients", default="1,8,32,64", help="client counts (comma list)")
    parser.add_argument("--seconds", type=float, default=8.0, help="per concurrent run")
    parser.add_argument("--single", type=int, default=150, help="requests at 1 client")
    parser.add_argument("--budget-ratio", type=float, default=0.05)
    parser.add_argument("--cache-url", default=os.environ.get("PACMS_TEST_REDIS_URL"))
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    clients = [int(c) for c in args.clients.split(",")]

    all_pools, query = pools(args.pools, args.candidates)
    bodies = [
        {"candidates": p, "query": query, "budget_ratio": args.budget_ratio} for p in all_pools
    ]
    raw = [json.dumps(b).encode() for b in bodies]
    selector = ContextSelector()
    local = [[Candidate(**c) for c in p] for p in all_pools]
    expected = [
        list(selector.select(c, query, budget=("ratio", args.budget_ratio)).kept_ids) for c in local
    ]
    load_before = os.getloadavg()
    lines: list[str] = []
    ratios: dict[int, float] = {}  # workers -> rotating 1-client p50 / in-process p50
    rates: dict[int, float] = {}  # workers -> rotating 8-client requests/s
    for n_workers in workers:
        plural = "s" * (n_workers > 1)
        if n_workers == 1:
            cache = "in memory"
        else:
            cache = "one Redis cache" if args.cache_url else "a cache each, no --cache-url"
        port = free_port()
        server = start_service(port, n_workers, args.cache_url)
        try:
            concurrent(Load(port, raw, expected), 8, math.inf, limit=4 * len(raw))  # warm
            for mode, sent, answers in (
                ("rotating", raw, expected),
                ("repeated", raw[:1], expected[:1]),
            ):
                for count in clients:
                    load = Load(port, sent, answers)
                    cpu0 = cpu_seconds(server.pid)
                    name = f"{n_workers} worker{plural}, {mode}, {count} client{'s' * (count > 1)}"
                    if count == 1:
                        times, inproc = one_at_a_time(load, bodies, selector, args.single)
                        rate, ratio = len(times) / sum(times), pct(times, 0.5) / pct(inproc, 0.5)
                        lines.append(
                            row(f"in-process, {mode}", inproc, len(inproc) / sum(inproc), "")
                        )
                    else:
                        times, wall = concurrent(load, count, args.seconds)
                        rate, ratio = len(times) / wall, math.nan
                    cpu = (cpu_seconds(server.pid) - cpu0) * MS / len(times)
                    shown = "" if math.isnan(ratio) else f"{ratio:.2f}x"
                    lines.append(row(name, times, rate, f"{cpu:.1f}", shown))
                    if mode == "rotating" and count == 1:
                        ratios[n_workers] = ratio
                    if mode == "rotating" and count == 8:
                        rates[n_workers] = rate
        finally:
            server.terminate()
            server.wait(30)
        lines.append(f"| ({n_workers} worker{plural}: {cache}) | | | | | | |")
    load_after = os.getloadavg()
    print(
        f"/select, {args.pools} rotating pools of {args.candidates} candidates (and one repeated),"
        f" budget_ratio {args.budget_ratio}; {os.cpu_count()} cores; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after\n"
    )
    print(
        "| run | requests | p50 ms | p99 ms | requests/s | service CPU ms/request "
        "| p50 / in-process |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(lines))
    print()
    for n_workers, ratio in ratios.items():
        print(
            f"rotating, 1 client, {n_workers} worker(s): service p50 / in-process p50 {ratio:.2f}x"
        )
    if 1 in rates and 2 in rates:
        print(f"rotating, 8 clients: 2 workers / 1 worker throughput {rates[2] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
