"""The retrieval-compressor example runs offline and prints a sensible comparison."""

from __future__ import annotations

import json
from pathlib import Path

from script_runs import run_python

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "retrieval_compressor.py"
METHODS = ("pacms", "mmr", "top-k")


def _run(*args: str) -> str:
    # from above the repository, not the examples folder: paths must not depend on it
    return run_python(EXAMPLE, *args, cwd=EXAMPLE.parent.parent.parent)


def test_example_json_report() -> None:
    report = json.loads(_run("--json", "--budget", "80", "--k", "5"))
    assert report["settings"] == {"budget": 80, "k": 5, "fetch_k": 20, "documents": 59}
    assert len(report["results"]) == 3
    for result in report["results"]:
        assert tuple(result["methods"]) == METHODS
        pacms = result["methods"]["pacms"]
        assert 0 < pacms["tokens"] <= 80
        assert result["methods"]["top-k"]["docs"] == result["methods"]["mmr"]["docs"] == 5
        for m in result["methods"].values():
            assert m["docs"] == len(m["ids"]) == len(set(m["ids"]))
            assert set(m["facts"]) == set(result["methods"]["pacms"]["facts"])
        # the most direct fact of each question survives the budget
        assert next(iter(pacms["facts"].values())) is True


def test_example_table() -> None:
    out = _run()
    assert out.count("Q: ") == 3
    assert "How do I rotate the staging database password?" in out
    for name in METHODS:
        assert out.count(f"  {name} ") >= 4  # three rows and one total
    assert "Total key facts kept (tokens):" in out
