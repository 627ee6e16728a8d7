"""The inspector page in real headless Chromium, driven through the DevTools protocol.

Chromium comes from Debian's ``chromium`` package (``.ci/chromium.sh`` installs it in CI); the
test skips with a reason when there is none. Set ``PACMS_SCREENSHOT_TO=docs/server-inspector.png``
to refresh the screenshot in the docs.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
pytest.importorskip("websocket", reason="needs websocket-client (the 'test' extra)")

import httpx
from chromium_page import CHROMIUM, NO_CHROMIUM, Page, chromium
from pacms_server import running

from langchain_pacms.server import create_app

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Page, str]]:
    with running(create_app()) as url, chromium(tmp_path_factory.mktemp("chromium")) as client:
        client.open(f"{url}/")
        yield client, url


KEPT_A = "[...document.querySelectorAll('#pane-a .cell[data-kept=\"1\"]')].map(c => c.dataset.id)"
KEPT_B = "[...document.querySelectorAll('#pane-b .cell[data-kept=\"1\"]')].map(c => c.dataset.id)"
FACTS_A = (
    "Object.fromEntries([...document.querySelectorAll('#pane-a .facts .fact')]"
    ".map(f => [f.dataset.fact, f.dataset.kept === '1']))"
)
METER_A = "Object.assign({}, document.querySelector('#pane-a .meter-text').dataset)"


def server_kept(url: str, strategy: str, budget: int) -> list[str]:
    demo = httpx.get(f"{url}/demo").json()
    body = {
        "candidates": demo["candidates"],
        "query": demo["query"],
        "strategy": strategy,
        "budget_tokens": budget,
    }
    return httpx.post(f"{url}/select_debug", json=body, timeout=10).json()["kept_ids"]


def test_demo_slider_strategy_and_compare(page: tuple[Page, str]) -> None:
    client, url = page
    client.rendered("document.getElementById('load-demo').click()")
    n_cells = client.js("document.querySelectorAll('#pane-a .cell').length")
    assert n_cells == len(httpx.get(f"{url}/demo").json()["candidates"])
    meter = client.js(METER_A)
    budget = int(meter["budget"])
    assert int(meter["kept"]) <= budget
    kept = client.js(KEPT_A)
    assert kept == server_kept(url, "pacms", budget)
    # the demo's moment: pacms keeps both early facts under the tight budget
    assert client.js(FACTS_A) == {"pgbouncer port and database": True, "login role": True}

    # side by side with recency, which loses the early login role
    client.rendered(
        "const c = document.getElementById('compare'); c.value = 'lastk';"
        "c.dispatchEvent(new Event('change'))"
    )
    assert client.js("document.getElementById('pane-b').hidden") is False
    kept_b = client.js(KEPT_B)
    lastk_budget = int(client.js("document.querySelector('#pane-b .meter-text').dataset.budget"))
    assert kept_b == server_kept(url, "lastk", lastk_budget)
    assert "c019" not in kept_b and "c020" not in kept_b
    shot = os.environ.get("PACMS_SCREENSHOT_TO")
    client.js("document.querySelector('#pane-a .cell.fact').click()")
    png = base64.b64decode(client.call("Page.captureScreenshot", format="png")["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    if shot:
        Path(shot).write_bytes(png)

    # move the budget slider down: fewer kept cells, a smaller budget on the meter
    client.rendered(
        "const b = document.getElementById('budget');"
        "b.value = String(Number(b.value) - 250); b.dispatchEvent(new Event('input'))"
    )
    small = client.js(METER_A)
    assert int(small["budget"]) < budget and int(small["kept"]) <= int(small["budget"])
    fewer = client.js(KEPT_A)
    assert len(fewer) < len(kept)
    assert fewer == server_kept(url, "pacms", int(small["budget"]))

    # switch strategy: the grid is topk's answer at the same budget
    client.rendered(
        "const s = document.getElementById('strategy'); s.value = 'topk';"
        "s.dispatchEvent(new Event('change'))"
    )
    assert client.js("document.querySelector('#pane-a h2').textContent").startswith("topk")
    assert client.js(KEPT_A) == server_kept(url, "topk", int(small["budget"]))

    # a click shows the candidate's text, tokens and scores
    client.js("document.querySelector('#pane-a .cell[data-id=\"c019\"]').click()")
    detail = client.js("document.getElementById('detail').textContent")
    assert detail.startswith("c019") and "orders_ro" in detail and "relevance" in detail
