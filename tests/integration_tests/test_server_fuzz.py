"""The service never answers 5xx: a hypothesis fuzz of the request schema (2,000 bodies).

Each example posts ten bodies built from the schema with any field swapped for a hostile
value (huge or negative integers, huge floats, long words, deep nesting, wrong types), so the
200 examples send 2,000 requests through the whole app (guard, front, service).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_pacms.server import create_app

BATCH = 10
OPTIONS = ["cost_exponent", "lambda_mult", "k", "feedback_items", "relevance_weight", "fill"]
OPTIONS += ["similarity_threshold", "gain_floor", "guarantee", "contiguous", "bogus"]

hostile = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**53, 2**53 + 1, 2**62, 2**63, 2**64, -1, 0, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 5e-324, 0.5, 1e16]),
    st.text(max_size=12),
    st.integers(0, 20_000).map(lambda n: "w" * n),  # one long word
    st.booleans(),
    st.none(),
    st.recursive(
        st.none() | st.integers() | st.text(max_size=3),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=8,
    ),
)


def field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A good value nine times in ten, else a hostile one."""
    return st.integers(0, 9).flatmap(lambda i: hostile if i == 9 else good)


words = st.one_of(
    st.text("abc xyz", min_size=1, max_size=30),
    st.integers(1, 20_000).map(lambda n: "x" * n),
)
counts = st.one_of(st.integers(0, 50), st.sampled_from([2**52, 2**53]))
candidate = st.fixed_dictionaries(
    {"text": field(words)},
    optional={
        "id": field(st.sampled_from(["a", "b", "c", "d"])),
        "kind": field(st.sampled_from(["system", "turn", "tool", "memory", "document"])),
        "mandatory": field(st.booleans()),
        "tokens": field(counts),
        "position": field(counts),
    },
)
options = st.dictionaries(
    st.sampled_from(OPTIONS),
    st.one_of(st.floats(-5, 5), st.integers(-3, 20), st.sampled_from([None, "distinct"]), hostile),
    max_size=3,
)
budget = st.one_of(
    st.fixed_dictionaries({"budget_tokens": field(st.integers(1, 200))}),
    st.fixed_dictionaries({"budget_ratio": field(st.floats(0.01, 1))}),
    st.fixed_dictionaries({}, optional={"budget_tokens": hostile, "budget_ratio": hostile}),
)
body = st.tuples(
    budget,
    st.fixed_dictionaries(
        {"candidates": field(st.lists(candidate, max_size=6)), "query": field(words)},
        optional={
            "strategy": field(st.sampled_from(["pacms", "topk", "lastk", "mmr", "rag", "nope"])),
            "strategy_options": field(options),
            "relevant_ids": field(st.lists(st.sampled_from(["a", "b", "0", "1"]), max_size=2)),
        },
    ),
).map(lambda parts: json.dumps({**parts[0], **parts[1]}).encode())
nested = st.integers(1, 50_000).map(
    lambda d: (
        b'{"candidates": ' + b"[" * d + b"]" * d + b', "query": "q", "budget_tokens": 5, '
        b'"strategy_options": {"k": ' + b"[" * d + b"]" * d + b"}}"
    )
)
raw = st.integers(0, 9).flatmap(
    lambda i: nested if i == 8 else st.binary(max_size=64) if i == 9 else body
)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(max_candidates=50), base_url="http://127.0.0.1") as client:
        yield client


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies=st.lists(raw, min_size=BATCH, max_size=BATCH))
def test_no_request_body_gets_a_5xx(client: TestClient, bodies: list[bytes]) -> None:
    for i, data in enumerate(bodies):
        path = "/select_debug" if i % 2 else "/select"
        r = client.post(path, content=data, headers={"Content-Type": "application/json"})
        assert r.status_code < 500, (data[:300], r.text[:300])
        if r.status_code == 200:
            answer = r.json()
            assert 0 <= answer["tokens_kept"] <= answer["tokens_total"] <= 2**54
            assert answer["tokens_dropped"] == answer["tokens_total"] - answer["tokens_kept"]
        else:
            assert 400 <= r.status_code < 500 and r.json()["detail"]
