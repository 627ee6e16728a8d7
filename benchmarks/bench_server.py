"""Loopback load benchmark of ``pacms serve``: ``POST /select`` vs an in-process selection.

Starts the service in a subprocess (``pacms serve`` on a free 127.0.0.1 port), builds a pool of
``--candidates`` candidates from the bundled demo session (repeated with new ids past 164),
warms the embedding cache, then times:

* ``in-process``: ``ContextSelector.select`` on the same pool, one call at a time;
* ``remote, 1 client``: one keep-alive client, one request at a time (the service's overhead);
* ``remote, N clients``: ``--clients`` client processes, each with its own keep-alive
  connection, all starting at the same moment.

    python benchmarks/bench_server.py [--candidates 200] [--clients 8] [--requests 400]

The request body is encoded once and sent as bytes, so the clients' own cost is the HTTP
exchange, not JSON encoding. Client and service still share this machine's cores. Besides wall
latencies it prints CPU time: the in-process call's (thread CPU) and the service process's per
request (from ``/proc/<pid>/stat``, Linux), which a busy machine inflates much less than wall
time, and the load average before and after.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
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
        out.append(
            {
                "id": f"{c.id}-{i // len(base)}",
                "text": c.text,
                "kind": c.kind,
                "mandatory": c.mandatory and i < len(base),
            }
        )
    return out, session.query


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (``None`` off Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_request_ms(pid: int, before: float | None, requests: int) -> str:
    after = cpu_seconds(pid)
    if before is None or after is None:
        return "n/a"
    return f"{(after - before) * 1000 / requests:.2f}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


Timed = tuple[list[float], float, float, float]  # latencies, first start, last end, CPU s
WARM = 3  # untimed requests per client before the timed ones


def post(client: httpx.Client, url: str, raw: bytes, expected: list[str]) -> float:
    """One ``/select`` round trip in seconds; the answer must be the in-process one."""
    t0 = time.perf_counter()
    r = client.post(f"{url}/select", content=raw, headers={"content-type": "application/json"})
    elapsed = time.perf_counter() - t0
    assert r.status_code == 200, r.text
    assert r.json()["kept_ids"] == expected
    return elapsed


def client_process(url: str, raw: bytes, expected: list[str], n: int, start_at: float) -> Timed:
    """One client (its own process and keep-alive connection): ``n`` requests from ``start_at``.

    ``time.perf_counter`` is the system's monotonic clock on Linux, so the processes share
    ``start_at`` and their start and end times can be compared.
    """
    with httpx.Client(timeout=30) as client:
        for _ in range(WARM):
            post(client, url, raw, expected)
        time.sleep(max(0.0, start_at - time.perf_counter()))
        cpu0, t0 = time.process_time(), time.perf_counter()
        times = [post(client, url, raw, expected) for _ in range(n)]
        return times, t0, time.perf_counter(), time.process_time() - cpu0


def start_service(port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "langchain_pacms.cli.main", "serve", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return server
        except httpx.HTTPError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise SystemExit("the service did not start") from None
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=400, help="requests per remote run")
    parser.add_argument("--budget-ratio", type=float, default=0.05)
    parser.add_argument(
        "--selection-threads",
        type=int,
        default=None,
        help="passed to pacms serve (default: its own, the number of CPUs)",
    )
    args = parser.parse_args()
    extra = (
        []
        if args.selection_threads is None
        else ["--selection-threads", str(args.selection_threads)]
    )

    cands, query = pool(args.candidates)
    raw = json.dumps({"candidates": cands, "query": query, "budget_ratio": args.budget_ratio})
    body = raw.encode()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_service(port, extra)
    try:
        selector = ContextSelector()
        local = [Candidate(**c) for c in cands]
        selector.select(local, query, budget_ratio=args.budget_ratio)  # warm
        expected = list(selector.select(local, query, budget_ratio=args.budget_ratio).kept_ids)

        load_before = os.getloadavg()
        # in-process and one remote client interleaved, so both see the same machine load
        inproc, inproc_cpu, single = [], [], []
        with httpx.Client(timeout=30) as client:
            for _ in range(20):  # warm the service's cache and the connection
                post(client, url, body, expected)
            single_cpu = cpu_seconds(server.pid)
            for _ in range(min(args.requests, 200)):
                t0, c0 = time.perf_counter(), time.thread_time()
                selector.select(local, query, budget_ratio=args.budget_ratio)
                inproc.append(time.perf_counter() - t0)
                inproc_cpu.append(time.thread_time() - c0)
                single.append(post(client, url, body, expected))
        single_cpu_ms = per_request_ms(server.pid, single_cpu, len(single))

        per = max(1, args.requests // args.clients)
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(args.clients, mp_context=context) as ex:
            start_at = time.perf_counter() + 2.0  # every client connected and warm by then
            many_cpu = cpu_seconds(server.pid)
            parts = list(
                ex.map(client_process, *zip(*[(url, body, expected, per, start_at)] * args.clients))
            )
        many_cpu_ms = per_request_ms(server.pid, many_cpu, (per + WARM) * args.clients)
    finally:
        server.terminate()
        server.wait(10)

    many = [t for times, *_ in parts for t in times]
    wall = max(end for _, _, end, _ in parts) - min(begin for _, begin, _, _ in parts)
    client_cpu_ms = sum(cpu for *_, cpu in parts) * 1000 / len(many)
    ms = 1000.0
    load_after = os.getloadavg()
    threads = args.selection_threads or os.cpu_count()
    print(
        f"/select, {args.candidates} candidates, budget_ratio {args.budget_ratio}, warm cache, "
        f"{threads} selection thread(s); "
        f"{os.cpu_count()} cores; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after\n"
    )
    print("| run | requests | p50 ms | p95 ms | p99 ms | requests/s | CPU ms/request |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, times, rate, cpu in (
        (
            "in-process select",
            inproc,
            len(inproc) / sum(inproc),
            f"{pct(inproc_cpu, 0.5) * ms:.2f}",
        ),
        ("remote, 1 client", single, len(single) / sum(single), single_cpu_ms),
        (f"remote, {args.clients} clients", many, len(many) / wall, many_cpu_ms),
    ):
        print(
            f"| {name} | {len(times)} | {pct(times, 0.5) * ms:.2f} | {pct(times, 0.95) * ms:.2f}"
            f" | {pct(times, 0.99) * ms:.2f} | {rate:.0f} | {cpu} |"
        )
    print(
        f"\nservice overhead at p50 (1 client - in-process): "
        f"{(pct(single, 0.5) - pct(inproc, 0.5)) * ms:.2f} ms; "
        f"ratio remote/in-process p50: {pct(single, 0.5) / pct(inproc, 0.5):.2f}x"
    )
    print(
        "CPU ms/request: in-process = the call's thread CPU (median); remote = the service "
        f"process's CPU over the run / requests; the {args.clients} client processes used "
        f"{client_cpu_ms:.2f} ms each request"
    )


if __name__ == "__main__":
    main()
