"""The recall pools the library's frozen-pick test solves are the bench's own pools.

``tests/unit_tests/test_frozen_picks.py`` checks ``pacms`` picks on the pools of the recall
fixture (``bench/tests/fixtures/lme_mini``, redundancy levels 0, 2 and 8, full restatements,
seed 0). The library's tests do not import the bench, so those pools are kept as text in
``tests/fixtures/lme_mini_pools.json``; this test checks that the bench still builds exactly
them.

Regenerate (only when the loader or the injection change on purpose)::

    python bench/tests/unit_tests/test_frozen_pools.py --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pacms_bench.recall import load_questions
from pacms_bench.redundancy import inject_redundancy

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "lme_mini"
POOLS = REPO / "tests" / "fixtures" / "lme_mini_pools.json"
LEVELS = (0, 2, 8)


def pools() -> dict[str, Any]:
    """Per question: its text and, per level, the pool as ``[text, position]`` pairs."""
    out: dict[str, Any] = {}
    for question in load_questions(FIXTURE, n=None):
        levels = {}
        for level in LEVELS:
            pool = inject_redundancy(question.rounds, level, style="full", seed=0)
            levels[str(level)] = [[p.text, p.position] for p in pool]
        out[question.question_id] = {"question": question.question, "levels": levels}
    return out


def test_the_frozen_pools_are_the_bench_pools() -> None:
    assert json.loads(POOLS.read_text(encoding="utf-8")) == pools()


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    POOLS.write_text(json.dumps(pools(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {POOLS}")
