"""examples/lifecycle_sqlite.py runs offline and shows fold -> SQLite file -> exact recovery."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph.store.sqlite", reason="needs the lifecycle extra")

REPO = Path(__file__).resolve().parents[2]


def test_example_folds_to_a_file_and_recovers_byte_exact(tmp_path):
    db = tmp_path / "kept.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "lifecycle_sqlite.py"), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    before, after = (
        int(n) for n in out.split("folded function:tool:1: ")[1].split(" tokens")[0].split(" -> ")
    )
    assert after * 50 < before  # the stub is a small fraction of the payload
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
    assert rows == [("pacms_sidecar.demo-thread", "function:tool:1")]
