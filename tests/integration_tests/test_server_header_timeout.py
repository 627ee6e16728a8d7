"""``pacms serve --header-timeout``: a client that trickles its request head is cut off.

A real ``pacms serve --workers 2 --header-timeout 1`` on a loopback port; raw sockets send
request heads a few bytes at a time.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
import httpx
from pacms_server import free_port

HEADER_TIMEOUT = 1.0
MARGIN = 1.5  # scheduling slack on a loaded machine
GAP = 0.2  # seconds between the bytes of a trickled head
HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "langchain_pacms.cli.main", "serve", "--port", str(port)),
            *("--workers", "2", "--header-timeout", str(HEADER_TIMEOUT)),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "did not start"
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(20)


def trickle(sock: socket.socket, data: bytes) -> bytes:
    """Send ``data`` a byte every :data:`GAP` seconds until the server closes; its answer."""
    received = b""
    sock.settimeout(GAP)
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
        if not chunk:
            break
        received += chunk
    return received


def cut_off(port: int) -> tuple[bytes, float]:
    """Trickle a head on a new connection: the answer, and the seconds until it was closed."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        start = time.monotonic()
        answer = trickle(sock, HEAD)
        return answer, time.monotonic() - start


def more(sock: socket.socket) -> bytes:
    chunk = sock.recv(4096)
    assert chunk, "the server closed the connection"
    return chunk


def response(sock: socket.socket) -> bytes:
    """Read one whole response from ``sock`` (a body of the declared length); its head."""
    sock.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        data += more(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += more(sock)
    return head


def test_trickled_heads_are_cut_off_while_others_are_served(port: int) -> None:
    idle = socket.create_connection(("127.0.0.1", port))
    with idle, ThreadPoolExecutor(4) as pool:
        slow = [pool.submit(cut_off, port) for _ in range(4)]
        time.sleep(GAP)
        for _ in range(2):  # new connections, to either worker, meanwhile
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        assert not any(s.done() for s in slow)
        for s in slow:
            answer, closed_after = s.result(timeout=10)
            assert answer.startswith(b"HTTP/1.1 408 ")
            assert HEADER_TIMEOUT - GAP <= closed_after <= HEADER_TIMEOUT + MARGIN
        idle.settimeout(MARGIN)
        assert idle.recv(4096) == b""  # closed, without an answer: it sent nothing


def test_slow_complete_heads_are_answered_and_each_request_gets_its_own_clock(port: int) -> None:
    pieces = [HEAD[i : i + 12] for i in range(0, len(HEAD), 12)]
    assert (len(pieces) - 1) * GAP < HEADER_TIMEOUT - GAP
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for _ in range(2):  # together slower than the deadline, each within it
            for i, piece in enumerate(pieces):
                time.sleep(GAP if i else 0)
                sock.sendall(piece)
            assert response(sock).startswith(b"HTTP/1.1 200 ")
        answered = time.monotonic()
        assert trickle(sock, HEAD).startswith(b"HTTP/1.1 408 ")  # the next request's clock
        assert time.monotonic() - answered <= HEADER_TIMEOUT + MARGIN
