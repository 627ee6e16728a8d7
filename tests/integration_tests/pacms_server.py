"""A real uvicorn server on a free loopback port, in a thread or as ``pacms serve``, for the
service tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn

DOCS_BODY = {  # the request of docs/server.md, with its strategy_options
    "candidates": [
        {"id": "s", "text": "You are a helpful agent.", "kind": "system", "mandatory": True},
        {"id": "a", "text": "The staging database listens on port 6543."},
        {"id": "b", "text": "Lunch was great today.", "tokens": 5, "position": 7},
    ],
    "query": "Which port does the staging database use?",
    "budget_tokens": 20,
    "strategy": "pacms",
    "strategy_options": {"relevance_weight": 0.2},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1:``port`` (default: a free one) until the block ends; yields
    the base URL."""
    port = free_port() if port is None else port
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


def _healthy(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=1).raise_for_status()
    except httpx.HTTPError:
        return False
    return True


@contextlib.contextmanager
def serving(*options: str, start_within: float = 60, port: int | None = None) -> Iterator[str]:
    """Run ``pacms serve --port <port> *options`` (default: a free port) in a child process until
    the block ends; yields the base URL once ``/healthz`` answers (the child's stderr is in the
    failure)."""
    port = free_port() if port is None else port
    command = [sys.executable, "-m", "langchain_pacms.cli.main", "serve", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + start_within
            while not _healthy(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    stderr.seek(0)
                    said = stderr.read().decode(errors="replace")
                    raise AssertionError(f"pacms serve {' '.join(options)} did not start\n{said}")
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            proc.wait(20)
