"""Headless Chromium driven through the DevTools protocol, for the inspector page's tests.

Chromium comes from Debian's ``chromium`` package (``.ci/chromium.sh`` installs it in CI);
:data:`CHROMIUM` is ``None`` without one, and the tests skip with a reason.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import websocket

CHROMIUM = os.environ.get("PACMS_CHROMIUM") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
NO_CHROMIUM = "no chromium binary (apt-get install chromium, or set PACMS_CHROMIUM)"


class Page:
    """A minimal DevTools-protocol client for one page; it remembers the protocol's events."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=20, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            if "method" in reply:
                self.events.append(reply)

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

    def generation(self) -> int:
        return int(self.js("Number(document.getElementById('status').dataset.generation||0)"))

    def rendered(self, action: str) -> None:
        """Run ``action`` and wait until the page drew the answer to it."""
        before = self.generation()
        self.js(action)
        self.wait(
            f"Number(document.getElementById('status').dataset.generation||0) > {before}"
            " && document.getElementById('status').dataset.state === 'ready'"
        )

    def open(self, url: str) -> None:
        """Load ``url`` and wait until the page has its strategies."""
        self.call("Page.navigate", url=url)
        self.wait(
            "document.readyState === 'complete' && document.getElementById('strategy') && "
            "document.getElementById('strategy').options.length >= 5"
        )

    def set_file(self, selector: str, path: Path) -> None:
        """Choose ``path`` in the file input ``selector`` (the page gets its change event)."""
        root = self.call("DOM.getDocument")["root"]["nodeId"]
        node = self.call("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]
        self.call("DOM.setFileInputFiles", nodeId=node, files=[str(path)])

    def key(self, key: str, code: str, key_code: int) -> None:
        """Press and release one key, as a keyboard does (to the focused element)."""
        text = {"Enter": "\r", " ": " "}.get(key, "")
        for kind in ("keyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent",
                type=kind,
                key=key,
                code=code,
                windowsVirtualKeyCode=key_code,
                text=text if kind == "keyDown" else "",
            )


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[Page]:
    """A headless Chromium with a fresh profile in ``profile``; its one page, blank."""
    assert CHROMIUM is not None, NO_CHROMIUM
    proc = subprocess.Popen(
        [
            CHROMIUM,
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
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        target = next(t for t in targets if t["type"] == "page")
        page = Page(target["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Network", "DOM"):
            page.call(f"{domain}.enable")
        try:
            yield page
        finally:
            with contextlib.suppress(Exception):
                page.call("Page.navigate", url="about:blank")  # closes the page's streams
            page.ws.close()
    finally:
        proc.terminate()
        proc.wait(10)
