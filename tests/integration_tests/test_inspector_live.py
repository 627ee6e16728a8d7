"""Live mode in headless Chromium: the page follows a running agent, one grid per model call.

The agent of ``examples/live_inspector.py`` (offline fake model) selects through the service
under a session while the page follows it (``/?follow=ID``): after every turn the page shows
the newest selection, the same one the hook got, and the fact told in the first turn drops out
while long tool outputs take the budget, then returns to the kept set when it is asked again.
``pacms serve --watch`` (``create_app(watch=...)``) does the same from the hook's JSONL log.
A page following a session through a restart of the service (which numbers records above
the one before) shows the selections made after it.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
pytest.importorskip("websocket", reason="needs websocket-client (the 'test' extra)")

import httpx
from chromium_page import CHROMIUM, NO_CHROMIUM, Page, chromium
from pacms_server import free_port, running, serving

from langchain_pacms import Candidate
from langchain_pacms.remote import RemoteSelector
from langchain_pacms.server import create_app

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import live_inspector  # noqa: E402
from _agent_setup import human  # noqa: E402

KEPT = "[...document.querySelectorAll('#pane-a .cell[data-kept=\"1\"]')].map(c => c.dataset.id)"
CELLS = "document.querySelectorAll('#pane-a .cell').length"
STATUS = "document.getElementById('status')"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    with chromium(tmp_path_factory.mktemp("chromium")) as client:
        yield client


def shows_record(client: Page, n: int) -> None:
    """Wait until the page draws the ``n``-th record of the followed session as the newest."""
    client.wait(
        f"document.getElementById('record').options.length === {n} && "
        f"{STATUS}.dataset.state === 'ready' && "
        f"{STATUS}.textContent.includes('record {n} of {n}')"
    )


def fact_id(hook: Any) -> str:
    return next(c.id for c in hook.last_selection.candidates if "6543" in c.text)


def test_the_page_follows_an_agent_turn_by_turn(page: Page) -> None:
    session = "live-test"
    with running(create_app()) as url:
        page.open(f"{url}/?follow={session}")
        page.wait(f"{STATUS}.textContent.includes('waiting for its first selection')")
        agent, hook = live_inspector.build_agent(url, session)
        config = {"configurable": {"thread_id": session}}
        grids, fact_kept = [], []
        for text in live_inspector.TURNS:
            agent.invoke(human(text), config)
            (listed,) = httpx.get(f"{url}/sessions").json()["sessions"]
            shows_record(page, listed["records"])
            kept = page.js(KEPT)
            assert kept == list(hook.last_selection.kept_ids)  # what the agent was sent
            assert page.js(CELLS) == len(hook.last_selection.candidates)
            grids.append((page.js(CELLS), tuple(kept)))
            fact = fact_id(hook)
            cell = f"document.querySelector('#pane-a .cell[data-id=\"{fact}\"]')"
            fact_kept.append(page.js(f"{cell}.dataset.kept") == "1")
        assert all(a != b for a, b in itertools.pairwise(grids))  # every turn redrew the grid
        # told, dropped while the logs take the budget, and back when it is asked again
        assert fact_kept[0] and not fact_kept[-2] and fact_kept[-1]

        # the newest record's controls are read-only, and its detail shows the fact's text
        assert page.js("document.getElementById('budget').disabled") is True
        page.js(f"{cell}.click()")
        detail = page.js("document.getElementById('detail').textContent")
        assert "KEPT" in detail and "port 6543" in detail
        page.call("Page.navigate", url="about:blank")  # closes the stream before the server


def test_the_page_follows_a_hook_log_with_watch(page: Page, tmp_path: Path) -> None:
    log = tmp_path / "selections.jsonl"
    with running(create_app(watch=log)) as url:
        page.open(f"{url}/?follow=watch")
        agent, hook = live_inspector.build_agent(url, "logged", log_path=log)
        config = {"configurable": {"thread_id": "logged"}}
        for n, text in enumerate(live_inspector.TURNS[:3]):
            agent.invoke(human(text), config)
            records = [json.loads(line) for line in log.read_text().splitlines()]
            shows_record(page, len(records))
            assert page.js(KEPT) == [v["id"] for v in records[-1]["candidates"] if v["kept"]]
            assert page.js(CELLS) == len(hook.last_selection.candidates)
            assert page.js("document.querySelector('#pane-a h2').textContent").startswith(
                "pacms (hook)"
            ), n
        page.call("Page.navigate", url="about:blank")


def test_the_page_follows_a_session_through_a_restart_of_the_service(page: Page) -> None:
    pool = [
        Candidate("You are terse.", "s", kind="system", mandatory=True),
        Candidate("The staging database listens on port 6543.", "a"),
        Candidate("Which port?", "q", mandatory=True),
    ]
    budget = "document.querySelector('#pane-a .meter-text').dataset.budget"
    port = free_port()
    with serving(port=port) as url:
        remote = RemoteSelector(url, session="agent", timeout=10)
        for b in range(10, 15):  # records 1-5
            remote.select(pool, "Which port?", b)
        page.open(f"{url}/?follow=agent")
        shows_record(page, 5)
    # the page's stream reconnects with the Last-Event-ID of record 5; the new service numbers
    # above it (from its clock), so whatever it kept before the page is back is sent
    with serving(port=port):
        for b in range(100, 104):
            remote.select(pool, "Which port?", b)
        shows_record(page, 9)
        assert page.js(budget) == "103"
        remote.select(pool, "Which port?", 104)
        shows_record(page, 10)
        assert page.js(budget) == "104"
        page.call("Page.navigate", url="about:blank")
    remote.close()
