"""Small user-facing defects: errors naming private templates, and rough edges of ``pacms``."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_pacms

from langchain_pacms._steps import parameters_of
from langchain_pacms.cli.main import main
from langchain_pacms.messages.report import report_selection
from langchain_pacms.selector import ContextSelector

# --- a bad call names the public method, not its ``*_arguments`` template ---------------------


def _args(text: str, *, times: int = 2) -> tuple[str, int]:
    if not isinstance(times, int):
        raise TypeError("times must be a whole number")
    return text, times


@parameters_of(_args)
def repeat(*args: Any, **kwargs: Any) -> str:
    text, times = _args(*args, **kwargs)
    return text * times


def test_a_missing_budget_names_select() -> None:
    with pytest.raises(TypeError) as raised:
        ContextSelector().select(["a"], "q")  # type: ignore[call-arg]
    message = str(raised.value)
    assert message.startswith("ContextSelector.select() missing 1 required positional argument")
    assert "'budget'" in message and "select_arguments" not in message
    assert raised.value.__suppress_context__  # no "during handling ..." chained traceback


async def test_a_missing_budget_names_aselect() -> None:
    with pytest.raises(TypeError, match=r"^ContextSelector\.aselect\(\) missing 1 required"):
        await ContextSelector().aselect(["a"], "q")  # type: ignore[call-arg]
    assert inspect.iscoroutinefunction(ContextSelector.aselect)


def test_a_module_function_is_named_too() -> None:
    with pytest.raises(TypeError, match=r"^report_selection\(\) missing 1 required positional"):
        report_selection()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("call", "rest"),
    [
        (lambda: repeat(), " missing 1 required positional argument: 'text'"),
        (lambda: repeat("a", "b"), " takes 1 positional argument but 2 were given"),
        (lambda: repeat("a", bogus=1), " got an unexpected keyword argument 'bogus'"),
    ],
)
def test_every_kind_of_bad_call_is_renamed(call: Any, rest: str) -> None:
    with pytest.raises(TypeError) as raised:
        call()
    assert str(raised.value) == f"repeat(){rest}"


def test_other_type_errors_pass_unchanged() -> None:
    with pytest.raises(TypeError, match=r"^times must be a whole number$"):
        repeat("a", times="2")
    assert repeat("ab") == "abab"
    assert list(inspect.signature(ContextSelector.select).parameters)[:4] == [
        "self",
        "candidates",
        "query",
        "budget",
    ]


# --- pacms demo --------------------------------------------------------------------------------


def test_demo_shows_a_strategy_named_twice_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--strategies", "lastk", "topk", "lastk"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line]
    assert [r for r in rows if r in ("lastk", "topk")] == ["lastk", "topk"]
    assert main(["demo", "--json", "--strategies", "topk", "topk"]) == 0
    assert [r["strategy"] for r in json.loads(capsys.readouterr().out)] == ["topk"]


def test_demo_says_when_the_mandatory_part_exceeds_the_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--budget-ratio", "0.0001", "--strategies", "lastk"]) == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "smaller than" in line]
    assert len(said) == 1
    assert "mandatory" in said[0] and "kept only those, over the budget" in said[0]
    assert "0.01% of the session's tokens" in out
    assert main(["demo", "--strategies", "lastk"]) == 0
    assert "smaller than" not in capsys.readouterr().out


def test_demo_with_an_unknown_option_shows_the_demo_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: pacms demo ")
    assert "pacms demo: error: unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):  # before the sub-command: the top-level's own
        main(["--bogus", "demo"])
    assert "pacms: error: unrecognized arguments: --bogus" in capsys.readouterr().err


# --- pacms serve --watch -----------------------------------------------------------------------


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Stand-in for ``uvicorn.run``: the options each start would have run with."""
    uvicorn = pytest.importorskip("uvicorn")
    pytest.importorskip("langchain_pacms.server.app")
    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: runs.append(options))
    return runs


def test_watching_a_missing_path_warns(
    tmp_path: Path, started: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "run.jsonl"
    assert main(["serve", "--port", "0", "--watch", str(missing)]) == 0
    err = capsys.readouterr().err
    assert f"warning: --watch {missing} does not exist" in err
    assert f"nor does its folder {missing.parent}" in err
    assert len(started) == 1


def test_watching_a_directory_is_refused(
    tmp_path: Path, started: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--port", "0", "--watch", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert started == []


def test_watching_an_existing_log_says_nothing(
    tmp_path: Path, started: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.jsonl"
    log.touch()
    assert main(["serve", "--port", "0", "--watch", str(log)]) == 0
    assert capsys.readouterr().err == ""
    assert len(started) == 1


# --- pacms eval --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv", [["eval"], ["eval", "longmemeval", "recall"], ["eval", "--model", "m", "-h"]]
)
def test_eval_points_to_pacms_bench(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "pacms-bench" in captured.err and "pip install -e ./bench" in captured.err


def test_the_eval_command_exits_non_zero() -> None:
    done = run_pacms("eval", "lifecycle")
    assert done.returncode == 2
    assert "pip install -e ./bench" in done.stderr


def test_a_timeout_that_is_no_number_names_the_option() -> None:
    done = run_pacms("serve", "--header-timeout", "abc")
    assert done.returncode == 2
    assert "--header-timeout: must be a number of seconds, got 'abc'" in done.stderr
    assert "_seconds" not in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_output_that_cannot_be_written_is_one_line() -> None:
    with open("/dev/full", "w") as full:  # every write fails: no space left on device
        done = subprocess.run(
            [sys.executable, "-m", "langchain_pacms.cli.main", "demo"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "pacms: cannot write the output: [Errno 28] No space left on device"
    ]
