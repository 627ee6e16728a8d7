"""The inspector page in real headless Chromium, driven through the DevTools protocol.

Chromium comes from Debian's ``chromium`` package (``.ci/chromium.sh`` installs it in CI); the
test skips with a reason when there is none. Set ``PACMS_SCREENSHOT_TO=docs/server-inspector.png``
to refresh the screenshot in the docs.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
websocket = pytest.importorskip("websocket", reason="needs websocket-client (the 'test' extra)")

import httpx  # noqa: E402
from pacms_server import running  # noqa: E402

from langchain_pacms.server import create_app  # noqa: E402

CHROMIUM = os.environ.get("PACMS_CHROMIUM") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (apt-get install chromium, or set PACMS_CHROMIUM)"
)


class Page:
    """A minimal DevTools-protocol client for one page."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=20, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def js(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression: str, timeout: float = 15) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.05)
        status = self.js("document.getElementById('status').textContent")
        raise AssertionError(f"timed out waiting for {expression}; status: {status}")

    def rendered(self, action: str) -> None:
        """Run ``action`` and wait until the page drew the answer to it."""
        before = int(self.js("Number(document.getElementById('status').dataset.generation||0)"))
        self.js(action)
        self.wait(
            f"Number(document.getElementById('status').dataset.generation||0) > {before}"
            " && document.getElementById('status').dataset.state === 'ready'"
        )


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Page, str]]:
    profile = tmp_path_factory.mktemp("chromium")
    with running(create_app()) as url:
        proc = subprocess.Popen(
            [
                str(CHROMIUM),
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-sync",
                "--disable-background-networking",
                "--disable-component-update",
                "--remote-allow-origins=*",
                "--window-size=1300,900",
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port_file = profile / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("chromium did not open its DevTools port")
                time.sleep(0.05)
            port = int(port_file.read_text().split()[0])
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            target = next(t for t in targets if t["type"] == "page")
            client = Page(target["webSocketDebuggerUrl"])
            client.call("Page.enable")
            client.call("Runtime.enable")
            client.call("Page.navigate", url=f"{url}/")
            client.wait(
                "document.getElementById('strategy') && "
                "document.getElementById('strategy').options.length >= 5"
            )
            yield client, url
            client.ws.close()
        finally:
            proc.terminate()
            proc.wait(10)


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
