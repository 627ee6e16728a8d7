"""benchmarks/bench_server.py runs to the end on a small load and prints its rows.

It starts two Python processes (the script and the service), which takes most of its ~10 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from script_runs import run_python

pytest.importorskip("fastapi", reason="needs the 'server' extra")

ROOT = Path(__file__).resolve().parents[2]


def test_bench_server_prints_its_rows() -> None:
    out = run_python(
        ROOT / "benchmarks" / "bench_server.py",
        "--candidates",
        "30",
        "--clients",
        "2",
        "--requests",
        "10",
    )
    for row in (
        "| in-process select | 10 |",
        "| remote, 1 client | 10 |",
        "| remote, 2 clients | 10 |",
        "ratio remote/in-process p50",
        "load average",
        "CPU ms/request |",
        "the 2 client processes used",
    ):
        assert row in out
    rows = [line.split("|") for line in out.splitlines() if "| remote" in line]
    assert all(float(cells[-2]) > 0 for cells in rows)  # the service's CPU per request
