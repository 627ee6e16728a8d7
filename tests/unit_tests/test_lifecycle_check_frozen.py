"""Checking and stepping give exactly what they gave before the rehearsal was made fast.

``tests/fixtures/lifecycle_check_frozen.json`` holds, for seeded synthetic coding-agent
histories (``lifecycle_check_cases``), what ``check_actions`` gave for the planner's plan and for
random actions (accepted, rejections with reasons, the rehearsed messages by digest, sidecars,
tokens saved per object) and what a harness stepping through a run committed, computed by the
code before any of the speed-ups. Every value must come out the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lifecycle_check_cases import frozen_cases

FROZEN: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "lifecycle_check_frozen.json").read_text("utf-8")
)


@pytest.fixture(scope="module")
def now() -> dict[str, Any]:
    return frozen_cases()


def test_every_frozen_case_is_computed(now: dict[str, Any]) -> None:
    assert sorted(now) == sorted(FROZEN)


@pytest.mark.parametrize("case", sorted(FROZEN))
def test_the_outcome_is_the_frozen_one(now: dict[str, Any], case: str) -> None:
    assert json.loads(json.dumps(now[case])) == FROZEN[case]
