"""RemoteSelector against a real service picks what the local selector picks, where it used to
fall back: lone surrogates in texts, query and ids; answers that legitimately keep nothing;
inputs the local selector takes (a budget over 2**53, a negative position, the id ""); ids whose
answer is larger than the old bound allowed. A caller's mistake raises, as locally."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
from pacms_server import running

import langchain_pacms.core.registry as registry
import langchain_pacms.remote as remote_module
from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.core import available_strategies, get_strategy, register_strategy
from langchain_pacms.remote import RemoteRequestError, RemoteSelector
from langchain_pacms.server import create_app

POOL = ["The staging database listens on port 6543.", "Lunch was great today.", "ok"]
QUERY = "Which port does the staging database use?"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running(create_app()) as base:
        yield base


def same(remote: RemoteSelector, candidates: list, query: str, budget: int, **options) -> None:
    """Remote and local pick alike, sync and strict, without falling back."""
    local = ContextSelector().select(candidates, query, budget, **options)
    sel = remote.select(candidates, query, budget, **options)
    assert not sel.fell_back and sel.error is None
    assert sel.kept_ids == local.kept_ids and sel.pick_order == local.pick_order
    assert sel.relevance == pytest.approx(dict(local.relevance))
    strict = RemoteSelector(remote.url, timeout=remote.timeout, strict=True)
    assert strict.select(candidates, query, budget, **options).kept_ids == local.kept_ids


async def test_lone_surrogates_are_sent_and_picked_as_locally(url: str) -> None:
    listing = "$ ls\nreport-\udcff.txt\nnotes-\udc80\udcfe.md"  # os.listdir of non-UTF-8 names
    remote = RemoteSelector(url, timeout=5)
    same(remote, [POOL[0], listing, POOL[1]], QUERY, 12)
    same(remote, [*POOL, listing], "which port? \udcff", 12)
    ids = [Candidate(text, id=f"file-\udcff{i}") for i, text in enumerate([*POOL, listing])]
    same(remote, ids, QUERY, 12, relevant_ids=["file-\udcff1"])
    sel = await remote.aselect(ids, QUERY, 12)
    assert not sel.fell_back and sel.kept_ids == ContextSelector().select(ids, QUERY, 12).kept_ids


@pytest.mark.parametrize(
    ("strategy", "newest"),
    [("lastk", 1), ("rag", 4)],  # lastk: the newest turn does not fit; rag: its top k do not
)
def test_an_answer_that_keeps_nothing_is_what_the_local_selector_keeps(
    url: str, strategy: str, newest: int
) -> None:
    cands = [Candidate("short", id="old")] + [
        Candidate("a much longer newest turn " * 5, id=f"new{i}") for i in range(newest)
    ]
    query = "short" if strategy == "lastk" else "longer newest turn"
    assert ContextSelector().select(cands, query, 5, strategy=strategy).kept_ids == ()
    same(RemoteSelector(url, timeout=5), cands, query, 5, strategy=strategy)


@pytest.mark.parametrize(
    ("candidates", "budget"),
    [
        (POOL, 2**60),
        ([Candidate("a", position=-1), Candidate("b c")], 50),
        ([Candidate("a", id=""), Candidate("b c")], 50),
        ([Candidate(f"text {i}", id="📄" * 100 + str(i)) for i in range(300)], 10**6),
    ],
    ids=["budget over 2**53", "negative position", "empty id", "emoji ids"],
)
def test_what_the_local_selector_takes_the_service_takes(
    url: str, candidates: list, budget: int
) -> None:
    same(RemoteSelector(url, timeout=10), candidates, "a text", budget)


@pytest.mark.parametrize(
    ("where", "options", "message"),
    [
        ("call", {"strategy": "pacmss"}, "unknown strategy 'pacmss'"),
        ("selector", {"strategy": "pacmss"}, "unknown strategy 'pacmss'"),
        ("call", {"relevance_wieght": 0.3}, "unknown option 'relevance_wieght'"),
        ("call", {"relevance_weight": 2.0}, "relevance_weight"),
    ],
)
async def test_a_strategy_or_option_the_service_refuses_raises_as_locally(
    url: str, where: str, options: dict, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    # not checked before sending: a strategy this process does not know, or options for the
    # service's default strategy (not named); the service's refusal raises
    with pytest.raises((ValueError, TypeError)):
        ContextSelector().select(POOL, QUERY, 12, **options)
    if where == "selector":
        remote = RemoteSelector(url, timeout=5, strategy=options["strategy"])
        options = {}
    else:
        remote = RemoteSelector(url, timeout=5)
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        with pytest.raises(RemoteRequestError, match=message):
            remote.select(POOL, QUERY, 12, **options)
        with pytest.raises(ValueError, match=message):
            await remote.aselect(POOL, QUERY, 12, **options)
    assert not caplog.records  # raised: no fallback, no warning


def test_a_service_failure_is_named_as_such(caplog: pytest.LogCaptureFixture) -> None:
    small = create_app(max_candidates=1)
    with running(small) as base, caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        sel = RemoteSelector(base, timeout=5).select(POOL, QUERY, 12)
    assert sel.fell_back and "max_candidates" in str(sel.error)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("remote selection failed (RuntimeError: service answered 422")


def test_ids_that_meet_once_their_surrogates_are_replaced_stay_apart(url: str) -> None:
    # before the fix: "x\ud800", "x\udfff" and "x\ufffd" all went out as "x\ufffd"; the service
    # refused the duplicate ids (422) and the selection fell back to recency
    texts = ["The staging database listens on port 6543.", "Lunch was great today.", "port?"]
    ids = ["x\ud800", "x\udfff", "x\ufffd"]
    cands = [Candidate(t, id=i, mandatory=n == 2) for n, (t, i) in enumerate(zip(texts, ids))]
    same(RemoteSelector(url, timeout=5), cands, QUERY, 14, relevant_ids=["x\udfff"])


def test_a_service_only_strategy_refusing_a_value_raises(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before the fix: the strategy's ValueError became a 422 without the field it refuses, and
    # the client fell back to recency
    def non_negative(problem, *, n: int = 0):
        if n < 0:
            raise ValueError(f"n must be a non-negative int, got {n}")
        return get_strategy("topk")(problem)

    known_here = list(available_strategies())
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # undone after
    register_strategy("non_negative", non_negative)
    monkeypatch.setattr(remote_module, "available_strategies", lambda: known_here)
    remote = RemoteSelector(url, timeout=5)
    with pytest.raises(RemoteRequestError, match="n must be a non-negative int"):
        remote.select(POOL, QUERY, 12, strategy="non_negative", n=-1)
    assert not remote.select(POOL, QUERY, 12, strategy="non_negative", n=1).fell_back
