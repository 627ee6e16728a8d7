"""What a soak of the service found: a header that leaked stream slots, a loose Host check,
an answer check that took a number for an id, refusals that quoted the request back, and no
headers against sniffing or framing. A real uvicorn on loopback where the bytes matter."""

from __future__ import annotations

import json
import socket
import time

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
from fastapi.testclient import TestClient
from pacms_server import running

from langchain_pacms import Candidate
from langchain_pacms.remote import RemoteAnswerError, check_answer
from langchain_pacms.server import create_app

BODY = {
    "candidates": [{"id": "a", "text": "The staging database listens on port 6543."}],
    "query": "Which port?",
    "budget_tokens": 20,
}


def _status(port: int, request: bytes) -> str:
    """The status line a raw request gets (the stream's body is not read)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        got = b""
        while b"\r\n" not in got:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
    return got.split(b"\r\n")[0].decode()


def test_a_last_event_id_of_other_digits_neither_fails_nor_keeps_a_stream_slot() -> None:
    # "²" (latin-1 0xb2) is a digit to str.isdigit but not to int: each such request was a
    # 500 after its stream slot was taken, and 16 of them closed live mode until a restart
    app = create_app()
    with running(app) as url:
        port = int(url.rsplit(":", 1)[1])
        head = b"GET /sessions/abc/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for _ in range(20):
            assert " 200 " in _status(port, head + b"Last-Event-ID: \xb2\r\n\r\n")
        time.sleep(1.5)  # the streams the clients left close
        assert " 200 " in _status(port, head + b"\r\n")


@pytest.mark.parametrize(
    ("host", "status"),
    [("[::1]", 200), ("[::1]:8077", 200), ("[::1]evil.example", 400), ("[::1]:80x", 400)],
)
def test_a_bracketed_host_is_the_loopback_only_when_nothing_but_a_port_follows(
    host: str, status: int
) -> None:
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        assert client.get("/healthz", headers={"Host": host}).status_code == status


def test_a_verdict_id_that_is_not_a_string_is_a_malformed_answer() -> None:
    cands = [Candidate("port 6543", id="0"), Candidate("lunch", id="1")]
    answer = {
        "kept_ids": ["0"],
        "pick_order": ["0"],
        "strategy": "pacms",
        "candidates": [{"id": 0, "relevance": 0.9}, {"id": "1", "relevance": 0.1}],
    }
    with pytest.raises(RemoteAnswerError, match="id is not a string"):
        check_answer(cands, [2, 1], 10, answer)


def test_a_refusal_does_not_quote_a_huge_request_back() -> None:
    options = {f"option_{i}": i for i in range(20_000)}
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        request = {**BODY, "strategy": "pacms", "strategy_options": options}
        r = client.post("/select", json=request)
    assert r.status_code == 422
    assert len(r.content) < 10_000 < len(json.dumps(request))


def test_every_answer_forbids_sniffing_and_framing() -> None:
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        for r in (
            client.get("/"),
            client.get("/healthz"),
            client.post("/select", json=BODY),
            client.get("/healthz", headers={"Host": "evil.example"}),  # a refusal too
        ):
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["x-frame-options"] == "DENY"
            assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
