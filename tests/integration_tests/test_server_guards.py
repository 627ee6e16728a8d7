"""Who may call the service and what a request may cost: Host allow-list, bearer token,
content type, bounded numbers, long words, the options /strategies reports, no CDN docs."""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
from fastapi.testclient import TestClient
from pacms_server import running

from langchain_pacms.remote import RemoteSelector
from langchain_pacms.server import create_app

POOL = [
    {"id": "s", "text": "You are a helpful agent.", "kind": "system", "mandatory": True},
    {"id": "a", "text": "The staging database listens on port 6543."},
    {"id": "b", "text": "Lunch was great today."},
]
BODY = {"candidates": POOL, "query": "Which port?", "budget_tokens": 20}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        yield client


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("127.0.0.1:8077", 200),
        ("localhost", 200),
        ("[::1]:8077", 200),
        ("LOCALHOST:1", 200),
        ("evil.example:8077", 400),
        ("127.0.0.1.nip.io", 400),
    ],
)
def test_only_allowed_host_names_are_answered(client: TestClient, host: str, status: int) -> None:
    for r in (
        client.get("/healthz", headers={"Host": host}),
        client.post("/select", json=BODY, headers={"Host": host}),
    ):
        assert r.status_code == status, r.text
        if status == 400:
            assert "Host" in r.json()["detail"]


def test_more_host_names_can_be_allowed() -> None:
    app = create_app(allowed_hosts=["pacms.internal"])
    with TestClient(app, base_url="http://pacms.internal") as named:
        assert named.get("/healthz").status_code == 200
    with TestClient(app, base_url="http://127.0.0.1") as loop:
        assert loop.get("/healthz").status_code == 400  # the list replaces the default
    with TestClient(create_app(allowed_hosts=["*"]), base_url="http://any.where") as anyone:
        assert anyone.get("/healthz").status_code == 200


def test_a_request_without_a_host_header_is_refused() -> None:
    with running(create_app()) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert b" 400 " in sock.recv(4096).split(b"\r\n")[0]


def test_a_token_is_required_on_every_request() -> None:
    app = create_app(token="s3cret")
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "s3cret"}):
            for r in (
                client.get("/", headers=headers),
                client.post("/select", json=BODY, headers=headers),
            ):
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        good = {"Authorization": "Bearer s3cret"}
        assert client.get("/healthz", headers=good).status_code == 200
        assert client.post("/select", json=BODY, headers=good).json()["kept_ids"]
    with running(app) as url:
        sel = RemoteSelector(url, token="s3cret").select(["port 6543", "lunch"], "port", budget=9)
        assert not sel.fell_back and "0" in sel.kept_ids
        sel = RemoteSelector(url).select(["port 6543", "lunch"], "port", budget=3)
        assert sel.fell_back and "401" in str(sel.error)
    with pytest.raises(ValueError, match="token"):
        create_app(token=" ")


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/json", 200),
        ("application/json; charset=utf-8", 200),
        ("text/plain", 415),
        ("application/x-www-form-urlencoded", 415),
        (None, 415),
    ],
)
def test_bodies_must_be_sent_as_json(
    client: TestClient, content_type: str | None, status: int
) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = client.post("/select", content=json.dumps(BODY).encode(), headers=headers)
    assert r.status_code == status, r.text
    if status == 415:
        assert "application/json" in r.json()["detail"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"candidates": [{"text": "a", "tokens": 2**63}]}, "candidates[0].tokens"),
        ({"candidates": [{"text": "a", "position": 2**64}]}, "candidates[0].position"),
        ({"candidates": [{"text": "a", "position": -(2**53) - 1}]}, "candidates[0].position"),
        ({"candidates": [{"text": "a", "tokens": 2**53 + 1}]}, "candidates[0].tokens"),
        ({"budget_tokens": 2**53 + 1}, "budget_tokens"),
        ({"strategy_options": {"cost_exponent": 1e308}}, "cost_exponent"),
        ({"strategy_options": {"cost_exponent": 5}}, "cost_exponent"),
        ({"strategy_options": {"feedback_items": 2**63}}, "feedback_items"),
        ({"strategy_options": {"fill": [[[]]]}}, "fill"),
        (
            {"candidates": [{"text": t, "tokens": 2**52} for t in "abc"], "budget_ratio": 0.5},
            "over 2**53",
        ),
    ],
)
def test_numbers_out_of_range_are_422(client: TestClient, change: dict, needle: str) -> None:
    body = {**BODY, **change}
    if "budget_ratio" in change:
        body.pop("budget_tokens")
    for path in ("/select", "/select_debug"):
        r = client.post(path, json=body)
        assert r.status_code == 422, r.text
        assert needle in r.json()["detail"]


def test_the_largest_numbers_allowed_add_up_exactly(client: TestClient) -> None:
    pool = [{"text": "a", "tokens": 2**52}, {"text": "b", "tokens": 2**52, "position": 2**53}]
    r = client.post("/select", json={"candidates": pool, "query": "a", "budget_ratio": 0.5})
    body = r.json()
    assert r.status_code == 200 and body["tokens_total"] == 2**53
    assert body["tokens_kept"] + body["tokens_dropped"] == 2**53


def test_strategies_report_what_the_service_runs(client: TestClient) -> None:
    listed = {s["name"]: s["options"] for s in client.get("/strategies").json()["strategies"]}
    pacms = listed["pacms"]
    assert (pacms["similarity_threshold"], pacms["min_gain"], pacms["relevance_feedback"]) == (
        0.85,
        0.01,
        0.6,
    )
    assert listed["mmr"] == {"lambda_mult": 0.5}
    assert listed["lastk"] == {"contiguous": True}


def test_docs_need_no_cdn(client: TestClient) -> None:
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
    assert "SelectRequest" in client.get("/openapi.json").json()["components"]["schemas"]


def _service_seconds(client: TestClient, text: str) -> float:
    body = {"candidates": [{"text": text}, {"text": "short"}], "query": "q", "budget_tokens": 5}
    started = time.process_time()
    r = client.post("/select", json=body)
    assert r.status_code == 200, r.text
    return time.process_time() - started


def test_one_long_word_costs_no_more_than_prose_of_its_length() -> None:
    rng = random.Random(0)
    size = 1_500_000
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(size))
    prose = " ".join(rng.choice(["port", "staging", "database", "the", "on"]) for _ in range(size))
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        one_word = _service_seconds(client, word)
        ordinary = _service_seconds(client, prose[:size])
    assert one_word <= 1.25 * ordinary + 0.05, (one_word, ordinary)
