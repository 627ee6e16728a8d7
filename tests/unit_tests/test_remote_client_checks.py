"""RemoteSelector refuses, before sending anything, what the service would refuse or a local
selector raises for; and the bound it puts on an answer covers what the service writes.

No service listens here: whatever raises, raises before a request (a request would fall back).
"""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("httpx", reason="needs the 'server' extra")

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.remote import RemoteSelector, answer_limit, check_answer

NOBODY = "http://127.0.0.1:9"  # the discard port: nothing answers there
POOL = ["The staging database listens on port 6543.", "Lunch was great today.", "ok"]
QUERY = "Which port does the staging database use?"


@pytest.mark.parametrize(
    ("options", "rule"),
    [
        ({"session": "my agent"}, "1-64 letters, digits or '._:-'"),
        ({"session": "agent/1"}, "1-64 letters, digits or '._:-'"),
        ({"session": "x" * 65}, "1-64 letters, digits or '._:-'"),
        ({"session": ""}, "1-64 letters, digits or '._:-'"),
        ({"session": "agént"}, "1-64 letters, digits or '._:-'"),
        ({"token": "tökén"}, "visible ASCII"),
        ({"token": "a\r\nX-Evil: 1"}, "visible ASCII"),
        ({"token": ""}, "visible ASCII"),
        ({"token": " s3cret"}, "visible ASCII"),
        ({"token": 7}, "visible ASCII"),
    ],
)
def test_a_session_or_token_the_service_cannot_take_is_refused_at_construction(
    options: dict[str, object], rule: str
) -> None:
    with pytest.raises(ValueError, match=rule):
        RemoteSelector(NOBODY, **options)  # type: ignore[arg-type]


def test_sendable_sessions_and_tokens_are_taken() -> None:
    remote = RemoteSelector(NOBODY, session="agent-1.a_b:c", token="s3cret with-spaces/+=")
    assert remote.select(["a", "b"], "a", budget=1).fell_back  # nothing listens: sent, failed
    RemoteSelector(NOBODY, session="x" * 64, token="~")


@pytest.mark.parametrize(
    ("strategy", "options", "message"),
    [
        ("pacms", {"relevance_wieght": 0.3}, "unknown option 'relevance_wieght'"),
        ("mmr", {"lambda_mult": 5}, "lambda_mult must be in"),
        ("rag", {"k": 0}, "rag needs k >= 1"),
    ],
)
def test_a_strategy_known_here_is_checked_with_its_options_before_sending(
    strategy: str, options: dict[str, object], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises((ValueError, TypeError)):
        ContextSelector().select(POOL, QUERY, 12, strategy=strategy, **options)
    remote = RemoteSelector(NOBODY, timeout=5)
    with pytest.raises(ValueError, match=message):
        remote.select(POOL, QUERY, 12, strategy=strategy, **options)
    with pytest.raises(ValueError, match=message):
        RemoteSelector(NOBODY, strategy=strategy, strategy_options=options)
    assert not caplog.records  # raised at once: nothing was sent, nothing fell back


async def test_the_async_path_checks_the_same() -> None:
    with pytest.raises(ValueError, match="lambda_mult must be in"):
        await RemoteSelector(NOBODY).aselect(POOL, QUERY, 12, strategy="mmr", lambda_mult=5)


def test_a_strategy_only_the_service_knows_is_left_to_it() -> None:
    remote = RemoteSelector(NOBODY, strategy="served_elsewhere", strategy_options={"x": 1})
    assert remote.select(POOL, QUERY, 12).fell_back  # sent; nothing listens


def test_numbers_the_service_cannot_take_raise_before_sending() -> None:
    remote = RemoteSelector(NOBODY)
    with pytest.raises(ValueError, match="position 9007199254740993"):
        remote.select([Candidate("a", position=2**53 + 1), Candidate("b")], "a", budget=5)
    with pytest.raises(ValueError, match="tokens add up to"):
        remote.select([Candidate("a", tokens=2**52), Candidate("b", tokens=2**52 + 1)], "a", 5)


def test_a_remote_failure_is_not_called_an_embedding_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="langchain_pacms"):
        sel = RemoteSelector(NOBODY, timeout=0.5).select(POOL, QUERY, 12)
    assert sel.fell_back
    (warning,) = [r.getMessage() for r in caplog.records if "falling back" in r.getMessage()]
    assert warning.startswith("remote selection failed (ConnectError")
    assert "embedding" not in warning


def test_an_answer_that_keeps_nothing_is_taken() -> None:
    # lastk keeps nothing when the newest turn does not fit, rag when its top k do not
    cands = [Candidate("short", id="old"), Candidate("a much longer newest turn " * 5, id="new")]
    body = {
        "kept_ids": [],
        "pick_order": [],
        "strategy": "lastk",
        "fell_back": False,
        "error": None,
        "timings": {"total": 0.001},
        "info": {},
        "candidates": [{"id": c.id, "relevance": 0.0, "gain": None} for c in cands],
    }
    sel = check_answer(cands, [1, 30], 5, body)
    assert sel.kept_ids == () and sel.tokens_kept == 0 and not sel.fell_back


ID_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from('"\\\x00\x1f📄'),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(ID_TEXT, min_size=1, max_size=30, unique=True))
def test_the_answer_limit_covers_what_the_service_writes(ids: list[str]) -> None:
    service = pytest.importorskip("langchain_pacms.server.service")
    live = pytest.importorskip("langchain_pacms.server.live")
    payload = {
        "candidates": [{"id": cid, "text": f"text {i}"} for i, cid in enumerate(ids)],
        "query": "text",
        "budget_tokens": 10**6,
    }
    answer = service.Service(ContextSelector(), 2000, live.LiveSessions()).select_debug(
        json.dumps(payload).encode()
    )
    assert answer.status_code == 200
    assert len(answer.body) <= answer_limit(payload)


def test_emoji_ids_fit_the_answer_limit() -> None:
    service = pytest.importorskip("langchain_pacms.server.service")
    live = pytest.importorskip("langchain_pacms.server.live")
    payload = {
        "candidates": [{"id": "📄" * 100 + str(i), "text": f"text {i}"} for i in range(300)],
        "query": "text",
        "budget_tokens": 10**6,
    }
    answer = service.Service(ContextSelector(), 2000, live.LiveSessions()).select_debug(
        json.dumps(payload).encode()
    )
    assert len(json.loads(answer.body)["kept_ids"]) == 300
    assert len(answer.body) <= answer_limit(payload)
