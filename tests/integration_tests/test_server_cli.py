"""``pacms serve``: defaults, the non-loopback warning and a real start in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
import httpx
import uvicorn
from pacms_server import free_port

from langchain_pacms.cli.main import build_parser, main


def test_defaults_bind_loopback_8077() -> None:
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.max_candidates) == ("127.0.0.1", 8077, 2000)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-candidates", "0"])


@pytest.mark.parametrize(("host", "warned"), [("127.0.0.1", False), ("0.0.0.0", True)])
def test_warns_beyond_loopback(monkeypatch, capsys, host: str, warned: bool) -> None:
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    assert main(["serve", "--host", host, "--port", "9999"]) == 0
    assert seen["host"] == host and seen["port"] == 9999
    assert ("warning: binding" in capsys.readouterr().out) is warned


def test_serve_starts_and_answers() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "langchain_pacms.cli.main", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).json()
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert health["status"] == "ok" and health["default_strategy"] == "pacms"
    finally:
        proc.terminate()
        proc.wait(10)
