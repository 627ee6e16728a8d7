"""``pacms-bench lifecycle --planner ollama:<model>``: the LLM planner in the replay, on loopback.

A fake Ollama server plays the planner model: it reads the object index the ``LLMPlanner``
sends and folds every tool object of 100 tokens or more, so the ``llm`` row must prune and
keep every fold recoverable. No figures are expected without a real model; this checks the
path a real one takes (probe, structured reply, per-cut rows, cost replay, cache).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ollama import FakeOllama

from pacms_bench.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_ROW = re.compile(r"^(function:tool:\d+) \| tool \| (\d+) \| active \|", re.M)


def _planner_reply(model: str, messages: list[dict[str, Any]]) -> str:
    text = "\n".join(str(m.get("content", "")) for m in messages)
    if "Objects (id" not in text:
        return "OK"  # the CLI's probe
    actions = [
        {"op": "fold", "target": oid, "reason": "large tool output"}
        for oid, tokens in _ROW.findall(text)
        if int(tokens) >= 100
    ]
    return json.dumps({"summary": f"fold {len(actions)} outputs", "actions": actions})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOllama]:
    for name in ("OLLAMA_HOST", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    fake = FakeOllama(chat=_planner_reply).start()
    yield fake
    fake.stop()


def _traces(root: Path) -> Path:
    """Two copies of the fixture run: one lands in the development split, one in the test."""
    folder = root / "mini-swe-agent-deepseek-swebench"
    folder.mkdir(parents=True)
    for name in ("dev", "test"):
        shutil.copy(FIXTURES / "lifecycle_trace.traj.json", folder / f"{name}.traj.json")
    return root


def _planner_argv(tmp_path: Path, url: str, *extra: str) -> list[str]:
    """``lifecycle`` on :func:`_traces` with the planner model at ``url``, out to ``out/``."""
    return [
        "lifecycle",
        *("--data", str(_traces(tmp_path / "data")), "--datasets", "mini-swe", "--quiet"),
        *("--planner", "ollama:planner-model", "--ollama-url", url),
        *("--out", str(tmp_path / "out"), *extra),
    ]


def test_the_llm_planner_gets_a_row_and_a_cost_replay(server: FakeOllama, tmp_path: Path) -> None:
    argv = _planner_argv(
        tmp_path,
        server.url,
        *("--max-cuts", "2", "--thresholds", "0.3", "--cache-dir", str(tmp_path / "cache")),
    )
    assert main(argv) == 0
    data = json.loads((tmp_path / "out" / "lifecycle.json").read_text())["datasets"]["mini-swe"]
    row = data["policies"]["llm"]
    assert row["cuts"] == 2 and row["pruning_mean"] > 0.2
    assert row["no_impact_with_recovery"] == 1.0  # every fold is recoverable
    assert "llm@0.3" in data["cost_vs_none"] and data["cost"]["llm@0.3:commits"] >= 1
    planned = [c for c in server.chats if "Objects (id" in json.dumps(c["messages"])]
    assert planned and all(c["model"] == "planner-model" for c in server.chats)
    # a rerun reads the LLM's cells from the cache: the model is only probed
    before = len(server.chats)
    assert main(argv) == 0
    assert len(server.chats) == before + 1


def test_an_unreachable_planner_model_is_an_error_not_empty_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    assert main(_planner_argv(tmp_path, f"http://127.0.0.1:{port}")) == 2
    assert "not reachable" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
