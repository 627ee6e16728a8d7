"""``pacms serve --workers 2`` on Linux: a listener per worker, a taken port, a clean stop.

Real ``pacms serve`` processes on loopback ports. Each worker listens on the port itself
(``SO_REUSEPORT``), so connections opened together spread over the workers instead of all
going to whichever worker wakes first; a port already taken stops ``pacms serve`` at once with
exit code 2; a stop signal ends every worker. Without ``SO_REUSEPORT`` the workers share
uvicorn's one listener, as before.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
import uvicorn
from pacms_server import free_port, serving

from langchain_pacms.cli.main import main
from langchain_pacms.cli.serve import _reuse_port_socket
from langchain_pacms.server.app import CONFIG_ENV

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not hasattr(socket, "SO_REUSEPORT"),
    reason="each worker listens on the port itself only where SO_REUSEPORT spreads connections",
)
SERVE = [sys.executable, "-m", "langchain_pacms.cli.main", "serve"]
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def healthz(sock: socket.socket) -> dict:
    """``GET /healthz`` on a connected socket (then closed)."""
    with sock:
        sock.sendall(HEALTH)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return dict(json.loads(body))


def worker_pids(port: int, connections: int) -> Counter[int]:
    """Open ``connections`` connections together, then ask each which worker accepted it."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(connections)]
    return Counter(healthz(sock)["process"] for sock in socks)


def both_workers_up(port: int) -> set[int]:
    """The two worker pids, once each has answered (one may still be loading at first)."""
    pids: set[int] = set()
    deadline = time.monotonic() + 60
    while len(pids) < 2:
        assert time.monotonic() < deadline, f"only {pids} answered"
        pids |= set(worker_pids(port, 4))
        time.sleep(0.2)
    return pids


def listeners(port: int) -> int:
    """How many sockets listen on 127.0.0.1:``port`` (``/proc/net/tcp``, state 0A)."""
    local = f"0100007F:{port:04X}"
    with open("/proc/net/tcp", encoding="ascii") as fh:
        return sum(line.split()[1] == local and line.split()[3] == "0A" for line in fh)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with serving("--workers", "2") as url:
        yield int(url.rpartition(":")[2])


def test_each_worker_listens_and_connections_opened_together_reach_both(port: int) -> None:
    pids = both_workers_up(port)
    assert listeners(port) == 2  # one socket per worker, not one shared
    for _ in range(3):  # 16 at once all on one worker: 1 in 2**15 with a listener each
        spread = worker_pids(port, 16)
        assert set(spread) == pids, spread


def test_workers_divide_the_cpus_for_selection_threads(port: int) -> None:
    health = healthz(socket.create_connection(("127.0.0.1", port), timeout=10))
    assert health["selection_threads"] == max(1, (os.cpu_count() or 1) // 2)


@pytest.mark.parametrize("holder", ["plain listener", "another pacms serve"])
def test_a_taken_port_fails_fast_with_exit_2(port: int, holder: str) -> None:
    with socket.socket() as sock:
        if holder == "plain listener":
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            taken = sock.getsockname()[1]
        else:
            taken = port  # its workers listen with SO_REUSEPORT: a second group must not join
        started = time.monotonic()
        done = subprocess.run(
            [*SERVE, "--port", str(taken), "--workers", "2"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done
    assert f"cannot listen on 127.0.0.1 port {taken}" in done.stderr
    assert "Address already in use" in done.stderr
    assert time.monotonic() - started < 30  # no worker was started, let alone restarted
    assert listeners(port) == 2  # the running service is untouched


def test_a_worker_that_cannot_bind_exits_with_uvicorns_startup_failure() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(SystemExit) as exited:
            _reuse_port_socket(socket.AF_INET, sock.getsockname())
    assert exited.value.code == 3  # the supervisor stops rather than starting it again


@pytest.mark.parametrize("stop", ["Ctrl-C", "terminate"])
def test_a_stop_ends_every_worker(stop: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*SERVE, "--port", str(port), "--workers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        deadline = time.monotonic() + 60
        while listeners(port) < 1:
            assert proc.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.2)
        pids = both_workers_up(port)
        if stop == "Ctrl-C":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the whole group
        else:
            proc.terminate()  # the parent only
        assert proc.wait(30) == 0
        deadline = time.monotonic() + 10
        while not all(gone(pid) for pid in pids):
            assert time.monotonic() < deadline, f"orphaned workers: {pids}"
            time.sleep(0.1)
        assert listeners(port) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize(
    ("extra", "threads"),
    [([], None), (["--selection-threads", "3"], 3)],
)
def test_without_reuse_port_the_workers_share_uvicorns_listener(
    monkeypatch: pytest.MonkeyPatch, extra: list[str], threads: int | None
) -> None:
    monkeypatch.delattr(socket, "SO_REUSEPORT")  # the service's own default: connections bunch
    seen: dict = {}
    monkeypatch.setattr(
        uvicorn, "run", lambda app, **kw: seen.update(kw, config=os.environ[CONFIG_ENV])
    )
    port = str(free_port())
    assert main(["serve", "--port", port, "--workers", "2", "--header-timeout", "3", *extra]) == 0
    assert seen["workers"] == 2 and seen["http"].keywords == {"header_timeout": 3.0}
    assert json.loads(seen["config"])["selection_threads"] == threads


def test_the_live_prefix_reaches_the_workers_and_a_bad_one_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict = {}
    monkeypatch.setattr(
        uvicorn, "run", lambda app, **kw: seen.update(config=os.environ[CONFIG_ENV])
    )
    assert main(["serve", "--port", str(free_port()), "--live-prefix", "team-a:"]) == 0
    assert json.loads(seen["config"])["live_prefix"] == "team-a:"
    with pytest.raises(SystemExit) as stop:
        main(["serve", "--port", str(free_port()), "--live-prefix", "team a"])
    assert stop.value.code == 2
    assert "--live-prefix: must be 1-100 characters" in capsys.readouterr().err
