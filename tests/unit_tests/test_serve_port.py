"""``pacms serve --port`` outside 0-65535 is an argparse error (exit 2), not a traceback."""

from __future__ import annotations

import pytest
from cli_run import run_pacms

from langchain_pacms.cli.main import build_parser


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "http"])
def test_a_port_out_of_range_is_refused_with_exit_code_2(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "--port", port])
    assert exited.value.code == 2
    assert "argument --port" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["0", "8077", "65535"])
def test_a_port_in_range_is_taken(port: str) -> None:
    assert build_parser().parse_args(["serve", "--port", port]).port == int(port)


def test_the_command_says_why_and_exits_2() -> None:
    done = run_pacms("serve", "--port", "99999")
    assert done.returncode == 2
    assert "argument --port: must be 0-65535" in done.stderr


@pytest.mark.parametrize("option", ["--port", "--workers"])
def test_a_value_that_is_no_number_is_named_as_such(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse named the private converter: "invalid _port value: 'abc'"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", option, "abc"])
    assert f"argument {option}: must be a whole number, got 'abc'" in capsys.readouterr().err
