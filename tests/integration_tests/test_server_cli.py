"""``pacms serve``: defaults, the non-loopback warning and a real start in a subprocess."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="needs the 'server' extra")
import httpx
import uvicorn
from pacms_server import running, serving

from langchain_pacms.cli import serve
from langchain_pacms.cli.main import build_parser, main
from langchain_pacms.remote import RemoteSelector
from langchain_pacms.server import create_app


def test_defaults_bind_loopback_8077() -> None:
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.max_candidates) == ("127.0.0.1", 8077, 2000)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-candidates", "0"])


@pytest.mark.parametrize(
    ("host", "extra", "code", "said"),
    [
        ("127.0.0.1", [], 0, None),
        ("0.0.0.0", [], 2, "give a token"),
        ("0.0.0.0", ["--insecure"], 0, "no authentication"),
        ("0.0.0.0", ["--token", "s3cret"], 0, "bearer token required"),
    ],
)
def test_beyond_loopback_needs_a_token_or_insecure(
    monkeypatch, capsys, host: str, extra: list[str], code: int, said: str | None
) -> None:
    monkeypatch.delenv("PACMS_SERVE_TOKEN", raising=False)
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw, app=app))
    monkeypatch.setattr(serve, "_free_port", lambda host, port: port)  # binds nothing here
    assert main(["serve", "--host", host, "--port", "9999", *extra]) == code
    err = capsys.readouterr().err  # the refusal and the warning are on stderr
    assert (said in err) if said else "warning" not in err
    if code == 0:
        assert seen["host"] == host and seen["port"] == 9999
        # the h11 protocol with the header-read timeout (HeaderTimeoutProtocol, 10 s by default)
        assert seen["http"].keywords == {"header_timeout": 10.0}
        assert seen["h11_max_incomplete_event_size"] == 16 * 1024
        assert seen["timeout_keep_alive"] == 5 and seen["limit_concurrency"] == 1000
    else:
        assert not seen  # refused to start


@pytest.mark.parametrize("token", ["secret ", " secret", "secret\r", "sec\tret", "clé"])
@pytest.mark.parametrize("given", ["--token", "PACMS_SERVE_TOKEN"])
def test_a_token_no_request_can_carry_stops_serve(
    monkeypatch, capsys, token: str, given: str
) -> None:
    monkeypatch.delenv("PACMS_SERVE_TOKEN", raising=False)
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw, app=app))
    monkeypatch.setattr(serve, "_free_port", lambda host, port: port)  # binds nothing here
    if given == "--token":
        extra = ["--token", token]
    else:
        extra = []
        monkeypatch.setenv("PACMS_SERVE_TOKEN", token)
    assert main(["serve", "--port", "9999", *extra]) == 2
    err = capsys.readouterr().err
    assert f"pacms serve: {given}: token must be visible ASCII characters" in err
    assert token not in err  # the secret is not printed
    assert not seen  # refused to start
    with pytest.raises(ValueError, match="token must be visible ASCII"):
        create_app(token=token)  # the same rule in code, and RemoteSelector's
    with pytest.raises(ValueError, match="token must be visible ASCII"):
        RemoteSelector(token=token)


def test_a_token_with_inner_spaces_is_served_and_sent() -> None:
    with running(create_app(token="two words")) as url:
        assert httpx.get(f"{url}/healthz").status_code == 401
        selection = RemoteSelector(url, token="two words", timeout=10, strict=True).select(
            ["a b", "c d"], "c", budget=5
        )
        assert not selection.fell_back


def test_serve_starts_and_answers() -> None:
    with serving() as url:
        health = httpx.get(f"{url}/healthz", timeout=1).json()
    assert health["status"] == "ok" and health["default_strategy"] == "pacms"
