"""Live mode over HTTP: sessions keep what the service served, and stream it as server-sent events.

A real uvicorn on loopback: a request naming a session (``X-Pacms-Session``, which
``RemoteSelector(session=...)`` sends) is kept under it; ``GET /sessions/{id}/events`` replays
the kept records and then each new one; a reconnect resumes after ``Last-Event-ID``; streams are
capped; the Host and token checks hold on the new routes; ``watch=`` follows a JSONL log. A
``Last-Event-ID`` beyond the session's newest record (numbers went back: the service restarted)
replays the session from its start.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")

import httpx
from pacms_server import running
from script_runs import REPO, run_python

from langchain_pacms import Candidate, ContextSelector
from langchain_pacms.cli.main import build_parser
from langchain_pacms.messages import SelectionLog
from langchain_pacms.remote import RemoteSelector
from langchain_pacms.server import create_app
from langchain_pacms.server.live import LiveSessions

BODY = {
    "candidates": [
        {"id": "s", "text": "You are terse.", "kind": "system", "mandatory": True},
        {"id": "a", "text": "The staging database listens on port 6543."},
        {"id": "b", "text": "Lunch was great today."},
    ],
    "query": "Which port does staging use?",
    "budget_tokens": 16,
}


def events(url: str, n: int, headers: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """The first ``n`` selection events of a stream (``id`` and decoded ``data``)."""
    with httpx.stream("GET", url, headers=headers, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event: dict[str, Any] = {}
        for line in response.iter_lines():
            if line.startswith("id: "):
                event["id"] = int(line[4:])
            elif line.startswith("data: "):
                event["data"] = json.loads(line[6:])
            elif not line and "data" in event:
                yield event
                event = {}
                n -= 1
                if n == 0:
                    return


def test_a_session_keeps_what_was_served_and_streams_it() -> None:
    with running(create_app()) as url:
        answers = []
        for budget in (16, 9):
            r = httpx.post(
                f"{url}/select_debug",
                json={**BODY, "budget_tokens": budget},
                headers={"X-Pacms-Session": "agent-1"},
            )
            answers.append(r.json())
        httpx.post(f"{url}/select", json=BODY)  # no session: not kept
        listed = httpx.get(f"{url}/sessions").json()["sessions"]
        assert [(s["id"], s["records"]) for s in listed] == [("agent-1", 2)]

        got = list(events(f"{url}/sessions/agent-1/events", 2))
        for event, answer in zip(got, answers):
            record = event["data"]
            assert record["source"] == "service" and record["query"] == BODY["query"]
            kept = [v["id"] for v in record["candidates"] if v["kept"]]
            assert kept == answer["kept_ids"] and record["budget"] == answer["budget"]
            assert record["texts"]["a"] == BODY["candidates"][1]["text"]

        # a reconnect resumes after the last event it saw, and new selections follow
        first = got[0]["id"]
        resumed = events(f"{url}/sessions/agent-1/events", 2, {"Last-Event-ID": str(first)})
        assert next(resumed)["id"] == got[1]["id"]
        httpx.post(f"{url}/select", json=BODY, headers={"X-Pacms-Session": "agent-1"})
        assert next(resumed)["id"] > got[1]["id"]
        resumed.close()


def test_remote_selector_names_its_session() -> None:
    with running(create_app()) as url:
        remote = RemoteSelector(url, session="remote-7", timeout=10)
        selection = remote.select(["old note", "the port is 6543", "port?"], "port?", budget=9)
        assert not selection.fell_back
        (event,) = events(f"{url}/sessions/remote-7/events", 1)
        assert [v["id"] for v in event["data"]["candidates"] if v["kept"]] == list(
            selection.kept_ids
        )
        remote.close()


@pytest.mark.parametrize("session", [b"", b"a b", b"x" * 65, b"../etc", "é".encode()])
def test_a_bad_session_id_is_refused(session: bytes) -> None:
    with running(create_app()) as url:
        r = httpx.post(f"{url}/select", json=BODY, headers={"X-Pacms-Session": session})
        assert r.status_code == 400 and r.json()["detail"].startswith("X-Pacms-Session:")
        assert httpx.get(f"{url}/sessions").json()["sessions"] == []


@pytest.mark.parametrize("route", ["/select", "/select_debug"])
@pytest.mark.parametrize("session", [b"\xe9", b"agent-\xff", b"\x80\x80"])
def test_a_session_header_that_is_not_utf8_is_a_400(route: str, session: bytes) -> None:
    with running(create_app()) as url:
        r = httpx.post(f"{url}{route}", json=BODY, headers={"X-Pacms-Session": session})
        assert r.status_code == 400 and r.json()["detail"].startswith("X-Pacms-Session:")
        assert httpx.get(f"{url}/sessions").json()["sessions"] == []


def post_budgets(url: str, *budgets: int) -> None:
    for budget in budgets:
        httpx.post(
            f"{url}/select",
            json={**BODY, "budget_tokens": budget},
            headers={"X-Pacms-Session": "agent"},
        )


def test_a_page_back_late_after_a_restart_gets_every_record_of_the_new_service() -> None:
    with running(create_app()) as url:
        post_budgets(url, 16, 9)
        seen = list(events(f"{url}/sessions/agent/events", 2))[-1]["id"]
    with running(create_app()) as url:  # restarted; six selections before the page is back
        post_budgets(url, 10, 11, 12, 13, 14, 15)
        resumed = list(events(f"{url}/sessions/agent/events", 6, {"Last-Event-ID": str(seen)}))
        assert [e["data"]["budget"] for e in resumed] == [10, 11, 12, 13, 14, 15]
        assert resumed[0]["id"] > seen


def test_a_last_event_id_beyond_the_newest_record_replays_the_session() -> None:
    # a page's stream saw record 5 of another numbering (a Redis that lost its counter, a clock
    # set back): this one numbers from 1
    with running(create_app(live=LiveSessions(start=0))) as url:
        after_restart = events(f"{url}/sessions/agent/events", 3, {"Last-Event-ID": "5"})
        post_budgets(url, 16, 9)
        # an open stream gets the new records although their numbers are below its last
        assert [e["id"] for e in itertools.islice(after_restart, 2)] == [1, 2]
        # as does one that resumes after the restart
        resumed = list(events(f"{url}/sessions/agent/events", 2, {"Last-Event-ID": "5"}))
        assert [(e["id"], e["data"]["budget"]) for e in resumed] == [(1, 16), (2, 9)]
        # once it is past them, numbers go on as usual
        post_budgets(url, 12, 13, 14, 15)
        assert [e["id"] for e in itertools.islice(after_restart, 1)] == [3]
        after_restart.close()
        later = list(events(f"{url}/sessions/agent/events", 1, {"Last-Event-ID": "5"}))
        assert [(e["id"], e["data"]["budget"]) for e in later] == [(6, 15)]


def test_streams_are_capped_and_freed() -> None:
    with running(create_app(live=LiveSessions(max_clients=1))) as url:
        stream = f"{url}/sessions/s/events"

        def status() -> int:
            with httpx.stream("GET", stream, timeout=10) as response:
                return response.status_code

        with httpx.stream("GET", stream, timeout=10) as first:
            lines = first.iter_lines()
            assert first.status_code == 200 and next(lines) == "retry: 1000"
            refused = httpx.get(f"{url}/sessions/other/events", timeout=10)
            assert refused.status_code == 503 and "streams" in refused.json()["detail"]
            assert status() == 503
        # the server notices the closed stream at once (or at its next write) and frees it
        for _ in range(100):
            if status() == 200:
                break
            time.sleep(0.1)
        assert status() == 200


def test_the_live_routes_keep_the_host_and_token_checks() -> None:
    with running(create_app(token="s3cret")) as url:
        for path in ("/sessions", "/sessions/a/events"):
            assert httpx.get(f"{url}{path}").status_code == 401
            bad_host = {"Host": "evil.example", "Authorization": "Bearer s3cret"}
            assert httpx.get(f"{url}{path}", headers=bad_host).status_code == 400
        ok = httpx.get(f"{url}/sessions", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


def test_watch_follows_a_hook_log(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "selections.jsonl"
    log, selector = SelectionLog(path), ContextSelector()
    texts = ["the port is 6543", "lunch was fine", "what port?"]
    with running(create_app(watch=path)) as url:
        assert httpx.get(f"{url}/sessions").json()["watching"] == str(path)
        stream = events(f"{url}/sessions/watch/events", 2)
        log.write(selector.select(texts, "port", budget=6), query="port", source="hook")
        first = next(stream)["data"]
        assert first["source"] == "hook" and first["budget"] == 6
        record = log.record(selector.select(texts, "port", budget=9), query="p", source="h")
        line = json.dumps(record) + "\n"
        with path.open("a") as handle:  # a line that is not a record, then half of one
            handle.write('{"not": "a record"}\n' + line[:40])
            handle.flush()
            time.sleep(0.5)  # the service reads the half line meanwhile
            handle.write(line[40:])
        assert next(stream)["data"] == record  # the stray JSON skipped, the halves joined
        stream.close()


def test_a_watched_record_with_a_file_name_that_is_not_utf8_reaches_the_page(
    tmp_path: Path,
) -> None:
    path, selector = tmp_path / "sel.jsonl", ContextSelector()
    log, name = SelectionLog(path), "caf\udce9.py"  # os.listdir's str of b"caf\xe9.py"
    for text in ("the port is 6543", name, "lunch was fine"):
        kept = selector.select([Candidate(text, text)], "port", budget=20)
        log.write(kept, query="port", source="hook")
    with running(create_app(watch=path)) as url:
        got = [e["data"] for e in events(f"{url}/sessions/watch/events", 3)]
    assert [r["candidates"][0]["id"] for r in got] == ["the port is 6543", name, "lunch was fine"]


def test_a_watched_path_that_is_not_utf8_is_listed(tmp_path: Path) -> None:
    path = Path(os.fsdecode(bytes(tmp_path) + b"/sel\xff.jsonl"))
    with running(create_app(watch=path)) as url:
        listed = httpx.get(f"{url}/sessions")
        assert listed.status_code == 200
        assert listed.json()["watching"] == str(tmp_path) + "/sel\ufffd.jsonl"


def test_pacms_serve_takes_watch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    from langchain_pacms.cli.main import main
    from langchain_pacms.server.app import app_from_env

    seen: dict[str, Any] = {}

    def run(app: Any, **kw: Any) -> None:
        # `pacms serve` hands uvicorn a factory; build the app while its options are set
        seen.update(kw, app=app_from_env() if kw.get("factory") else app)

    monkeypatch.setattr(uvicorn, "run", run)
    log = tmp_path / "sel.jsonl"
    assert build_parser().parse_args(["serve", "--watch", str(log)]).watch == str(log)
    assert main(["serve", "--watch", str(log), "--port", "9999"]) == 0
    assert seen["timeout_graceful_shutdown"] == 3  # open event streams do not hold up an exit
    SelectionLog(log).write(ContextSelector().select(["a"], "a", budget=3), query="a", source="x")
    with running(seen["app"]) as url:
        assert [s["id"] for s in httpx.get(f"{url}/sessions").json()["sessions"]] == ["watch"]


def test_the_live_example_runs_offline() -> None:
    out = run_python(REPO / "examples" / "live_inspector.py", timeout=120)
    assert "inspector following this run: http://127.0.0.1:" in out and "?follow=live-demo" in out
    facts = [line.split()[-1] for line in out.splitlines() if "the fact about port" in line]
    assert facts[0] == "kept" and "dropped" in facts and facts[-1] == "kept"
    answer = [line for line in out.splitlines() if line.startswith("assistant:")][-1]
    assert "port 6543" in answer and "FELL BACK" not in out
