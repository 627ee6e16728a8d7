"""RemoteSelector checks every answer: a fake service on loopback answers adversarially.

Whatever the service answers (unknown ids, none, all, a mandatory id missing, a huge body,
wrong types, garbage, errors), the selection keeps only sent ids, every mandatory one, fits the
budget unless it says ``fell_back`` (or keeps only the mandatory part), and the hook never sends
an empty message list; a service trickling its answer cannot hold ``select`` past its timeout.
An answer that keeps nothing is taken (a strategy may keep nothing, as ``lastk`` does when the
newest candidate does not fit): the hook's question is mandatory, so never dropped.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_pacms import Candidate
from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.remote import RemoteAnswerError, RemoteSelector, check_answer

Plan = Callable[[dict[str, Any]], tuple[int, bytes]]


def verdicts(req: dict[str, Any], kept: list[str]) -> dict[str, Any]:
    """A well-formed ``/select_debug`` body keeping ``kept`` (whatever they are)."""
    ids = [c["id"] for c in req["candidates"]]
    return {
        "kept_ids": kept,
        "pick_order": kept,
        "strategy": "pacms",
        "budget": req["budget_tokens"],
        "tokens_total": 1,
        "tokens_kept": 0,
        "tokens_dropped": 1,
        "over_budget": False,
        "fell_back": False,
        "error": None,
        "timings": {"total": 0.001},
        "candidates": [
            {"id": i, "relevance": 0.5, "gain": 0.1 if i in kept else None, "kept": i in kept}
            for i in ids
        ],
        "info": {},
    }


def honest(req: dict[str, Any]) -> list[str]:
    """Mandatory ids, then the newest others that fit: an answer that passes every check."""
    cands, budget = req["candidates"], req["budget_tokens"]
    kept = [c["id"] for c in cands if c["mandatory"]]
    used = sum(c["tokens"] for c in cands if c["mandatory"])
    for c in reversed(cands):
        if not c["mandatory"] and used + c["tokens"] <= budget:
            kept.append(c["id"])
            used += c["tokens"]
    return kept


def adversary(mode: str, seed: int) -> Plan:
    """How the fake answers a request: one adversarial family, varied by ``seed``."""

    def plan(req: dict[str, Any]) -> tuple[int, bytes]:
        rng = random.Random(seed)
        ids = [c["id"] for c in req["candidates"]]
        mandatory = [c["id"] for c in req["candidates"] if c["mandatory"]]
        body: Any
        if mode == "honest":
            body = verdicts(req, honest(req))
        elif mode == "unknown ids":
            body = verdicts(req, [*rng.sample(ids, rng.randint(0, len(ids))), "ghost"])
        elif mode == "no ids":
            body = verdicts(req, [])
        elif mode == "all ids":
            body = verdicts(req, ids)
        elif mode == "random subset":
            body = verdicts(req, rng.sample(ids, rng.randint(0, len(ids))))
        elif mode == "mandatory missing":
            body = verdicts(req, [i for i in honest(req) if i not in mandatory[:1]])
        elif mode == "huge":
            body = {**verdicts(req, honest(req)), "info": {"pad": "x" * 300_000}}
        elif mode == "wrong types":
            body = verdicts(req, honest(req))
            key, value = rng.choice(
                [
                    ("kept_ids", ",".join(honest(req))),
                    ("kept_ids", [1, 2]),
                    ("pick_order", None),
                    ("timings", [1.0]),
                    ("fell_back", "no"),
                    ("candidates", {"0": 1}),
                    ("candidates", [{"id": i, "relevance": "high"} for i in ids]),
                    ("candidates", [{"id": i, "relevance": 10**400} for i in ids]),
                    ("info", 7),
                ]
            )
            body[key] = value
        elif mode == "not an object":
            body = rng.choice([[], "ok", 3, None])
        elif mode == "garbage":
            return 200, b"{" * rng.randint(1, 50_000)
        else:  # an error status
            return rng.choice([404, 500, 503]), b"<html>oops</html>"
        return 200, json.dumps(body).encode()

    return plan


MODES = [
    "honest",
    "unknown ids",
    "no ids",
    "all ids",
    "random subset",
    "mandatory missing",
    "huge",
    "wrong types",
    "not an object",
    "garbage",
    "error",
]


class FakeService(ThreadingHTTPServer):
    """``POST /select_debug`` answered by ``self.plan``; ``self.trickle`` slices the answer."""

    daemon_threads = True
    plan: Plan = staticmethod(adversary("honest", 0))
    trickle: float = 0.0  # seconds between 16-byte slices (0: all at once)


class Handler(BaseHTTPRequestHandler):
    server: FakeService

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, data = self.server.plan(req)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            if not self.server.trickle:
                self.wfile.write(data)
                return
            for i in range(0, len(data), 16):
                self.wfile.write(data[i : i + 16])
                self.wfile.flush()
                time.sleep(self.server.trickle)
        except OSError:  # the client gave up
            pass

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeService, str]]:
    server = FakeService(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


pools = st.lists(
    st.tuples(
        st.text("abcdefgh ", min_size=1, max_size=40).filter(str.strip),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)
RUNS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


ATTACKS = st.tuples(st.sampled_from(MODES), st.integers())
"""How the fake service answers: a mode of :data:`MODES` and the seed of its answers."""


def attacked(fake: tuple[FakeService, str], attack: tuple[str, int]) -> tuple[str, str]:
    """Make the fake service answer as ``attack`` says: the attack's mode and the service URL."""
    server, url = fake
    mode, seed = attack
    server.plan = staticmethod(adversary(mode, seed))
    return mode, url


BROKEN = ("unknown ids", "all ids", "mandatory missing", "huge", "garbage", "error")


def check(sel: Any, cands: list[Candidate], mode: str) -> None:
    ids = [c.id for c in cands]
    mandatory = {c.id for c in cands if c.mandatory}
    kept = set(sel.kept_ids)
    assert kept <= set(ids) and mandatory <= kept
    cost = dict(sel.tokens)
    assert sel.tokens_kept == sum(cost[i] for i in kept)
    if sel.tokens_kept > sel.budget:  # only the mandatory part, flagged
        assert kept == mandatory and sel.over_budget
    if mode == "honest":
        assert not sel.fell_back, sel.error
    elif mode in BROKEN and {
        # keeping every id over the budget is right when every id is mandatory
        "all ids": sum(cost.values()) > sel.budget and set(ids) != mandatory,
        "mandatory missing": bool(mandatory),
    }.get(mode, True):
        # Each of these breaks a check whatever the pool (all ids: when they exceed the budget
        # and are not all mandatory; mandatory missing: when there is one).
        assert sel.fell_back and sel.error and sel.strategy == "lastk", (mode, sel.error)
    if sel.fell_back:
        assert sel.error


@RUNS
@given(pool=pools, budget=st.integers(1, 40), attack=ATTACKS)
def test_no_answer_breaks_the_selection_sync_and_async(
    fake: tuple[FakeService, str],
    loop: asyncio.AbstractEventLoop,
    pool: list[tuple[str, bool]],
    budget: int,
    attack: tuple[str, int],
) -> None:
    mode, url = attacked(fake, attack)
    cands = [Candidate(text, id=f"c{i}", mandatory=m) for i, (text, m) in enumerate(pool)]
    remote = RemoteSelector(url, timeout=5)
    check(remote.select(cands, "abc", budget=budget), cands, mode)
    check(loop.run_until_complete(remote.aselect(cands, "abc", budget=budget)), cands, mode)


def conversation(turns: int) -> list[Any]:
    messages: list[Any] = [SystemMessage("You are terse.")]
    for i in range(turns):
        messages += [HumanMessage(f"note {i}: the port is {6000 + i}"), AIMessage(f"noted {i}")]
    return [*messages, HumanMessage("Which port was noted first?")]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(turns=st.integers(0, 12), budget=st.integers(20, 200), attack=ATTACKS)
def test_the_hook_never_sends_nothing_nor_drops_the_question(
    fake: tuple[FakeService, str],
    loop: asyncio.AbstractEventLoop,
    turns: int,
    budget: int,
    attack: tuple[str, int],
) -> None:
    mode, url = attacked(fake, attack)
    hook = create_pacms_hook(budget=budget, selector=RemoteSelector(url, timeout=5))
    state = {"messages": conversation(turns)}
    for out in (
        hook.invoke(state)["llm_input_messages"],
        loop.run_until_complete(hook.ainvoke(state))["llm_input_messages"],
    ):
        assert out, mode
        assert out[-1].content == "Which port was noted first?"
        sel = hook.last_selection
        assert sel is not None
        assert sel.tokens_kept <= sel.budget or sel.over_budget or sel.fell_back


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_trickling_service_cannot_hold_select_past_its_timeout(
    fake: tuple[FakeService, str], loop: asyncio.AbstractEventLoop, path: str
) -> None:
    server, url = fake
    server.plan = staticmethod(adversary("honest", 0))
    server.trickle = 0.05  # the answer takes seconds, each slice comes quickly
    try:
        remote = RemoteSelector(url, timeout=1.0)
        pool = [f"note {i} about the port" for i in range(20)]
        started = time.monotonic()
        if path == "sync":
            sel = remote.select(pool, "port", budget=30)
        else:
            sel = loop.run_until_complete(remote.aselect(pool, "port", budget=30))
        elapsed = time.monotonic() - started
    finally:
        server.trickle = 0.0
    assert sel.fell_back and "within 1.0s" in str(sel.error)
    assert 0.9 < elapsed < 1.1, elapsed
    assert remote.select(pool, "port", budget=30).fell_back is False  # not trickling now


def test_the_checks_name_what_does_not_fit(fake: tuple[FakeService, str]) -> None:
    cands = [Candidate("a b c", "a"), Candidate("d", "b", mandatory=True)]
    sent = {"candidates": [{"id": "a"}, {"id": "b"}], "budget_tokens": 4}
    body = verdicts(sent, ["a", "b"])
    fine = check_answer(cands, [3, 1], 4, body)
    assert fine.kept_ids == ("a", "b") and fine.tokens_kept == 4 and not fine.over_budget
    with pytest.raises(RemoteAnswerError, match="4 tokens over a budget of 3"):
        check_answer(cands, [3, 1], 3, body)
    with pytest.raises(RemoteAnswerError, match="not sent"):
        check_answer(cands, [3, 1], 4, {**body, "kept_ids": ["b", "z"], "pick_order": ["b", "z"]})
    only = {**body, "kept_ids": ["b"], "pick_order": ["b"]}
    assert check_answer(cands, [3, 5], 4, only).over_budget  # the mandatory part alone
    server, url = fake
    server.plan = staticmethod(adversary("mandatory missing", 0))
    with pytest.raises(RemoteAnswerError, match="drops mandatory id 'b'"):
        RemoteSelector(url, strict=True).select(cands, "a", budget=4)
    sel = RemoteSelector(url).select(cands, "a", budget=4)
    assert sel.fell_back and sel.error == "RemoteAnswerError: the answer drops mandatory id 'b'"
