"""examples/lifecycle_sqlite.py runs offline and shows fold -> SQLite file -> exact recovery."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from script_runs import run_python

pytest.importorskip("langgraph.store.sqlite", reason="needs the lifecycle extra")

REPO = Path(__file__).resolve().parents[2]


def test_example_folds_to_a_file_and_recovers_byte_exact(tmp_path):
    db = tmp_path / "kept.sqlite"
    out = run_python(REPO / "examples" / "lifecycle_sqlite.py", "--db", str(db))
    before, after = (
        int(n) for n in out.split("folded function:tool:1: ")[1].split(" tokens")[0].split(" -> ")
    )
    assert after * 40 < before  # the stub (its locators, grouped past its budget) is a small part
    assert 'recover_context("function:tool:1")' in out
    stub = out.split("stub: ", 1)[1].split("\n", 1)[0]
    assert "locators: /srv/billing/job_0.py" in stub  # paths rank first
    assert "/var/log/billing/2026-03.jsonl" not in stub  # the call's argument shows it already
    assert "byte-exact True" in out
    assert "provider problems: none" in out
    rows = (
        sqlite3.connect(db)
        .execute("SELECT prefix, key FROM store WHERE prefix LIKE 'pacms_sidecar%'")
        .fetchall()
    )
    assert [(prefix, key.split("@")[0]) for prefix, key in rows] == [
        ("pacms_sidecar.demo-thread", "function:tool:1")
    ]
