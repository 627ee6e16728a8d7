"""``pacms serve`` bounds a request's line and headers to 16 KiB however they arrive.

h11 alone refuses only a head still incomplete past its limit: a head is taken if the read that
crosses the limit completes it (one sent whole, read at once: a 120 KB head was answered 200).
Raw sockets on a real ``pacms serve``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
from pacms_server import serving

LIMIT = 16 * 1024
OK, REFUSED = b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with serving() as url:
        yield int(url.rpartition(":")[2])


def head(size: int, path: bytes = b"/healthz", extra: bytes = b"") -> bytes:
    """A GET's line and headers of exactly ``size`` bytes (a padding header makes it up)."""
    start = b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sX-Pad: " % (path, extra)
    return start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"


def answer(sock: socket.socket) -> bytes:
    """The status line of the next answer on ``sock`` (read to its end), or ``b""``."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    # a refusal closes the connection; an answer says its length
    sizes = [int(line[15:]) for line in lines if line.lower().startswith(b"content-length:")]
    while len(body) < (sizes or [0])[0]:
        body += sock.recv(65536)
    return lines[0]


def exchange(port: int, *parts: bytes, gap: float = 0.0) -> bytes:
    """Send ``parts`` (one ``sendall`` each, ``gap`` seconds apart) on a new connection; the
    answer's status line."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        for part in parts:
            try:
                sock.sendall(part)
            except (BrokenPipeError, ConnectionResetError):  # refused before all was sent
                break
            time.sleep(gap)
        return answer(sock)


@pytest.mark.parametrize("size", [1000, LIMIT - 100, LIMIT])
def test_a_head_within_16_kib_is_served(port: int, size: int) -> None:
    assert exchange(port, head(size)) == OK


@pytest.mark.parametrize("size", [LIMIT + 100, 40_000, 120_000, 1_000_000])
def test_a_larger_head_is_refused_sent_whole(port: int, size: int) -> None:
    assert exchange(port, head(size)) == REFUSED


def test_a_larger_head_is_refused_sent_in_pieces(port: int) -> None:
    data = head(LIMIT + 100)
    pieces = [data[i : i + 3000] for i in range(0, len(data), 3000)]
    # h11 alone took it: the piece that crossed the limit completed it
    assert exchange(port, *pieces, gap=0.05) == REFUSED


def test_a_large_body_behind_a_small_head_is_not_bounded_by_it(port: int) -> None:
    body = json.dumps(
        {
            "candidates": [{"text": "word " * 200_000}, {"text": "x"}],
            "query": "x",
            "budget_ratio": 1,
        }
    ).encode()
    request = (
        b"POST /select HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert exchange(port, request) == OK


def test_each_request_on_a_kept_alive_connection_has_the_bound_afresh(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        for size in (LIMIT, LIMIT, LIMIT + 100):
            sock.sendall(head(size))
            assert answer(sock) == (OK if size == LIMIT else REFUSED)
