from __future__ import annotations

import concurrent.futures
import gc
import json
import socket
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
import httpx
from pacms_server import running

from langchain_pacms import ContextSelector
from langchain_pacms.demo import load_demo_session
from langchain_pacms.server import create_app

POOL = [
    {"id": "s", "text": "You are a helpful agent.", "kind": "system", "mandatory": True},
    {"id": "a", "text": "The staging database listens on port 6543.", "kind": "turn"},
    {"id": "b", "text": "Lunch was great today.", "kind": "turn"},
    {"id": "c", "text": "CI is flaky again on the integration job.", "kind": "tool"},
]
QUERY = "Which port does the staging database use?"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = create_app(max_candidates=300, max_body_bytes=200_000, body_timeout=1.0)
    with running(app) as base:
        yield base


def post(url: str, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=5)


def test_select_matches_in_process_selector(url: str) -> None:
    r = post(url, "/select", {"candidates": POOL, "query": QUERY, "budget_tokens": 20})
    assert r.status_code == 200
    local = ContextSelector().select(
        [__import__("langchain_pacms").Candidate(**c) for c in POOL], QUERY, budget=20
    )
    body = r.json()
    assert body["kept_ids"] == list(local.kept_ids)
    assert "a" in body["kept_ids"] and "s" in body["kept_ids"]
    assert body["tokens_kept"] <= 20 and body["fell_back"] is False
    assert body["tokens_total"] == body["tokens_kept"] + body["tokens_dropped"]


def test_select_debug_has_every_verdict(url: str) -> None:
    r = post(
        url,
        "/select_debug",
        {"candidates": POOL, "query": QUERY, "budget_ratio": 0.5, "strategy": "topk"},
    )
    body = r.json()
    assert r.status_code == 200 and body["strategy"] == "topk"
    assert [v["id"] for v in body["candidates"]] == ["s", "a", "b", "c"]
    kept = {v["id"] for v in body["candidates"] if v["kept"]}
    assert kept == set(body["kept_ids"])
    assert all(v["pick_rank"] is None for v in body["candidates"] if not v["kept"])
    assert max(body["candidates"], key=lambda v: v["relevance"])["id"] == "a"


def test_healthz_strategies_openapi_page(url: str) -> None:
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    names = [s["name"] for s in httpx.get(f"{url}/strategies").json()["strategies"]]
    assert {"pacms", "topk", "lastk", "mmr", "rag"} <= set(names)
    mmr = next(s for s in httpx.get(f"{url}/strategies").json()["strategies"] if s["name"] == "mmr")
    assert mmr["options"] == {"lambda_mult": 0.5}
    openapi = httpx.get(f"{url}/openapi.json").json()
    schema = openapi["components"]["schemas"]
    for model in ("SelectRequest", "CandidateIn"):
        for name, props in schema[model]["properties"].items():
            assert props.get("description"), (model, name)
    for path in ("/select", "/select_debug"):
        body = openapi["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"]["$ref"] == "#/components/schemas/SelectRequest"
        assert "200" in openapi["paths"][path]["post"]["responses"]
    page = httpx.get(f"{url}/")
    assert page.status_code == 200 and "pacms inspector" in page.text
    assert httpx.get(f"{url}/static/inspector.js").status_code == 200
    demo = httpx.get(f"{url}/demo").json()
    assert len(demo["candidates"]) == len(load_demo_session().candidates)


BAD = [
    ("missing query", {"candidates": POOL, "budget_tokens": 5}, "query"),
    ("blank query", {"candidates": POOL, "query": "  ", "budget_tokens": 5}, "blank"),
    ("negative budget", {"candidates": POOL, "query": QUERY, "budget_tokens": -3}, "budget_tokens"),
    ("zero ratio", {"candidates": POOL, "query": QUERY, "budget_ratio": 0}, "budget_ratio"),
    ("string budget", {"candidates": POOL, "query": QUERY, "budget_tokens": "9"}, "budget_tokens"),
    (
        "both budgets",
        {"candidates": POOL, "query": QUERY, "budget_tokens": 5, "budget_ratio": 0.5},
        "exactly one",
    ),
    ("neither budget", {"candidates": POOL, "query": QUERY}, "exactly one"),
    (
        "unknown strategy",
        {"candidates": POOL, "query": QUERY, "budget_tokens": 5, "strategy": "nope"},
        "strategy",
    ),
    (
        "bad option",
        {
            "candidates": POOL,
            "query": QUERY,
            "budget_tokens": 5,
            "strategy": "mmr",
            "strategy_options": {"lambda_mult": 3},
        },
        "lambda_mult",
    ),
    (
        "unknown option",
        {"candidates": POOL, "query": QUERY, "budget_tokens": 5, "strategy_options": {"bogus": 1}},
        "bogus",
    ),
    (
        "duplicate ids",
        {"candidates": [POOL[1], POOL[1]], "query": QUERY, "budget_tokens": 5},
        "candidates[1].id",
    ),
    (
        "unknown relevant id",
        {"candidates": POOL, "query": QUERY, "budget_tokens": 5, "relevant_ids": ["nope"]},
        "relevant_ids",
    ),
    (
        "bad kind",
        {"candidates": [{"text": "x", "kind": "blob"}], "query": QUERY, "budget_tokens": 5},
        "candidates[0].kind",
    ),
    ("unknown field", {"candidates": POOL, "query": QUERY, "budget_tokens": 5, "x": 1}, "x"),
    (
        "too many",
        {"candidates": [{"text": f"t{i}"} for i in range(301)], "query": QUERY, "budget_tokens": 5},
        "max_candidates",
    ),
]


@pytest.mark.parametrize(("case", "body", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_4xx_naming_the_field(url: str, case: str, body: dict, needle: str) -> None:
    for path in ("/select", "/select_debug"):
        r = post(url, path, body)
        assert 400 <= r.status_code < 500, (case, r.status_code, r.text)
        assert needle in r.json()["detail"], (case, r.json())
        assert r.json()["errors"], (case, r.json())  # each field at fault (duplicate ids had none)


def test_fastapi_routes_answer_as_the_front_does(url: str) -> None:
    """The front answers the selection routes itself; FastAPI's own routes give the same."""
    from fastapi.testclient import TestClient

    inner = TestClient(create_app(max_candidates=300).fastapi)
    for path, body in (
        ("/select", {"candidates": POOL, "query": QUERY, "budget_tokens": 20}),
        (
            "/select_debug",
            {"candidates": POOL, "query": QUERY, "budget_ratio": 0.5, "strategy": "mmr"},
        ),
        ("/select", {"candidates": POOL, "query": QUERY}),
    ):
        front, direct = post(url, path, body), inner.post(path, json=body)
        assert front.status_code == direct.status_code
        a, b = front.json(), direct.json()
        a.pop("timings", None), b.pop("timings", None)
        assert a == b, path


def test_accepted_options_do_not_let_bad_ones_through(url: str) -> None:
    body = {"candidates": POOL, "query": QUERY, "budget_tokens": 20, "strategy": "mmr"}
    for _ in range(2):  # the second time the accepted options are remembered
        ok = post(url, "/select", {**body, "strategy_options": {"lambda_mult": 0.7}})
        assert ok.status_code == 200, ok.text
        bad = post(url, "/select", {**body, "strategy_options": {"lambda_mult": 7}})
        assert bad.status_code == 422 and "lambda_mult" in bad.json()["detail"]


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"",
        b'{"candidates": [], "query": "q", "budget_ratio": NaN}',
        b'{"candidates": [], "query": "q", "budget_tokens": Infinity}',
        b"[1, 2]",
    ],
)
def test_malformed_or_non_finite_json_is_4xx(url: str, raw: bytes) -> None:
    r = httpx.post(f"{url}/select", content=raw, headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["detail"]


def test_oversize_body_is_413_declared_and_chunked(url: str) -> None:
    big = {"candidates": [{"text": "x" * 300_000}], "query": "q", "budget_tokens": 5}
    r = post(url, "/select", big)
    assert r.status_code == 413 and "max_body_bytes" in r.json()["detail"]

    def chunks():
        data = json.dumps(big).encode()
        for i in range(0, len(data), 50_000):
            yield data[i : i + 50_000]

    r = httpx.post(f"{url}/select", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_stalled_body_times_out_instead_of_hanging(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            b"POST /select HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"cand'
        )
        started = time.monotonic()
        reply = sock.recv(4096)
        assert b" 408 " in reply.split(b"\r\n")[0]
        assert time.monotonic() - started < 4


def test_concurrent_requests_agree_with_sequential(url: str) -> None:
    session = load_demo_session()
    cands = [
        {"id": c.id, "text": c.text, "kind": c.kind, "mandatory": c.mandatory}
        for c in session.candidates
    ]
    bodies = [
        {"candidates": cands, "query": session.query, "budget_tokens": 300 + 40 * i, "strategy": s}
        for i, s in enumerate(["pacms", "topk", "mmr", "lastk"] * 4)
    ]
    expected = [post(url, "/select", b).json()["kept_ids"] for b in bodies]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda b: post(url, "/select", b).json()["kept_ids"], bodies))
    assert got == expected


def test_serving_freezes_the_startup_heap_until_shutdown() -> None:
    from fastapi.testclient import TestClient

    before = gc.get_freeze_count()
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:  # runs the lifespan
        assert gc.get_freeze_count() > before + 10_000  # modules, tokenizer, warm selector
        assert client.get("/healthz").json()["status"] == "ok"
        r = client.post("/select", json={"candidates": POOL, "query": QUERY, "budget_tokens": 20})
        assert r.status_code == 200 and "a" in r.json()["kept_ids"]
    assert gc.get_freeze_count() == 0


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_body_bytes"):
        create_app(max_body_bytes=-1)
    with pytest.raises(ValueError, match="body_timeout"):
        create_app(body_timeout=float("nan"))
