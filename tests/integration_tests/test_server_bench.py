"""benchmarks/bench_server.py runs to the end on a small load and prints its rows.

It starts two Python processes (the script and one single-worker service), which takes most of
its ~10 s; the two-worker run with a shared Redis cache is left to the benchmark itself.
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
        *("--candidates", "30", "--pools", "3", "--workers", "1", "--clients", "1,2"),
        *("--seconds", "0.5", "--single", "10"),
    )
    for row in (
        "| in-process, rotating | 10 |",
        "| in-process, repeated | 10 |",
        "| 1 worker, rotating, 1 client | 10 |",
        "| 1 worker, repeated, 2 clients |",
        "| (1 worker: in memory) |",
        "rotating, 1 client, 1 worker(s): service p50 / in-process p50",
        "load average",
    ):
        assert row in out
    rows = [line.split("|") for line in out.splitlines() if "| 1 worker," in line]
    assert len(rows) == 4
    assert all(float(cells[5]) > 0 and float(cells[6]) > 0 for cells in rows)  # req/s, CPU
    ratios = [cells[7].strip() for cells in rows if cells[1].strip().endswith("1 client")]
    assert len(ratios) == 2 and all(r.endswith("x") and float(r[:-1]) > 0 for r in ratios)
