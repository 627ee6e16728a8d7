"""Every figure the docs quote from an example's output is that output's figure, run now.

Each check runs the example once, reads the figures out of its output and out of the prose that
quotes them, and compares the two, so a change of the example's numbers fails here until the
prose says the new ones.
"""

from __future__ import annotations

import re
from pathlib import Path

from script_runs import REPO, run_python

DOCS = REPO / "docs"


def paragraph(page: Path, marker: str) -> str:
    """The paragraph of ``page`` (blank-line separated) that holds ``marker``, on one line."""
    flat = [" ".join(p.split()) for p in page.read_text(encoding="utf-8").split("\n\n")]
    (found,) = [p for p in flat if marker in p]
    return found


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_compressor_md_quotes_the_comparison_example():
    out = run_python(REPO / "examples" / "retrieval_compressor.py")
    printed = {
        m["method"]: (m["facts"], int(m["tokens"]))
        for m in re.finditer(
            r"^\s+(?P<method>pacms|mmr|top-k)\s+(?P<facts>\d+/\d+) \((?P<tokens>\d+) tokens\)",
            out,
            re.M,
        )
    }
    page = (DOCS / "compressor.md").read_text(encoding="utf-8")
    quoted = {
        m["method"]: (m["facts"], number(m["tokens"]))
        for m in re.finditer(
            r"^\| (?P<method>pacms|mmr|top-k) \(.*?\) \| "
            r"(?P<facts>\d+/\d+) \| (?P<tokens>[\d,]+) \|",
            page,
            re.M,
        )
    }
    assert set(printed) == {"pacms", "mmr", "top-k"}
    assert quoted == printed

    # and what the prose says of the three questions
    rows = re.findall(r"^\s+(pacms|mmr|top-k)\s+\d+\s+\d+\s+(\d+)/\d+", out, re.M)
    per_question = [dict(rows[i : i + 3]) for i in range(0, len(rows), 3)]
    assert len(per_question) == 3
    mmr_wins = sum(int(q["mmr"]) > max(int(q["pacms"]), int(q["top-k"])) for q in per_question)
    ties = all(q["pacms"] == q["top-k"] for q in per_question)
    prose = paragraph(DOCS / "compressor.md", "on each")
    words = {1: "one", 2: "two", 3: "all"}
    assert f"MMR wins {words[mmr_wins]} of the three questions" in prose
    assert ("PACMS keeps as many facts as top-k on each" in prose) == ties


def test_lifecycle_md_quotes_the_lifecycle_example():
    out = run_python(REPO / "examples" / "lifecycle_with_selection.py")
    printed = [(int(a), int(b)) for a, b in re.findall(r"history (\d+) -> (\d+) tokens", out)]
    prose = paragraph(DOCS / "lifecycle.md", "examples/lifecycle_with_selection.py` runs this")
    quoted = [(number(a), number(b)) for a, b in re.findall(r"from ([\d,]+) to ([\d,]+)", prose)]
    assert printed and quoted == printed
    words = {1: "one commit", 2: "two commits", 3: "three commits", 4: "four commits"}
    assert words[len(printed)] in prose
    assert "byte for byte" in prose and "byte for byte: True" in out
