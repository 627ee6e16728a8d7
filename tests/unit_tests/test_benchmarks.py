"""The benchmark scripts run as a user runs them, on instances small enough for the suite.

Speed is not asserted here (that is what the scripts measure); what is checked is that each
script runs to the end and prints the rows it promises, including its own correctness checks
(``bench_sweep.py`` exits with an error when a linked sweep keeps other items than fresh
problems do).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from script_runs import run_python

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(name: str, *args: str) -> str:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    return run_python(BENCHMARKS / name, *args, env=env, timeout=300)


def test_bench_core_prints_every_strategy_and_the_references() -> None:
    out = run_script(
        "bench_core.py",
        "--sizes",
        "60",
        "--dims",
        "8",
        "--repeats",
        "1",
        "--langchain-max-n",
        "60",
    )
    for row in (
        "pacms",
        "topk",
        "lastk",
        "mmr",
        "rag",
        "*E @ E.T (float32)*",
        "*LangChain MMR, k=n*",
    ):
        assert f"| 60 | 8 | {row} |" in out


def test_bench_sweep_checks_linked_against_fresh_problems() -> None:
    out = run_script("bench_sweep.py", "--sizes", "60", "--dims", "8", "--repeats", "1")
    rows = [line for line in out.splitlines() if line.startswith("| 60 | 8 |")]
    assert [row.split("|")[3].strip() for row in rows] == ["pacms", "pacms_paper"]


@pytest.mark.parametrize("options", [[], ["--min-gain", "0"]])
def test_bench_hook_reports_the_overhead(options: list[str]) -> None:
    out = run_script("bench_hook.py", "--calls", "2", *options)
    assert "hook overhead per model call, warm cache" in out
    assert "last selection phases (ms)" in out


def test_bench_async_loop_compares_the_offloaded_hook_with_the_loop() -> None:
    out = run_script("bench_async_loop.py", "--agents", "3", "--calls", "2", "--rounds", "5")
    for row in ("on the loop (reference) |", "offloaded |", "ratios (on the loop / offloaded)"):
        assert row in out


def test_bench_lifecycle_prints_the_step_rows_and_the_target() -> None:
    out = run_script("bench_lifecycle.py", "--calls", "3", "--rounds", "10")
    assert "history: 40 messages" in out
    for row in ("index only", "step, repeat", "step, grow", "target: step <= 20 ms warm"):
        assert row in out


def test_bench_lifecycle_step_prints_each_part_against_the_bound() -> None:
    out = run_script("bench_lifecycle_step.py", "--calls", "2", "--objects", "12", "--synthetic")
    assert "history: synthetic, 22 messages, 12 objects" in out
    for row in ("lower bound (copy + sha256)", "check_actions", "step, new message objects"):
        assert row in out
    assert "target: step <= 10 ms warm: " in out


def test_bench_contended_times_idle_and_beside_hogs_and_stops_them() -> None:
    out = run_script(
        "bench_contended.py",
        "--n",
        "60",
        "--d",
        "8",
        "--repeats",
        "1",
        "--hogs",
        "1",
        "--hog-size",
        "64",
        "--blas-threads",
        "1",
        "0",
    )
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert rows == ["BLAS threads", "1", "default"]


def test_bench_scale_measures_each_selection_in_a_child(tmp_path: Path) -> None:
    out = run_script(
        "bench_scale.py",
        "--sizes",
        "300",
        "--d",
        "16",
        "--budgets",
        "0.1",
        "0.7",
        "--ceiling-mib",
        "0.01",
    )
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| 300 |")]
    assert [row[2].strip() for row in rows] == ["10%", "70%"]
    for row in rows:
        peak, built = float(row[7]), float(row[8])
        assert peak >= built > 10  # the child's own resident size, interpreter and numpy in it
        assert int(row[9].replace(",", "")) > 0  # kept something


def test_bench_grow_compares_a_grown_pool_with_a_cold_one() -> None:
    out = run_script("bench_grow.py", "--n", "120", "--d", "16", "--repeats", "2")
    assert "| cold similarity |" in out and "| pool grown by 5 |" in out
    assert "kept sets equal to a fresh selector's: True" in out
    out = run_script("bench_grow.py", "--n", "400", "--d", "16", "--repeats", "3", "--new-query")
    assert "a new query at every call" in out
    assert "kept sets equal to a fresh selector's: True" in out


def test_bench_core_plots_its_reports(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    run_script(
        "bench_core.py",
        "--sizes",
        "40",
        "80",
        "--dims",
        "8",
        "--repeats",
        "1",
        "--strategies",
        "pacms",
        "topk",
        "--langchain-max-n",
        "0",
        "--json",
        str(report),
    )
    png = tmp_path / "t.png"
    run_script("bench_core.py", "--plot", str(png), "--plot-only", str(report))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_agent_memory_prints_rss_per_thread_count() -> None:
    out = run_script("bench_agent_memory.py", "--threads", "3", "--every", "2", "--reads", "2")
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["1", "2", "3"]  # after the header: the first, every 2nd and the last
    assert "growth from thread 2 to 3:" in out
