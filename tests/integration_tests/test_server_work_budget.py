"""The per-request work budget of ``pacms serve`` (``--max-text-chars``), on a real server.

A request whose candidate texts and query together exceed the budget is refused with a 413
naming the field and the limit, fast and before anything is tokenized or embedded (the
embedding cache counts no miss); one within it is answered. The default budget takes what the
inspector and the docs send, and refuses a body that fits the body limit but not the budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
import httpx
from pacms_server import serving

from langchain_pacms.cli.main import build_parser
from langchain_pacms.server import create_app
from langchain_pacms.server.service import MAX_TEXT_CHARS

JSON = {"content-type": "application/json"}
QUERY = "Which port does the staging database use?"


@pytest.fixture(scope="module")
def small() -> Iterator[str]:
    with serving("--max-text-chars", "5000") as url:
        yield url


@pytest.fixture(scope="module")
def default() -> Iterator[str]:
    with serving() as url:
        yield url


def pool(chars: int, n: int) -> dict[str, Any]:
    """A request whose ``n`` distinct texts and query total exactly ``chars`` characters."""
    prose = "the staging database listens on port 6543 and the logs rotate daily; "
    room = chars - len(QUERY)
    sizes = [room // n + (1 if i < room % n else 0) for i in range(n)]
    texts = [
        (f"note {i}: " + prose * (size // len(prose) + 1))[:size] for i, size in enumerate(sizes)
    ]
    return {"candidates": [{"text": t} for t in texts], "query": QUERY, "budget_ratio": 0.1}


def misses(url: str) -> int:
    return int(httpx.get(f"{url}/healthz").json()["embedding_cache"]["misses"])


def test_over_the_budget_is_refused_before_any_work(small: str) -> None:
    assert httpx.get(f"{small}/healthz").json()["max_text_chars"] == 5000
    within = httpx.post(f"{small}/select", json=pool(5000, 20), headers=JSON, timeout=30)
    assert within.status_code == 200, within.text
    before = misses(small)
    for route in ("/select", "/select_debug"):
        over = httpx.post(f"{small}{route}", json=pool(5001, 20), headers=JSON, timeout=30)
        assert over.status_code == 413
        detail = over.json()["detail"]
        assert detail.startswith("candidates:") and "5001" in detail
        assert "5000" in detail and "max_text_chars" in detail
    assert misses(small) == before  # nothing was embedded


def test_the_query_counts_too(small: str) -> None:
    body = pool(5000, 1)
    body["query"] += "?"
    assert httpx.post(f"{small}/select", json=body, headers=JSON).status_code == 413


def test_the_default_budget_refuses_a_large_body_fast(default: str) -> None:
    body = pool(MAX_TEXT_CHARS + 1_000_000, 400)  # 5 MB: within the 8 MiB body limit
    before = misses(default)
    start = time.perf_counter()
    over = httpx.post(f"{default}/select", json=body, headers=JSON, timeout=60)
    took = time.perf_counter() - start
    assert over.status_code == 413 and "max_text_chars" in over.json()["detail"]
    assert took < 1.0, f"refusing took {took:.2f}s"  # selecting it would take seconds
    assert misses(default) == before


def test_the_default_budget_takes_what_the_inspector_and_the_docs_send(default: str) -> None:
    demo = httpx.get(f"{default}/demo").json()
    inspector = {"candidates": demo["candidates"], "query": demo["query"], "budget_tokens": 402}
    docs = {
        "candidates": [
            {"id": "s", "text": "You are a helpful agent.", "kind": "system", "mandatory": True},
            {"id": "a", "text": "The staging database listens on port 6543."},
            {"id": "b", "text": "Lunch was great today.", "tokens": 5, "position": 7},
        ],
        "query": QUERY,
        "budget_tokens": 20,
        "strategy": "pacms",
        "strategy_options": {"relevance_weight": 0.2},
    }
    for body in (inspector, docs, pool(1_000_000, 200)):
        answer = httpx.post(f"{default}/select_debug", json=body, headers=JSON, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["kept_ids"]


def test_the_option_and_its_default() -> None:
    assert build_parser().parse_args(["serve"]).max_text_chars == MAX_TEXT_CHARS
    assert build_parser().parse_args(["serve", "--max-text-chars", "10"]).max_text_chars == 10
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-text-chars", "0"])
    with pytest.raises(ValueError, match="max_text_chars must be a positive int"):
        create_app(max_text_chars=0)
