"""benchmarks/bench_sidecar.py runs to the end on a small payload and prints one row per store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from script_runs import run_python

pytest.importorskip("langgraph.store.sqlite", reason="needs the lifecycle extra")

REPO = Path(__file__).resolve().parents[2]


def test_bench_sidecar_prints_a_row_per_store():
    env = {k: v for k, v in os.environ.items() if k != "PACMS_TEST_POSTGRES_URI"}
    out = run_python(
        REPO / "benchmarks" / "bench_sidecar.py", "--kilobytes", "3", "--repeats", "1", env=env
    )
    assert out.startswith("payload: 3,000 UTF-8 bytes")
    assert "| InMemoryStore | " in out and "| SqliteStore (temp file) | " in out
    assert "| PostgresStore | skipped" in out
    bad = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_sidecar.py"), "--repeats", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2 and "--repeats must be at least 1" in bad.stderr
