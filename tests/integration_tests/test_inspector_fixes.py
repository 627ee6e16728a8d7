"""The inspector page keeps no stale state, honours request bodies and is usable from the keyboard.

Each behaviour in real headless Chromium (see ``chromium_page.py``): the detail panel follows the
grid when the slider moves; a failed load says why and leaves nothing of the previous session; a
request-body file is selected with its own budget and options; a log record's controls are
read-only; the meter shares the slider's log scale; the favicon loads; cells take the focus and
open on Enter or Space.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
pytest.importorskip("websocket", reason="needs websocket-client (the 'test' extra)")

import httpx
from chromium_page import CHROMIUM, NO_CHROMIUM, Page, chromium
from pacms_server import DOCS_BODY, running

from langchain_pacms import ContextSelector
from langchain_pacms.messages import SelectionLog
from langchain_pacms.server import create_app

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)

KEPT = "[...document.querySelectorAll('#pane-a .cell[data-kept=\"1\"]')].map(c => c.dataset.id)"
STATUS = "document.getElementById('status')"
SLIDE = (
    "{{ const b = document.getElementById('budget'); b.value = '{value}';"
    "b.dispatchEvent(new Event('input')) }}"
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Page, str]]:
    with running(create_app()) as url, chromium(tmp_path_factory.mktemp("chromium")) as page:
        yield page, url


@pytest.fixture
def page(browser: tuple[Page, str]) -> tuple[Page, str]:
    """The page freshly loaded, with the demo session drawn."""
    client, url = browser
    client.open(f"{url}/")
    client.rendered("document.getElementById('load-demo').click()")
    return client, url


def detail(client: Page) -> dict[str, str]:
    return client.js(
        "Object.assign({text: document.getElementById('detail').textContent},"
        " document.getElementById('detail').dataset)"
    )


def test_detail_panel_follows_the_grid_when_the_slider_moves(page: tuple[Page, str]) -> None:
    client, _ = page
    start = client.js("document.getElementById('budget').value")
    wide = set(client.js(KEPT))
    client.rendered(SLIDE.format(value=0))
    narrow = set(client.js(KEPT))
    victim = sorted(wide - narrow)[0]  # kept at the start, dropped at the lowest budget
    client.rendered(SLIDE.format(value=start))
    client.js(f"document.querySelector('#pane-a .cell[data-id=\"{victim}\"]').click()")
    assert detail(client)["kept"] == "1" and "KEPT" in detail(client)["text"]

    client.rendered(SLIDE.format(value=0))
    shown = detail(client)
    assert shown["id"] == victim and shown["kept"] == "0"
    assert "KEPT" not in shown["text"] and " dropped" in shown["text"]
    assert client.js("document.querySelector('#pane-a .cell.selected').dataset.id") == victim


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("broken.json", '{"candidates": [', "not JSON"),
        ("other.json", '{"hello": "world"}', "needs 'candidates'"),
        ("list.json", "[1, 2, 3]", "not a session"),
        ("textless.json", '{"candidates": [{"id": "a"}], "query": "q"}', "candidates[0]"),
        ("half.jsonl", '{"candidates": [], "query": "q"}\n{"cand', "line 2 is not JSON"),
        ("empty.jsonl", "\n\n", "empty"),
    ],
)
def test_a_failed_load_says_why_and_keeps_nothing(
    page: tuple[Page, str], tmp_path: Path, name: str, content: str, why: str
) -> None:
    client, _ = page
    client.js("document.querySelector('#pane-a .cell').click()")
    client.events.clear()
    path = tmp_path / name
    path.write_text(content)
    client.set_file("#file", path)
    client.wait(f"{STATUS}.dataset.state === 'error'")
    status = client.js(f"{STATUS}.textContent")
    assert status.startswith(f"cannot load {name}:") and why in status
    assert client.js("document.querySelectorAll('.cell, .meter, .facts, h2').length") == 0
    assert client.js("document.getElementById('query').textContent") == ""
    assert "id" not in detail(client) and detail(client)["text"].startswith("Click a cell")
    assert client.js("document.getElementById('budget').disabled") is True
    thrown = [e for e in client.events if e["method"] == "Runtime.exceptionThrown"]
    assert thrown == []  # no uncaught promise rejection


def test_a_request_body_file_is_selected_with_its_budget_and_options(
    page: tuple[Page, str], tmp_path: Path
) -> None:
    client, url = page
    path = tmp_path / "request.json"
    path.write_text(json.dumps(DOCS_BODY))
    before = client.generation()
    client.set_file("#file", path)
    client.wait(
        f"Number({STATUS}.dataset.generation) > {before} && {STATUS}.dataset.state === 'ready'"
    )
    meter = client.js("Object.assign({}, document.querySelector('#pane-a .meter-text').dataset)")
    assert int(meter["budget"]) == 20 and int(meter["kept"]) <= 20
    assert "relevance_weight=0.2" in client.js("document.querySelector('#pane-a h2').textContent")
    assert "over budget" not in client.js("document.querySelector('#pane-a h2').textContent")
    answer = httpx.post(f"{url}/select_debug", json=DOCS_BODY, timeout=10).json()
    assert client.js(KEPT) == answer["kept_ids"]

    topk = {**DOCS_BODY, "strategy": "topk", "strategy_options": {}, "budget_tokens": 12}
    path.write_text(json.dumps(topk))
    client.js("document.getElementById('file').value = ''")
    before = client.generation()
    client.set_file("#file", path)
    client.wait(
        f"Number({STATUS}.dataset.generation) > {before} && {STATUS}.dataset.state === 'ready'"
    )
    assert client.js("document.getElementById('strategy').value") == "topk"
    assert client.js("document.querySelector('#pane-a .meter-text').dataset.budget") == "12"


def test_log_records_are_shown_with_read_only_controls(
    page: tuple[Page, str], tmp_path: Path
) -> None:
    client, _ = page
    path = tmp_path / "selections.jsonl"
    log, selector = SelectionLog(path), ContextSelector()
    texts = ["the port is 6543", "lunch was fine", "the role is orders_ro", "what port?"]
    for budget in (6, 14):
        log.write(selector.select(texts, "port", budget=budget), query="port", source="doc")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kept = [[v["id"] for v in r["candidates"] if v["kept"]] for r in records]
    assert kept[0] != kept[1]

    before = client.generation()
    client.set_file("#file", path)
    client.wait(
        f"Number({STATUS}.dataset.generation) > {before} && {STATUS}.dataset.state === 'ready'"
    )
    assert client.js(KEPT) == kept[0]
    disabled = "['budget', 'strategy', 'compare'].map(i => document.getElementById(i).disabled)"
    assert client.js(disabled) == [True, True, True]
    assert "shown as recorded" in client.js("document.getElementById('readonly-note').textContent")
    assert client.js("document.getElementById('budget-out').textContent") == "6 tokens"
    generation = client.generation()
    client.js(SLIDE.format(value=900))  # a script can still fire the event: nothing re-selects
    client.js("new Promise(r => setTimeout(r, 300))")
    assert client.generation() == generation and client.js(KEPT) == kept[0]

    client.rendered(
        "const r = document.getElementById('record'); r.value = '1';"
        "r.dispatchEvent(new Event('change'))"
    )
    assert client.js(KEPT) == kept[1]
    assert client.js("document.getElementById('budget-out').textContent") == "14 tokens"

    client.rendered("document.getElementById('load-demo').click()")  # a pool: editable again
    assert client.js(disabled) == [False, False, False]


def test_the_meter_shares_the_sliders_log_scale(page: tuple[Page, str]) -> None:
    client, _ = page
    meter = (
        "({mark: parseFloat(document.querySelector('#pane-a .meter .budget').style.left),"
        " bar: parseFloat(document.querySelector('#pane-a .meter .kept').style.width),"
        " slider: Number(document.getElementById('budget').value) / 10,"
        " kept: Number(document.querySelector('#pane-a .meter-text').dataset.kept),"
        " budget: Number(document.querySelector('#pane-a .meter-text').dataset.budget),"
        " scale: document.querySelector('#pane-a .meter').dataset.scale})"
    )
    for value in (None, 150, 700):
        if value is not None:
            client.rendered(SLIDE.format(value=value))
        m = client.js(meter)
        assert m["scale"] == "log"
        assert abs(m["mark"] - m["slider"]) <= 0.1  # the budget mark sits where the thumb is
        assert m["bar"] <= m["mark"] + 1e-6  # kept within the budget, on the same scale
        assert m["bar"] >= 0.5 * m["mark"]  # not a sliver: log(kept) is near log(budget)
        assert m["budget"] >= m["kept"] and math.isfinite(m["bar"])


def test_the_favicon_loads_and_nothing_404s(browser: tuple[Page, str]) -> None:
    client, url = browser
    client.events.clear()
    client.open(f"{url}/")
    client.js("new Promise(r => setTimeout(r, 300))")
    statuses = {
        e["params"]["response"]["url"]: e["params"]["response"]["status"]
        for e in client.events
        if e["method"] == "Network.responseReceived"
    }
    assert statuses and all(code < 400 for code in statuses.values()), statuses
    icon = client.js("document.querySelector('link[rel=icon]').href")
    assert httpx.get(icon).headers["content-type"].startswith("image/svg+xml")
    assert httpx.get(f"{url}/favicon.ico").status_code == 200


def test_cells_take_the_focus_and_open_on_enter_or_space(page: tuple[Page, str]) -> None:
    client, _ = page
    assert client.js("[...document.querySelectorAll('.cell')].every(c => c.tabIndex === 0)")
    first, second = client.js(
        "[...document.querySelectorAll('#pane-a .cell')].slice(0, 2).map(c => c.dataset.id)"
    )
    client.js("document.querySelector('#pane-a .cell').focus()")
    client.key("Enter", "Enter", 13)
    assert detail(client)["id"] == first
    client.key("Tab", "Tab", 9)  # the next cell is the next stop
    assert client.js("document.activeElement.dataset.id") == second
    client.key(" ", "Space", 32)
    assert detail(client)["id"] == second
