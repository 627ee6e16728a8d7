"""The QA example of ``docs/qa.md`` runs as it is written, on LongMemEval's oracle split.

The library's docs test (``tests/integration_tests/test_docs_examples.py``) runs every other
Python example of the pages; this one needs the evaluation package and the data set, so it runs
here, with that test's page reader and runner, against a fake Ollama server on loopback.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import test_docs_examples as docs
from fake_ollama import FakeOllama

from pacms_bench.longmemeval import default_data_dir


def test_the_qa_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = default_data_dir()
    if data is None or not (data / "oracle").exists():
        pytest.skip("LongMemEval's oracle file is not under ../shared/data/longmemeval")
    page = docs.ROOT / "docs" / "qa.md"
    (line, code), *_ = [(n, c) for n, c in docs.examples(page) if docs.NEEDS_DATA in c]
    module = types.ModuleType("docs_examples")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.chdir(tmp_path)
    server = FakeOllama(chat=docs._chat).start()  # the docs test's reader and judge
    monkeypatch.setenv("OLLAMA_HOST", server.url)
    try:
        docs.run(page, line, code.replace(docs.NEEDS_DATA, f"{data}/"), module.__dict__)
    finally:
        server.stop()
    report = module.__dict__["report"]
    assert len(report.records) == 30 * 4 and server.chats
    assert (tmp_path / "results" / "qa" / "oracle-smoke").is_dir()
