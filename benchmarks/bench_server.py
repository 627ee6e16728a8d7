"""Loopback load benchmark of ``pacms serve``: ``POST /select`` against in-process selection.

Builds ``--pools`` distinct pools of ``--candidates`` candidates from the bundled demo session
(each pool's texts carry its own agent number, so no two pools share a text, as different
agents' conversations do not). Then it starts one service per setting, all before any timing:
``pacms serve`` with 1 worker, and for each larger count in ``--workers`` that many workers
with an embedding cache each, given ``--cache-url`` that many sharing one cache in Redis, and
for each count in ``--threads`` that many workers with that many selection threads each (the
others run ``pacms serve``'s default). Each worker of each service gets every pool twice to
warm it. Two kinds of load are timed:

* ``rotating``: each request carries the next pool in turn (what a service shared by many agents
  sees: the selector's reuse of the last pool never applies);
* ``repeated``: every request carries the same pool (the best case: all caches warm).

For each load and client count the settings run one after the other, so their rows are
measured minutes apart at most. At 1 client, one request at a time alternates with an
in-process ``ContextSelector.select`` of the same body in this process (same machine load for
both), so the ratio of the two is measured in the run. At each larger count in ``--clients``,
that many keep-alive connections send requests back to back for ``--seconds``.

The client is kept light: asyncio streams, requests encoded once, only the status line and
``content-length`` read while timing; the answers are checked against the in-process selection
after each run. Each connection first asks ``GET /healthz`` which worker process it reached,
so the table shows how the connections spread over the workers. CPU columns (``/proc``, Linux):
the service's (the ``pacms serve`` process and its workers) per request and in cores over the
run, this client's per request and in cores, and every other process's in cores (the machine's
busy time less both), so a loaded machine shows in the table.

    python benchmarks/bench_server.py [--workers 1,2] [--clients 1,8,32,64] [--seconds 8]
        [--cache-url redis://127.0.0.1:6379/0] [--threads 2]

``--cache-url`` defaults to ``$PACMS_TEST_REDIS_URL``. The services run with the environment
of this script: ``pacms serve`` as a user starts it.
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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.demo import load_demo_session

MS = 1000.0
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


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


def busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy so far (0 off Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            ticks = [int(v) for v in fh.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is inside user


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
    assert head[9:12] == b"200", head[: head.find(b"\r\n")]
    start = head.lower().index(b"content-length:") + 15
    return int(head[start : head.index(b"\r\n", start)])


def check(answers: list[tuple[int, bytes]], expected: list[list[str]]) -> None:
    """Every answer keeps what the in-process selection of its body keeps."""
    for i, answer in answers:
        kept = json.loads(answer)["kept_ids"]
        assert kept == expected[i], (kept, expected[i])


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


@dataclass
class Usage:
    """CPU seconds spent over a run: by the service, by this client, by the whole machine."""

    service: float
    client: float
    machine: float

    @classmethod
    def now(cls, pid: int) -> Usage:
        return cls(cpu_seconds(pid), time.process_time(), busy_seconds())

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.service - other.service, self.client - other.client, self.machine - other.machine
        )


def one_at_a_time(
    load: Load, bodies: list[dict[str, Any]], selector: ContextSelector, n: int
) -> tuple[list[float], list[float], float]:
    """``n`` remote requests, each after an in-process selection of the same body.

    Returns the remote and in-process times, and the client CPU seconds of the remote part.
    """
    local = [([Candidate(**c) for c in b["candidates"]], b["query"]) for b in bodies]
    remote, inproc, answers = [], [], []
    client_cpu = 0.0
    with socket.create_connection(("127.0.0.1", load.port)) as sock:
        stream = sock.makefile("rb")
        for _ in range(n):
            i = load.next()
            cands, query = local[i]
            t0 = time.perf_counter()
            selector.select(cands, query, budget=("ratio", bodies[i]["budget_ratio"]))
            c1, t1 = time.process_time(), time.perf_counter()
            sock.sendall(load.requests[i])
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += stream.readline()
            answers.append((i, stream.read(content_length(head))))
            t2 = time.perf_counter()
            client_cpu += time.process_time() - c1
            remote.append(t2 - t1)
            inproc.append(t1 - t0)
    check(answers, load.expected)
    return remote, inproc, client_cpu


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """A keep-alive connection and the process id of the worker that accepted it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HEALTH)
    head = await reader.readuntil(b"\r\n\r\n")
    return (
        reader,
        writer,
        int(json.loads(await reader.readexactly(content_length(head)))["process"]),
    )


async def _client(
    load: Load,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    stop_at: float,
    times: list[float],
    answers: list[tuple[int, bytes]],
) -> None:
    while time.perf_counter() < stop_at:
        i = load.next()
        t0 = time.perf_counter()
        writer.write(load.requests[i])
        head = await reader.readuntil(b"\r\n\r\n")
        answers.append((i, await reader.readexactly(content_length(head))))
        times.append(time.perf_counter() - t0)


def concurrent(
    load: Load, clients: int, seconds: float, pid: int
) -> tuple[list[float], float, Usage, Counter[int]]:
    """``clients`` connections sending back to back for ``seconds``: latencies, wall time, CPU
    used, connections per worker process."""
    times: list[float] = []
    answers: list[tuple[int, bytes]] = []

    async def run() -> tuple[float, Usage, Counter[int]]:
        conns = await asyncio.gather(*(_connect(load.port) for _ in range(clients)))
        before, t0 = Usage.now(pid), time.perf_counter()
        stop_at = t0 + seconds
        await asyncio.gather(*(_client(load, r, w, stop_at, times, answers) for r, w, _ in conns))
        wall, used = time.perf_counter() - t0, Usage.now(pid) - before
        for _, writer, _ in conns:
            writer.close()
        return wall, used, Counter(worker for _, _, worker in conns)

    wall, used, spread = asyncio.run(run())
    check(answers, load.expected)
    return times, wall, used, spread


@dataclass
class Service:
    """One running ``pacms serve``: its name in the table, port and process."""

    name: str
    note: str
    workers: int
    port: int
    process: subprocess.Popen[bytes]


def start_service(name: str, note: str, workers: int, extra: list[str]) -> Service:
    port = free_port()
    extra = ["--workers", str(workers), *extra]
    server = subprocess.Popen(
        [sys.executable, "-m", "langchain_pacms.cli.main", "serve", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(HEALTH)
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return Service(name, note, workers, port, server)
        except OSError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            raise SystemExit("the service did not start")
        time.sleep(0.2)


def warm(service: Service, load: Load, passes: int = 2) -> None:
    """Send every body ``passes`` times to each worker process of ``service``, on a connection
    to each (opened in batches until every worker has accepted one: which worker accepts a
    connection is not ours to choose)."""

    async def send_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(passes):
            for request in load.requests:
                writer.write(request)
                await reader.readexactly(content_length(await reader.readuntil(b"\r\n\r\n")))

    async def run() -> None:
        reached: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        opened: list[asyncio.StreamWriter] = []
        deadline = time.monotonic() + 60
        while len(reached) < service.workers:
            if time.monotonic() > deadline:
                raise SystemExit(f"{service.name}: only {len(reached)} workers answered")
            for reader, writer, worker in await asyncio.gather(
                *(_connect(load.port) for _ in range(8))
            ):
                opened.append(writer)
                reached.setdefault(worker, (reader, writer))
            await asyncio.sleep(0.2)
        await asyncio.gather(*(send_all(r, w) for r, w in reached.values()))
        for writer in opened:
            writer.close()

    asyncio.run(run())


def row(name: str, times: list[float], rate: float, cpu: str, ratio: str = "", *more: str) -> str:
    cells = [f"{pct(times, 0.5) * MS:.2f}", f"{pct(times, 0.99) * MS:.2f}", f"{rate:.0f}", cpu]
    return f"| {name} | {len(times)} | {' | '.join([*cells, ratio, *more])} |"


def measure(
    service: Service,
    mode: str,
    count: int,
    load: Load,
    bodies: list[dict[str, Any]],
    selector: ContextSelector,
    args: argparse.Namespace,
) -> tuple[list[str], float, float]:
    """One setting's rows at one client count: the rows, requests/s, p50 / in-process p50."""
    pid = service.process.pid
    name = f"{service.name}, {mode}, {count} client{'s' * (count > 1)}"
    if count == 1:
        before, t0 = Usage.now(pid), time.perf_counter()
        times, inproc, client_cpu = one_at_a_time(load, bodies, selector, args.single)
        used, wall = Usage.now(pid) - before, time.perf_counter() - t0
        others = used.machine - used.service - used.client
        used.client = client_cpu  # the in-process selections are not the client's work
        rate, ratio = len(times) / sum(times), pct(times, 0.5) / pct(inproc, 0.5)
        spread: Counter[int] = Counter({0: 1})
        lines = [row(f"in-process, {mode}", inproc, len(inproc) / sum(inproc), "")]
    else:
        times, wall, used, spread = concurrent(load, count, args.seconds, pid)
        others = used.machine - used.service - used.client
        rate, ratio, lines = len(times) / wall, math.nan, []
    lines.append(
        row(
            name,
            times,
            rate,
            f"{used.service * MS / len(times):.1f}",
            "" if math.isnan(ratio) else f"{ratio:.2f}x",
            f"{used.service / wall:.2f}",
            f"{used.client * MS / len(times):.2f}",
            f"{used.client / wall:.2f}",
            f"{max(others, 0.0) / wall:.2f}",
            "+".join(str(n) for n in sorted(spread.values(), reverse=True)),
        )
    )
    return lines, rate, ratio


def settings(
    workers: list[int], cache_url: str | None, threads: list[int]
) -> list[tuple[str, str, int, list[str]]]:
    """(name, note, workers, further ``pacms serve`` options) of every service to run."""
    out: list[tuple[str, str, int, list[str]]] = []
    for n in workers:
        if n == 1:
            out.append(("1 worker", "in memory", 1, []))
            continue
        out.append((f"{n} workers", "a cache each", n, []))
        if cache_url is not None:
            out.append((f"{n} workers + Redis", "one Redis cache", n, ["--cache-url", cache_url]))
        for t in threads:
            note = f"a cache each, --selection-threads {t}"
            out.append((f"{n} workers x {t} threads", note, n, ["--selection-threads", str(t)]))
    return out


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
    parser.add_argument(
        "--threads",
        default="",
        help="also run each worker count above 1 with these selection threads per worker "
        "(comma list; default: none)",
    )
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    clients = [int(c) for c in args.clients.split(",")]
    threads = [int(t) for t in args.threads.split(",") if t]

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
    ratios: dict[str, float] = {}  # setting -> rotating 1-client p50 / in-process p50
    rates: dict[str, float] = {}  # setting -> rotating 8-client requests/s
    services: list[Service] = []
    try:
        for name, note, n_workers, extra in settings(workers, args.cache_url, threads):
            services.append(start_service(name, note, n_workers, extra))
            warm(services[-1], Load(services[-1].port, raw, expected))
        for mode, sent, answers in (
            ("rotating", raw, expected),
            ("repeated", raw[:1], expected[:1]),
        ):
            for count in clients:
                for service in services:
                    load = Load(service.port, sent, answers)
                    rows, rate, ratio = measure(service, mode, count, load, bodies, selector, args)
                    lines += rows
                    if mode == "rotating" and count == 1:
                        ratios[service.name] = ratio
                    if mode == "rotating" and count == 8:
                        rates[service.name] = rate
    finally:
        for service in services:
            service.process.terminate()
            service.process.wait(30)
    lines += [f"| ({s.name}: {s.note}) | | | | | | | | | | | |" for s in services]
    load_after = os.getloadavg()
    print(
        f"/select, {args.pools} rotating pools of {args.candidates} candidates (and one repeated),"
        f" budget_ratio {args.budget_ratio}; {os.cpu_count()} cores; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after\n"
    )
    print(
        "| run | requests | p50 ms | p99 ms | requests/s | service CPU ms/request "
        "| p50 / in-process | service cores | client CPU ms/request | client cores "
        "| other cores | connections per worker |"
    )
    print("| --- |" + " ---: |" * 10 + " --- |")
    print("\n".join(lines))
    print()
    for service in (s for s in services if s.name in ratios):
        print(
            f"rotating, 1 client, {service.workers} worker(s): service p50 / in-process p50 "
            f"{ratios[service.name]:.2f}x ({service.name}, {service.note})"
        )
    one = rates.get("1 worker")
    for name, rate in rates.items():
        if one and name != "1 worker":
            print(f"rotating, 8 clients: {name} / 1 worker throughput {rate / one:.2f}x")


if __name__ == "__main__":
    main()
